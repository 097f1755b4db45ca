#!/bin/sh
# cors_test.sh — CORS with curl: no CORS header without --cors-origin (and
# OPTIONS is 204, not 405); with it, preflights on every route (including the
# API key's routes and unknown paths) answer 204 with the matching origin,
# methods, headers (Authorization, Content-Type and what was asked for) and
# Max-Age, without the key; actual answers -- JSON, SSE streams, 401s, 404s,
# 400s -- carry Access-Control-Allow-Origin and Vary: Origin for an allowed
# origin and no grant for another; "*" and comma lists.
# Env: KVLOOM_BIN, KVLOOM_SHARED.
. "$(dirname "$0")/lib.sh"
MODEL="$SHARED/models/stories260K.gguf"
start() { # name, flags...
    n=$1; shift
    serve_start "$n" -m "$MODEL" -t 1 --kv-mem 16M "$@"
}
# headers of a request, lower-cased names, no CR
hdrs() { curl -s -m 20 -D - -o "$tmp/body" "$@" | tr -d '\r' | sed 's/^\([^:]*\):/\L\1:/'; }
has() { echo "$1" | grep -qi "^$2"; }

start plain
start cors --api-key sekret --cors-origin http://app.test:3000 --cors-origin "https://one.test, https://two.test/"
start star --cors-origin '*'
serve_wait plain || finish; P=$url
serve_wait cors || finish; C=$url
serve_wait star || finish; S=$url
K="Authorization: Bearer sekret"

# --- default: no CORS at all ---
h=$(hdrs -X OPTIONS -H "Origin: http://app.test:3000" -H "Access-Control-Request-Method: POST" "$P/v1/chat/completions")
check 'has "$h" "HTTP/1.1 204"' "OPTIONS without --cors-origin is 204: $h"
check '! has "$h" "access-control-" && ! has "$h" "vary:"' "no CORS headers by default: $h"
check 'has "$h" "allow: GET, HEAD, POST"' "Allow header: $h"
h=$(hdrs -H "Origin: http://app.test:3000" "$P/v1/models")
check '! has "$h" "access-control-"' "no grant on an answer by default"

# --- preflight on every route, never needing the key ---
for path in /v1/chat/completions /v1/completions /v1/models /metrics /health / /no/such/route; do
    h=$(hdrs -X OPTIONS -H "Origin: http://app.test:3000" -H "Access-Control-Request-Method: POST" \
        -H "Access-Control-Request-Headers: authorization, content-type, x-stainless-os" "$C$path")
    check 'has "$h" "HTTP/1.1 204" && has "$h" "access-control-allow-origin: http://app.test:3000$"' "preflight $path: $h"
    check 'has "$h" "access-control-allow-methods: .*POST" && has "$h" "access-control-allow-methods: .*GET"' "methods $path"
    check 'has "$h" "access-control-allow-headers: .*Authorization" && has "$h" "access-control-allow-headers: .*Content-Type" && has "$h" "access-control-allow-headers: .*x-stainless-os"' "headers $path: $h"
    check 'has "$h" "access-control-max-age: [0-9]" && has "$h" "vary: .*Origin"' "max-age and vary $path"
done
h=$(hdrs -X OPTIONS -H "Origin: https://evil.test" -H "Access-Control-Request-Method: POST" "$C/v1/chat/completions")
check 'has "$h" "HTTP/1.1 204" && ! has "$h" "access-control-allow-origin"' "no grant for another origin: $h"
for o in https://one.test https://two.test; do
    h=$(hdrs -X OPTIONS -H "Origin: $o" -H "Access-Control-Request-Method: POST" "$C/v1/models")
    check 'has "$h" "access-control-allow-origin: $o$"' "comma list member $o: $h"
done
h=$(hdrs -X OPTIONS -H "Origin: https://one.test.evil" -H "Access-Control-Request-Method: POST" "$C/v1/models")
check '! has "$h" "access-control-allow-origin"' "an origin that merely starts like an allowed one"

# --- actual answers ---
O="Origin: http://app.test:3000"
h=$(hdrs -H "$O" -H "$K" "$C/v1/models")
check 'has "$h" "HTTP/1.1 200" && has "$h" "access-control-allow-origin: http://app.test:3000$" && has "$h" "vary: .*Origin"' "JSON answer: $h"
h=$(hdrs -H "$O" "$C/v1/models")
check 'has "$h" "HTTP/1.1 401" && has "$h" "access-control-allow-origin: http://app.test:3000$"' "401 carries the grant (the page can read it): $h"
h=$(hdrs -H "$O" -H "$K" "$C/v1/nope")
check 'has "$h" "HTTP/1.1 404" && has "$h" "access-control-allow-origin: http://app.test:3000$"' "404: $h"
h=$(hdrs -H "$O" -H "$K" "$C/v1/chat/completions" -d '{"messages": 3}')
check 'has "$h" "HTTP/1.1 400" && has "$h" "access-control-allow-origin: http://app.test:3000$"' "400: $h"
h=$(hdrs -N -H "$O" -H "$K" "$C/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true}')
check 'has "$h" "HTTP/1.1 200" && has "$h" "content-type: text/event-stream" && has "$h" "access-control-allow-origin: http://app.test:3000$"' "SSE stream: $h"
check 'grep -q "^data: \[DONE\]" "$tmp/body"' "the stream itself"
h=$(hdrs -H "Origin: https://evil.test" -H "$K" "$C/v1/models")
check 'has "$h" "HTTP/1.1 200" && ! has "$h" "access-control-allow-origin" && has "$h" "vary: .*Origin"' "another origin: answer without grant, with Vary: $h"
h=$(hdrs -H "$K" "$C/v1/models")
check '! has "$h" "access-control-allow-origin"' "no Origin, no grant"

# --- "*" ---
h=$(hdrs -X OPTIONS -H "Origin: http://anything.test:8000" -H "Access-Control-Request-Method: POST" "$S/v1/completions")
check 'has "$h" "access-control-allow-origin: http://anything.test:8000$"' "* allows any origin (echoed): $h"
h=$(hdrs -H "Origin: null" "$S/health")
check 'has "$h" "access-control-allow-origin: null$"' "* allows even the null origin (file:// pages): $h"

# --- flag errors ---
"$BIN" serve --cors-origin "app.test" > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -ne 0 ] && grep -q "cors-origin" "$tmp/err"' "an origin without a scheme is refused: $(cat "$tmp/err")"
"$BIN" serve --cors-origin "http://a.test/path" > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -ne 0 ] && grep -q "cors-origin" "$tmp/err"' "an origin with a path is refused: $(cat "$tmp/err")"

for n in plain cors star; do serve_stop $n; done
finish
