# lib.sh — what the shell tests share; sourced by a test as
#   . "$(dirname "$0")/lib.sh"
# (the test's last line is "NAME: N passed, N failed", NAME its file's name
# without .sh).
# It sets BIN, B, SHARED, ROOT from the environment tests/run.sh gives
# (KVLOOM_BIN, KVLOOM_BUILD, KVLOOM_SHARED), the counters and checks (ok,
# bad, check, finish), a temporary directory $tmp removed on exit together
# with every server serve_start started, and:
#   serve_start NAME FLAGS...  kvloom serve on a free port (log $tmp/NAME.log)
#   serve_port NAME            its port once listening (up to 60 s), or ""
#   serve_stop NAME            SIGTERM; a clean exit is a pass (under ASan
#                              it also catches leaks)
#   need_node PKG...           node and tests/node_modules/PKG, or failures
#   qwen3_tiny                 $QWEN: a tiny random-weight Qwen3 with the real
#                              vocabulary and template, generated once per
#                              build directory (again when kvloom is newer)
#   node_tally LABEL FILE ST   a node script's "N passed, N failed" (in FILE,
#                              exit status ST) added to the counters
TEST_NAME=$(basename "$0" .sh)
BIN=${KVLOOM_BIN:-build/kvloom}
B=${KVLOOM_BUILD:-build}
SHARED=${KVLOOM_SHARED:-../shared}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
finish() {
    echo "$TEST_NAME: $pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit $?
}

tmp=$(mktemp -d)
pids=""
lib_cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap lib_cleanup EXIT
trap 'exit 1' INT TERM

serve_start() {
    n=$1; shift
    "$BIN" serve --port 0 --ready-file "$tmp/$n.port" "$@" 2> "$tmp/$n.log" &
    echo $! > "$tmp/$n.pid"
    pids="$pids $!"
}

serve_port() {
    i=0
    while [ ! -s "$tmp/$1.port" ] && [ $i -lt 600 ] && kill -0 "$(cat "$tmp/$1.pid")" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
    done
    cat "$tmp/$1.port" 2>/dev/null
}

serve_stop() {
    sp=$(cat "$tmp/$1.pid")
    kill -TERM "$sp" 2>/dev/null
    i=0
    while kill -0 "$sp" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$sp" 2>/dev/null
    wait "$sp"; st=$?
    if [ $st -eq 0 ]; then ok; else bad "server $1: exit status $st on SIGTERM"; fi
    return $st
}

need_node() {
    if ! command -v node >/dev/null 2>&1; then
        bad "node is missing (tools/setup.sh installs it)"
        finish
    fi
    for pkg; do
        [ -f "$ROOT/tests/node_modules/$pkg/package.json" ] ||
            bad "tests/node_modules/$pkg is missing: run tools/setup.sh (npm ci in tests/)"
    done
    [ $fail -ne 0 ] && finish
}

qwen3_tiny() {
    mkdir -p "$B/tools-models"
    QWEN="$B/tools-models/qwen3-tiny.gguf"
    [ -s "$QWEN" ] && [ ! "$BIN" -nt "$QWEN" ] && return 0
    if timeout 180 "$BIN" gen --preset qwen3-0.6b --n-layer 2 --n-embd 128 --n-head 4 --n-head-kv 2 --head-dim 32 \
            --n-ff 256 --type Q8_0 --shared "$SHARED" -o "$QWEN.$$.tmp" > "$tmp/gen.log" 2>&1 && [ -s "$QWEN.$$.tmp" ]; then
        mv "$QWEN.$$.tmp" "$QWEN"
    else
        rm -f "$QWEN.$$.tmp"
        bad "kvloom gen --preset qwen3-0.6b"; cat "$tmp/gen.log"
        finish
    fi
}

node_tally() {
    grep -v -E '^[^ ]+( \([^)]*\))?: [0-9]+ passed, [0-9]+ failed$' "$2"
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    if [ -z "$line" ]; then
        bad "$1: no result (exit $3; 124 = timed out)"
        return 1
    fi
    np=$(echo "$line" | awk '{print $1}'); nf=$(echo "$line" | awk '{print $3}')
    echo "$1: $np passed, $nf failed"
    pass=$((pass + np)); fail=$((fail + nf))
    if [ "$3" -ne 0 ] && [ "$nf" -eq 0 ]; then bad "$1: exit status $3"; return 1; fi
    [ "$nf" -eq 0 ]
}
