#!/bin/sh
# webui_test.sh — the chat page at GET / in headless chromium (Debian's
# package) through puppeteer-core (tests/package.json), both installed by
# tools/setup.sh: tests/node/webui.mjs against two `kvloom serve` on
# stories260K (one plain and slowed down so that a long answer can be stopped,
# one with an API key that allows the first one's origin). Leaves a
# screenshot in $KVLOOM_BUILD/webui.png (and webui-key.png, the key dialog).
# Env: KVLOOM_BIN, KVLOOM_SHARED, KVLOOM_BUILD, CHROMIUM.
BIN=${KVLOOM_BIN:-build/kvloom}
SHARED=${KVLOOM_SHARED:-../shared}
OUT=${KVLOOM_BUILD:-build}
MODEL="$SHARED/models/stories260K.gguf"
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }

if [ ! -x "$CHROMIUM" ] || [ ! -f tests/node_modules/puppeteer-core/package.json ]; then
    echo "FAIL: chromium ($CHROMIUM) or tests/node_modules/puppeteer-core missing: run tools/setup.sh (make test does)"
    echo "webui_test: 0 passed, 1 failed"; exit 1
fi
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
start() { # name, flags...
    n=$1; shift
    "$BIN" serve -m "$MODEL" --port 0 --ready-file "$tmp/$n.port" -t 1 --kv-mem 16M "$@" 2> "$tmp/$n.log" &
    echo $! > "$tmp/$n.pid"
    pids="$pids $!"
    i=0
    while [ ! -s "$tmp/$n.port" ] && [ $i -lt 300 ] && kill -0 "$(cat "$tmp/$n.pid")" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    [ -s "$tmp/$n.port" ] || { cat "$tmp/$n.log"; return 1; }
}
if ! start a --step-delay-us 10000; then
    bad "server A did not start"; echo "webui_test: $pass passed, $fail failed"; exit 1
fi
A="http://127.0.0.1:$(cat "$tmp/a.port")"
if ! start b --api-key webui-secret --alias tiny --cors-origin "$A"; then
    bad "server B did not start"; echo "webui_test: $pass passed, $fail failed"; exit 1
fi
B="http://127.0.0.1:$(cat "$tmp/b.port")"

# The page and its assets are public; the API is not.
check '[ "$(curl -s -m 10 -o /dev/null -w %{http_code} $B/)" = 200 ]' "GET / without the key"
check '[ "$(curl -s -m 10 -o /dev/null -w %{http_code} $B/app.js)" = 200 ]' "GET /app.js without the key"
check 'curl -s -m 10 -D - -o /dev/null $B/app.css | grep -qi "^content-type: text/css"' "app.css content type"
check '[ "$(curl -s -m 10 -o /dev/null -w %{http_code} $B/v1/models)" = 401 ]' "the API still wants the key"
check '[ "$(curl -s -m 10 -o /dev/null -w %{http_code} $B/nope.js)" = 401 ]' "an unknown path is not a page"
etag=$(curl -s -m 10 -D - -o /dev/null "$B/" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: //p')
check '[ -n "$etag" ] && [ "$(curl -s -m 10 -o /dev/null -w %{http_code} -H "If-None-Match: $etag" $B/)" = 304 ]' "ETag / 304"

(cd tests && timeout 200 node node/webui.mjs "$A" "$B" webui-secret "$(cd .. && pwd)/$OUT/webui.png") > "$tmp/node.out" 2>&1
st=$?
cat "$tmp/node.out"
line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/node.out" | tail -n 1)
if [ -n "$line" ]; then
    pass=$((pass + $(echo "$line" | awk '{print $1}'))); fail=$((fail + $(echo "$line" | awk '{print $3}')))
    [ $st -ne 0 ] && [ "$(echo "$line" | awk '{print $3}')" = 0 ] && bad "webui.mjs exit status $st"
else
    bad "webui.mjs gave no result (exit $st)"
fi
check '[ -s "$OUT/webui.png" ]' "screenshot $OUT/webui.png"

for n in a b; do
    p=$(cat "$tmp/$n.pid"); kill -TERM "$p"
    i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i + 1)); done
    wait "$p"; st=$?
    check '[ $st -eq 0 ]' "server $n: clean exit on SIGTERM (status $st)"
done
[ $fail -ne 0 ] && tail -n 15 "$tmp/a.log" "$tmp/b.log"
echo "webui_test: $pass passed, $fail failed"
[ $fail -eq 0 ]
