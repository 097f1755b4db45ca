#!/bin/sh
# shutdown_test.sh — `kvloom serve`'s life cycle ends:
#  - SIGINT while a stream runs: the stream finishes normally within
#    --shutdown-timeout, new connections are refused, a new request on a
#    connection opened before gets 503, exit 0, "1 request finished";
#  - SIGTERM with --shutdown-timeout 1 while a long stream and a long whole
#    answer run: the stream ends with an error event and data: [DONE], the
#    whole answer is a 503 error object, exit 0 within the timeout (+ margin),
#    "2 cancelled";
#  - a second signal cancels at once;
#  - a taken port: one line on stderr, non-zero exit, before the model loads;
#  - SIGUSR1 logs a status line and the server goes on; SIGHUP and SIGQUIT
#    drain like SIGTERM (exit 0).
# Every server runs with --step-delay-us so generation is slow enough to be
# caught in flight. Env: KVLOOM_BIN, KVLOOM_SHARED.
. "$(dirname "$0")/lib.sh"
MODEL="$SHARED/models/stories260K.gguf"
start() { # name, flags...
    n=$1; shift
    serve_up "$n" -m "$MODEL" -t 1 --kv-mem 16M --step-delay-us 20000 "$@"
}
wait_running() { # server name: until /metrics shows a running request
    i=0
    while [ $i -lt 100 ]; do
        curl -s -m 5 "$1/metrics" | grep -q "^kvloom_requests_running [1-9]" && return 0
        sleep 0.05; i=$((i + 1))
    done
    return 1
}
CHAT='{"messages":[{"role":"user","content":"Tell me a story"}],"temperature":0,"stream":true,"max_tokens":'

# --- 1: the running stream finishes; nothing new gets in ---
start a --shutdown-timeout 20 || finish
A=$url
# One connection, two requests: a stream of ~60 steps, then (reusing the
# connection, once the stream is over and the drain has begun) /v1/models.
curl -s -N -m 60 -o "$tmp/a.sse" -d "${CHAT}60}" "$A/v1/chat/completions" \
    --next -s -m 30 -o "$tmp/a.second" -w '%{http_code} %{num_connects}' "$A/v1/models" > "$tmp/a.codes" &
c=$!
wait_running "$A" || bad "the stream did not start"
kill -INT "$(cat "$tmp/a.pid")"
sleep 0.3
curl -s -m 5 -o /dev/null "$A/health"; cst=$?
check '[ $cst -eq 7 ]' "a new connection during the drain is refused (curl status $cst)"
wait $c
serve_reap a 200
check '[ "$st" = 0 ]' "exit 0 after SIGINT (status $st)"
check 'grep -q "\"finish_reason\":\"length\"" "$tmp/a.sse" && tail -n 2 "$tmp/a.sse" | grep -q "^data: \[DONE\]"' \
    "the running stream finished normally: $(tail -c 300 "$tmp/a.sse")"
check '! grep -q "\"error\"" "$tmp/a.sse"' "no error event in a stream that finished"
check '[ "$(cat "$tmp/a.codes")" = "503 0" ]' "a new request on an open connection gets 503 (code, new connections: $(cat "$tmp/a.codes"))"
check 'grep -q "shutting down" "$tmp/a.second"' "503 body: $(cat "$tmp/a.second")"
check 'grep -q "SIGINT: shutting down; 1 request running" "$tmp/a.log"' "drain logged"
check 'grep -q "shutdown: 1 request finished, 0 cancelled" "$tmp/a.log"' "outcome logged: $(tail -n 3 "$tmp/a.log")"

