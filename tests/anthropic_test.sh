#!/bin/sh
# anthropic_test.sh — the Anthropic Messages API end to end through the
# official `@anthropic-ai/sdk` client from npm (tests/package.json), in
# tests/node/anthropic.mjs, against `kvloom serve --api-key` with a tiny
# RANDOM-weight Qwen3 (real vocabulary and chat template: hermes calls,
# <think> reasoning). With random weights only constrained decoding makes the
# calls valid; the script validates each one itself.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_BUILD (where the generated
# model is cached, shared with tools_test.sh), KVLOOM_SHARED (../shared).
# Ends with "N passed, N failed".
BIN=${KVLOOM_BIN:-build/kvloom}
B=${KVLOOM_BUILD:-build}
SHARED=${KVLOOM_SHARED:-../shared}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${ANTHROPIC_TEST_T:-150} # deadline of the node script in seconds
pass=0; fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() {
    echo "anthropic_test: $pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit $?
}

tmp=$(mktemp -d)
pid=""
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Node and the packages: missing ones are failures, never a silent skip.
if ! command -v node >/dev/null 2>&1; then
    bad "node is missing (tools/setup.sh installs it)"
    finish
fi
for pkg in @anthropic-ai/sdk; do
    [ -f "$ROOT/tests/node_modules/$pkg/package.json" ] || bad "tests/node_modules/$pkg is missing: run tools/setup.sh (npm ci in tests/)"
done
[ $fail -ne 0 ] && finish

# The model: random weights, the real Qwen3 vocabulary; generated once per
# build directory (again when the kvloom binary is newer).
M="$B/tools-models"
mkdir -p "$M"
f="$M/qwen3-tiny.gguf"
if [ ! -s "$f" ] || [ "$BIN" -nt "$f" ]; then
    if timeout 180 "$BIN" gen --preset qwen3-0.6b --n-layer 2 --n-embd 128 --n-head 4 --n-head-kv 2 --head-dim 32 \
            --n-ff 256 --type Q8_0 --shared "$SHARED" -o "$f.tmp.$$" > "$tmp/gen.log" 2>&1 && [ -s "$f.tmp.$$" ]; then
        mv "$f.tmp.$$" "$f"
    else
        rm -f "$f.tmp.$$"
        bad "kvloom gen --preset qwen3-0.6b"; cat "$tmp/gen.log"
        finish
    fi
fi

KEY=sk-ant-kvloom-test
"$BIN" serve -m "$f" --port 0 --ready-file "$tmp/port" -t 1 --kv-mem 64M --api-key "$KEY" 2> "$tmp/server.log" &
pid=$!
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 600 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
port=$(cat "$tmp/port" 2>/dev/null)
if [ -z "$port" ]; then
    bad "the server did not start"; tail -n 40 "$tmp/server.log"
    finish
fi

(cd "$ROOT/tests" && timeout -k 5 "$T" node node/anthropic.mjs "http://127.0.0.1:$port" "$KEY" $(( (T - 10) * 1000 ))) \
    > "$tmp/node.out" 2>&1
st=$?
grep -v -E '^anthropic: [0-9]+ passed, [0-9]+ failed$' "$tmp/node.out"
line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/node.out" | tail -n 1)
if [ -z "$line" ]; then
    bad "anthropic.mjs: no result (exit $st; 124 = timed out)"
else
    p=$(echo "$line" | awk '{print $1}'); fl=$(echo "$line" | awk '{print $3}')
    echo "anthropic.mjs: $p passed, $fl failed"
    pass=$((pass + p)); fail=$((fail + fl))
    if [ "$st" -ne 0 ] && [ "$fl" -eq 0 ]; then bad "anthropic.mjs: exit status $st"; fi
fi

# A clean exit on SIGTERM (under ASan this also catches leaks).
kill -TERM "$pid" 2>/dev/null
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
kill -9 "$pid" 2>/dev/null
wait "$pid"; st=$?
pid=""
if [ $st -eq 0 ]; then pass=$((pass + 1)); else bad "server: exit status $st on SIGTERM"; fi
[ $fail -ne 0 ] && { echo "--- server log, last 40 lines"; tail -n 40 "$tmp/server.log"; }
finish
