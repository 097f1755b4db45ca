#!/bin/sh
# server_test.sh — the `kvloom serve` command line end to end with curl:
# flags (--api-key-file, --alias, --port 0 + --ready-file), a completion, a
# streamed chat, 401 without the key, and a clean exit on SIGTERM.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_SHARED (../shared).
BIN=${KVLOOM_BIN:-build/kvloom}
SHARED=${KVLOOM_SHARED:-../shared}
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

tmp=$(mktemp -d)
echo "key-from-file" > "$tmp/key"
"$BIN" serve -m "$SHARED/models/stories260K.gguf" --port 0 --ready-file "$tmp/port" \
    --api-key-file "$tmp/key" --alias tiny -t 2 --kv-mem 16M 2> "$tmp/log" &
pid=$!
trap 'kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 300 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
port=$(cat "$tmp/port" 2>/dev/null)
if [ -z "$port" ]; then
    bad "server did not start"; cat "$tmp/log"
    echo "server_test: $pass passed, $fail failed"; exit 1
fi
U="http://127.0.0.1:$port"
A="Authorization: Bearer key-from-file"

check '[ "$(curl -s -m 10 $U/health)" = "{\"status\":\"ok\"}" ]' "/health"
check '[ "$(curl -s -m 10 -o /dev/null -w %{http_code} $U/v1/models)" = 401 ]' "401 without the key"
check 'curl -s -m 10 -H "$A" $U/v1/models | grep -q "\"id\":\"tiny\""' "--alias in /v1/models"
out=$(curl -s -m 30 -H "$A" $U/v1/completions -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
check 'echo "$out" | grep -q "\"text\":\", there was a little girl\""' "completion text: $out"
check 'echo "$out" | grep -q "\"model\":\"tiny\""' "model id in the response"
sse=$(curl -s -N -m 30 -H "$A" $U/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
check 'echo "$sse" | grep -q "^data: \[DONE\]"' "chat stream ends with [DONE]"
check 'echo "$sse" | grep -q "chat.completion.chunk"' "chat chunks"
check 'grep -q "POST /v1/completions 200 prompt=5 cached=0 generated=8" "$tmp/log"' "one log line per request"

kill -TERM $pid
i=0
while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
wait $pid; st=$?
check '[ $st -eq 0 ]' "clean exit on SIGTERM (status $st)"
[ $fail -ne 0 ] && tail -20 "$tmp/log"
echo "server_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
