#!/bin/sh
# server_test.sh — the `kvloom serve` command line end to end with curl:
# flags (--api-key-file, --alias, --port 0 + --ready-file), a completion, a
# streamed chat, 401 without the key, and a clean exit on SIGTERM.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_SHARED (../shared).
. "$(dirname "$0")/lib.sh"

echo "key-from-file" > "$tmp/key"
serve_up main -m "$SHARED/models/stories260K.gguf" --api-key-file "$tmp/key" --alias tiny -t 2 --kv-mem 16M || finish
U=$url
A="Authorization: Bearer key-from-file"

version=$("$BIN" --version)
check '[ "$(curl -s -m 10 $U/health)" = "{\"status\":\"ok\",\"version\":\"${version#kvloom }\"}" ]' "/health with the version of kvloom --version ($version)"
check '[ "$(http_code $U/v1/models)" = 401 ]' "401 without the key"
check 'curl -s -m 10 -H "$A" $U/v1/models | grep -q "\"id\":\"tiny\""' "--alias in /v1/models"
out=$(curl -s -m 30 -H "$A" $U/v1/completions -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}')
check 'echo "$out" | grep -q "\"text\":\", there was a little girl\""' "completion text: $out"
check 'echo "$out" | grep -q "\"model\":\"tiny\""' "model id in the response"
sse=$(curl -s -N -m 30 -H "$A" $U/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
check 'echo "$sse" | grep -q "^data: \[DONE\]"' "chat stream ends with [DONE]"
check 'echo "$sse" | grep -q "chat.completion.chunk"' "chat chunks"
check 'grep -q "POST /v1/completions 200 prompt=5 cached=0 generated=8" "$tmp/main.log"' "one log line per request"

# llama-server's flag spellings, /props, the log (timestamps, 4xx reasons,
# --log-file), --no-webui; no-op flags said once.
# (each spelling given: an unknown flag refuses to start; the last of two
# spellings of one flag wins, so -c 200 and --parallel 3 show in /props)
serve_up flags -m "$SHARED/models/stories260K.gguf" --ctx-size 100 -c 200 -np 2 --parallel 3 -a llama \
    --jinja -fa on --flash-attn auto --metrics --jinja -ctk f16 -ctv f16 --cache-type-k f16 --cache-type-v f16 --log-file "$tmp/file.log" --no-webui -t 1 --kv-mem 16M
U2=$url
props=$(curl -s -m 10 "$U2/props")
pj() { echo "$props" | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{const o=JSON.parse(s);console.log(JSON.stringify($1))})"; }
check '[ "$(pj o.default_generation_settings.n_ctx)" = 200 ]' "/props n_ctx from -c: $props"
check '[ "$(pj o.total_slots)" = 3 ]' "/props total_slots from --parallel"
check '[ "$(pj o.model_alias)" = "\"llama\"" ]' "/props model_alias from -a"
check '[ "$(pj o.build_info)" = "\"$version\"" ] && [ "$(pj o.version)" = "\"${version#kvloom }\"" ] && [ "$(pj o.webui)" = false ]' "/props build_info and version ($version), webui false"
check '[ "$(pj "typeof o.chat_template + typeof o.default_generation_settings.params.temperature")" = "\"stringnumber\"" ]' "/props chat_template, params"
check '[ "$(http_code $U2/)" = 404 ]' "--no-webui: no chat page"
curl -s -m 10 "$U2/v1/completions" -d '{"prompt":"x","temperature":7}' > /dev/null
curl -s -m 10 "$U2/v1/chat/completions" -d '{"messages":[]}' > /dev/null
sleep 0.3
check 'grep -Eq "^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z kvloom info: POST /v1/completions 400 [0-9.]+ms \(.*temperature" "$tmp/flags.log"' \
    "a 4xx logged with a timestamp and its reason: $(grep ' 400 ' "$tmp/flags.log")"
check 'grep -q "POST /v1/chat/completions 400 .*messages" "$tmp/file.log"' "--log-file has the lines too"
check '[ "$(grep -c "jinja changes nothing" "$tmp/flags.log")" = 1 ] && grep -q "flash-attn changes nothing" "$tmp/flags.log" && grep -q "metrics changes nothing" "$tmp/flags.log"' \
    "no-op flags said once each"
kill -TERM "$(cat "$tmp/flags.pid")"
"$BIN" serve -m "$SHARED/models/stories260K.gguf" -ctk q4_0 --port 0 2> "$tmp/log3"; st=$?
check '[ $st -eq 2 ] && grep -q "ctk.*q4_0.*not supported" "$tmp/log3"' "-ctk q4_0 refused by name: $(cat "$tmp/log3")"
"$BIN" serve -m "$SHARED/models/stories260K.gguf" -ctk q8_0 -ctv f16 --port 0 2> "$tmp/log3"; st=$?
check '[ $st -eq 2 ] && grep -q "share one cache type" "$tmp/log3"' "-ctk q8_0 -ctv f16 refused: $(cat "$tmp/log3")"

# Templates: a --chat-template-file that does not parse refuses to start,
# naming line and column; an empty one too; a GGUF without a (working)
# template falls back with a warning that says what is lost.
printf '{%% for m in messages %%}\n{{ m.content }}\n{%% endfor' > "$tmp/bad.jinja"
"$BIN" serve -m "$SHARED/models/stories260K.gguf" --port 0 --chat-template-file "$tmp/bad.jinja" 2> "$tmp/log4"; st=$?
check '[ $st -ne 0 ] && grep -q "error: serve: .*--chat-template-file .*bad.jinja does not parse: line 3, column 10: unclosed" "$tmp/log4"' \
    "a broken --chat-template-file refuses to start: $(cat "$tmp/log4")"
: > "$tmp/empty.jinja"
"$BIN" serve -m "$SHARED/models/stories260K.gguf" --port 0 --chat-template-file "$tmp/empty.jinja" 2> "$tmp/log5"; st=$?
check '[ $st -ne 0 ] && grep -q "empty.jinja is empty" "$tmp/log5"' "an empty --chat-template-file refuses to start: $(cat "$tmp/log5")"
check 'grep -q "warn: serve: .*chat: the ChatML fallback (model has no chat template): .*tool calls use the generic" "$tmp/main.log"' \
    "the GGUF fallback is a warning saying what is lost"

serve_stop main
[ $fail -ne 0 ] && tail -20 "$tmp/main.log"
finish
