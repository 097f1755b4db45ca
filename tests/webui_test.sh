#!/bin/sh
# webui_test.sh — the chat page at GET / in headless chromium (Debian's
# package) through puppeteer-core (tests/package.json), both installed by
# tools/setup.sh: tests/node/webui.mjs against two `kvloom serve` on
# stories260K (one plain and slowed down so that a long answer can be stopped,
# one with an API key that allows the first one's origin). Leaves a
# screenshot in $KVLOOM_BUILD/webui.png (and webui-key.png, the key dialog).
# Env: KVLOOM_BIN, KVLOOM_SHARED, KVLOOM_BUILD, CHROMIUM.
. "$(dirname "$0")/lib.sh"
MODEL="$SHARED/models/stories260K.gguf"
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

[ -x "$CHROMIUM" ] || { bad "chromium ($CHROMIUM) is missing: run tools/setup.sh (make test does)"; finish; }
need_node puppeteer-core
serve_start a -m "$MODEL" -t 1 --kv-mem 16M --step-delay-us 10000
serve_wait a || finish
A=$url
serve_up b -m "$MODEL" -t 1 --kv-mem 16M --api-key webui-secret --alias tiny --cors-origin "$A" || finish
KB=$url

# The page and its assets are public; the API is not.
check '[ "$(http_code $KB/)" = 200 ]' "GET / without the key"
check '[ "$(http_code $KB/app.js)" = 200 ]' "GET /app.js without the key"
check 'curl -s -m 10 -D - -o /dev/null $KB/app.css | grep -qi "^content-type: text/css"' "app.css content type"
check '[ "$(http_code $KB/v1/models)" = 401 ]' "the API still wants the key"
check '[ "$(http_code $KB/nope.js)" = 401 ]' "an unknown path is not a page"
etag=$(curl -s -m 10 -D - -o /dev/null "$KB/" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: //p')
check '[ -n "$etag" ] && [ "$(http_code -H "If-None-Match: $etag" $KB/)" = 304 ]' "ETag / 304"

shot="$(cd "$B" && pwd)/webui.png"
(cd "$ROOT/tests" && timeout 200 node node/webui.mjs "$A" "$KB" webui-secret "$shot") > "$tmp/node.out" 2>&1
node_tally webui.mjs "$tmp/node.out" $?
check '[ -s "$B/webui.png" ]' "screenshot $B/webui.png"

for n in a b; do serve_stop $n; done
[ $fail -ne 0 ] && tail -n 15 "$tmp/a.log" "$tmp/b.log"
finish
