# lib.sh — what the shell tests share; sourced by a test as
#   . "$(dirname "$0")/lib.sh"
# (the test's last line is "NAME: N passed, N failed", NAME its file's name
# without .sh).
# It sets BIN, B, SHARED, ROOT from the environment tests/run.sh gives
# (KVLOOM_BIN, KVLOOM_BUILD, KVLOOM_SHARED), the counters and checks (ok,
# bad, check, finish), a temporary directory $tmp removed on exit together
# with every server serve_start started, and:
#   at_exit CMD                CMD run first by the exit cleanup (unmounting,
#                              stopping a cluster)
#   serve_start NAME FLAGS...  kvloom serve on a free port (log $tmp/NAME.log)
#   serve_port NAME            its port once listening (up to 60 s), or ""
#   serve_wait NAME            serve_port: the address http://127.0.0.1:PORT
#                              in $url; when the server does not come up, its
#                              log, a failure and status 1
#   serve_up NAME FLAGS...     serve_start, then serve_wait
#   serve_reap NAME TENTHS     waits up to TENTHS tenths of a second for the
#                              server to exit, then kills it: $st is its exit
#                              status (or "running"), $secs the tenths waited
#   serve_end NAME [SIGNAL]    SIGNAL (TERM), then serve_reap NAME 150
#   serve_stop NAME            serve_end; a clean exit is a pass (under ASan
#                              it also catches leaks)
#   http_code ARGS...          curl ARGS (-s -m 10): the status code only
#   metric URL SERIES          SERIES's value in URL/metrics ("" if absent)
#   need_node PKG...           node and tests/node_modules/PKG, or failures
#   gen_model FILE FLAGS...    kvloom gen FLAGS -o FILE, unless FILE is there
#                              and newer than kvloom (cached per build
#                              directory; a failure ends the test)
#   qwen3_tiny                 $QWEN: a tiny random-weight Qwen3 with the real
#                              vocabulary and template
#   embed_tiny                 $BERT (a tiny random bert with bge's vocabulary,
#                              CLS pooling) and $QEMB (a tiny random qwen3,
#                              last-token pooling) in $B/embed-models
#   node_tally LABEL FILE ST   a node script's "N passed, N failed" (in FILE,
#                              exit status ST) added to the counters
#   line_tally N OUT           a checker's output, one line per check ("ok",
#                              or "FAIL ..." printed), added to the counters;
#                              fewer than N "ok" and no FAIL is a failure
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
exit_cmds=""
at_exit() { exit_cmds="$exit_cmds$1;"; }
lib_cleanup() {
    eval "$exit_cmds"
    for _p in $pids; do kill -9 "$_p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap lib_cleanup EXIT
trap 'exit 1' INT TERM

serve_start() {
    _n=$1; shift
    "$BIN" serve --port 0 --ready-file "$tmp/$_n.port" "$@" 2> "$tmp/$_n.log" &
    echo $! > "$tmp/$_n.pid"
    pids="$pids $!"
}

serve_port() {
    _i=0
    while [ ! -s "$tmp/$1.port" ] && [ $_i -lt 600 ] && kill -0 "$(cat "$tmp/$1.pid")" 2>/dev/null; do
        sleep 0.1; _i=$((_i + 1))
    done
    cat "$tmp/$1.port" 2>/dev/null
}

serve_wait() {
    _port=$(serve_port "$1")
    if [ -z "$_port" ]; then
        url=""
        bad "server $1 did not start"; tail -n 40 "$tmp/$1.log"
        return 1
    fi
    url="http://127.0.0.1:$_port"
}

serve_up() { serve_start "$@" && serve_wait "$1"; }

serve_reap() { # (polled every 20 ms: a stop costs no more than the exit)
    _sp=$(cat "$tmp/$1.pid"); _k=0; _t0=$(date +%s%N)
    while kill -0 "$_sp" 2>/dev/null && [ $_k -lt $(($2 * 5)) ]; do sleep 0.02; _k=$((_k + 1)); done
    secs=$(( ($(date +%s%N) - _t0) / 100000000 ))
    if kill -0 "$_sp" 2>/dev/null; then
        st=running; kill -9 "$_sp"; wait "$_sp" 2>/dev/null
    else
        wait "$_sp"; st=$?
    fi
}

serve_end() {
    kill -"${2:-TERM}" "$(cat "$tmp/$1.pid")" 2>/dev/null
    serve_reap "$1" 150
}

serve_stop() {
    serve_end "$1"
    if [ "$st" = 0 ]; then ok; else bad "server $1: exit status $st on SIGTERM"; fi
    [ "$st" = 0 ]
}

http_code() { curl -s -m 10 -o /dev/null -w '%{http_code}' "$@"; }

metric() { curl -s -m 10 "$1/metrics" | awk -v k="$2" '$1 == k { print $2 }'; }

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

gen_model() {
    _f=$1; shift
    [ -s "$_f" ] && [ ! "$BIN" -nt "$_f" ] && return 0
    mkdir -p "$(dirname "$_f")"
    if timeout 300 "$BIN" gen "$@" -o "$_f.$$.tmp" > "$tmp/gen.log" 2>&1 && [ -s "$_f.$$.tmp" ]; then
        mv "$_f.$$.tmp" "$_f"
    else
        rm -f "$_f.$$.tmp"
        bad "kvloom gen $*"; cat "$tmp/gen.log"
        finish
    fi
}

qwen3_tiny() {
    QWEN="$B/tools-models/qwen3-tiny.gguf"
    gen_model "$QWEN" --preset qwen3-0.6b --n-layer 2 --n-embd 128 --n-head 4 --n-head-kv 2 --head-dim 32 \
        --n-ff 256 --type Q8_0 --shared "$SHARED"
}

embed_tiny() {
    BERT="$B/embed-models/bert-tiny.gguf"
    QEMB="$B/embed-models/qwen3-emb-tiny.gguf"
    gen_model "$BERT" --arch bert --n-embd 64 --n-layer 2 --n-head 4 --n-ff 128 --n-vocab 30522 --n-ctx 128 \
        --pooling cls --vocab "$SHARED/vocab/ggml-vocab-bert-bge.gguf" --seed 21 --type F32 --shared "$SHARED"
    gen_model "$QEMB" --arch qwen3 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --n-vocab 300 \
        --pooling last --seed 22 --type F32 --shared "$SHARED"
}

node_tally() {
    grep -v -E '^[^ ]+( \([^)]*\))?: [0-9]+ passed, [0-9]+ failed$' "$2"
    _line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    if [ -z "$_line" ]; then
        bad "$1: no result (exit $3; 124 = timed out)"
        return 1
    fi
    _np=$(echo "$_line" | awk '{print $1}'); _nf=$(echo "$_line" | awk '{print $3}')
    echo "$1: $_np passed, $_nf failed"
    pass=$((pass + _np)); fail=$((fail + _nf))
    if [ "$3" -ne 0 ] && [ "$_nf" -eq 0 ]; then bad "$1: exit status $3"; return 1; fi
    [ "$_nf" -eq 0 ]
}

line_tally() {
    echo "$2" | grep -v '^ok$'
    _no=$(echo "$2" | grep -c '^ok$'); _nb=$(echo "$2" | grep -c '^FAIL')
    pass=$((pass + _no)); fail=$((fail + _nb))
    [ "$_no" -ge "$1" ] || [ "$_nb" -gt 0 ] || bad "the checker did not run"
}