# --- 2: past the timeout, what runs is cancelled cleanly ---
start b --shutdown-timeout 1 || finish
UB=$url
curl -s -N -m 60 -o "$tmp/b.sse" -d "${CHAT}100000}" "$UB/v1/chat/completions" & c1=$!
curl -s -m 60 -o "$tmp/b.json" -w '%{http_code}' -d '{"prompt":"Once","max_tokens":100000}' "$UB/v1/completions" > "$tmp/b.code" & c2=$!
wait_running "$UB" || bad "requests did not start"
sleep 0.3
kill -TERM "$(cat "$tmp/b.pid")"
serve_reap b 60
check '[ "$st" = 0 ]' "exit 0 after SIGTERM with requests cut (status $st)"
check '[ $secs -ge 8 ] && [ $secs -le 40 ]' "exit after the 1 s timeout, not before nor much later ($secs tenths)"
wait $c1 $c2
check 'grep -q "^data: {\"error\":{\"message\":\"[^\"]*shutting down" "$tmp/b.sse"' "the stream got an error event: $(tail -c 300 "$tmp/b.sse")"
check 'tail -n 2 "$tmp/b.sse" | grep -q "^data: \[DONE\]"' "the stream ended with data: [DONE]"
check 'grep -q "chat.completion.chunk" "$tmp/b.sse"' "the stream had sent tokens before"
check '[ "$(cat "$tmp/b.code")" = 503 ] && grep -q "\"type\":\"server_error\"" "$tmp/b.json"' "the whole answer is a 503 error object: $(cat "$tmp/b.code") $(cat "$tmp/b.json")"
check 'grep -q "shutdown: 0 requests finished, 2 cancelled" "$tmp/b.log"' "outcome logged: $(tail -n 3 "$tmp/b.log")"

# --- 3: a second signal does not wait ---
start c --shutdown-timeout 60 || finish
C=$url
curl -s -N -m 60 -o "$tmp/c.sse" -d "${CHAT}100000}" "$C/v1/chat/completions" & c1=$!
wait_running "$C" || bad "the stream did not start"
kill -TERM "$(cat "$tmp/c.pid")"
sleep 0.5
kill -TERM "$(cat "$tmp/c.pid")"
serve_reap c 50
check '[ "$st" = 0 ]' "a second signal ends the drain, exit 0 (status $st after $secs tenths)"
wait $c1
check 'tail -n 2 "$tmp/c.sse" | grep -q "^data: \[DONE\]"' "the stream still ends with [DONE]"

# --- 4: a taken port ---
start d || finish
port=$(cat "$tmp/d.port")
t0=$(date +%s%N)
"$BIN" serve -m "$MODEL" --port "$port" > "$tmp/taken.out" 2> "$tmp/taken.err"; st=$?
t1=$(date +%s%N)
check '[ $st -ne 0 ]' "a taken port exits non-zero"
check '[ "$(wc -l < "$tmp/taken.err")" -eq 1 ] && grep -q "serve: port $port is in use (--port to choose another)" "$tmp/taken.err"' \
    "one line: $(cat "$tmp/taken.err")"
check '[ $(( (t1 - t0) / 1000000 )) -lt 1000 ]' "refused at once ($(( (t1 - t0) / 1000000 )) ms)"
# SIGUSR1 logs a status line and changes nothing; SIGHUP drains (before
# issue 26 SIGHUP, SIGUSR1 and SIGQUIT killed the server without a drain)
kill -USR1 "$(cat "$tmp/d.pid")"
i=0; while ! grep -q "status: 0 requests in flight" "$tmp/d.log" && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
check 'grep -q "status: 0 requests in flight; 0 stored responses" "$tmp/d.log"' "SIGUSR1 logs a status line"
check 'curl -s -m 10 "http://127.0.0.1:$port/health" | grep -q "\"status\":\"ok\""' "serving after SIGUSR1"
kill -HUP "$(cat "$tmp/d.pid")"
serve_reap d 100
check '[ "$st" = 0 ]' "SIGHUP on an idle server: exit 0 (status $st)"
check 'grep -q "SIGHUP: shutting down" "$tmp/d.log"' "SIGHUP drains"
start e
kill -QUIT "$(cat "$tmp/e.pid")"
serve_reap e 100
check '[ "$st" = 0 ]' "SIGQUIT: exit 0 (status $st)"
check 'grep -q "SIGQUIT: shutting down" "$tmp/e.log"' "SIGQUIT drains"

[ $fail -ne 0 ] && tail -n 8 "$tmp"/*.log
finish
