#!/bin/sh
# ollama_test.sh — the Ollama API (/api/chat, /api/generate, /api/tags,
# /api/show, /api/version) end to end through the official `ollama` npm client
# (tests/package.json; tests/node/ollama.mjs), against `kvloom serve` with two
# models: the shared stories260K (ChatML fallback template, generic tool
# calls) and a tiny RANDOM-weight Qwen3 (its own template: hermes calls,
# <think>), where only constrained decoding makes outputs parse; the script
# validates them against their schemas itself.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_BUILD (where the generated
# model is cached), KVLOOM_SHARED (../shared). Ends with "N passed, N failed".
BIN=${KVLOOM_BIN:-build/kvloom}
B=${KVLOOM_BUILD:-build}
SHARED=${KVLOOM_SHARED:-../shared}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${OLLAMA_TEST_T:-90} # deadline of one node script in seconds (its own is 10 s shorter)
pass=0; fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() {
    echo "ollama_test: $pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit $?
}

tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Node and the client: missing ones are failures, never a silent skip.
if ! command -v node >/dev/null 2>&1; then
    bad "node is missing (tools/setup.sh installs it)"
    finish
fi
[ -f "$ROOT/tests/node_modules/ollama/package.json" ] ||
    bad "tests/node_modules/ollama is missing: run tools/setup.sh (npm ci in tests/)"
[ $fail -ne 0 ] && finish

# The Qwen3 model: random weights, the real vocabulary and template;
# generated once per build directory (again when the kvloom binary is newer),
# in the same place and shape as tools_test.sh's.
M="$B/tools-models"
mkdir -p "$M"
QWEN="$M/qwen3-tiny.gguf"
if [ ! -s "$QWEN" ] || [ "$BIN" -nt "$QWEN" ]; then
    if timeout 180 "$BIN" gen --preset qwen3-0.6b --n-layer 2 --n-embd 128 --n-head 4 --n-head-kv 2 --head-dim 32 \
            --n-ff 256 --type Q8_0 --shared "$SHARED" -o "$QWEN.$$.tmp" > "$tmp/gen.log" 2>&1 && [ -s "$QWEN.$$.tmp" ]; then
        mv "$QWEN.$$.tmp" "$QWEN"
    else
        rm -f "$QWEN.$$.tmp"
        bad "kvloom gen --preset qwen3-0.6b"; cat "$tmp/gen.log"
        finish
    fi
fi
STORIES="$SHARED/models/stories260K.gguf"

start_server() { # name, model file
    "$BIN" serve -m "$2" --port 0 --ready-file "$tmp/$1.port" -t 1 --kv-mem 64M --max-body 256K 2> "$tmp/$1.log" &
    echo $! > "$tmp/$1.pid"
    pids="$pids $!"
}
wait_port() { # name -> prints the port, or nothing
    i=0
    while [ ! -s "$tmp/$1.port" ] && [ $i -lt 600 ] && kill -0 "$(cat "$tmp/$1.pid")" 2>/dev/null; do
        sleep 0.1; i=$((i + 1))
    done
    cat "$tmp/$1.port" 2>/dev/null
}
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
run_model() { # name, model id, model file
    port=$(wait_port "$1")
    if [ -z "$port" ]; then
        echo "server $1 did not start" > "$tmp/$1.nostart"
        return
    fi
    file=$(abs "$3")
    (cd "$ROOT/tests" && timeout -k 5 "$T" node node/ollama.mjs "http://127.0.0.1:$port" "$2" "$file" $(( (T - 10) * 1000 ))) \
        > "$tmp/$1.out" 2>&1
    echo $? > "$tmp/$1.status"
}

start_server stories "$STORIES"
start_server qwen3 "$QWEN"
run_model stories stories260K "$STORIES" & r1=$!
run_model qwen3 qwen3-tiny "$QWEN" & r2=$!
wait $r1 $r2

for m in stories qwen3; do
    if [ -f "$tmp/$m.nostart" ]; then
        bad "server $m did not start"
        echo "--- server log ($m)"; tail -n 40 "$tmp/$m.log"
        continue
    fi
    mfail=0
    out="$tmp/$m.out"; st=$(cat "$tmp/$m.status" 2>/dev/null || echo 1)
    grep -v -E '^ollama \([^)]*\): [0-9]+ passed, [0-9]+ failed$' "$out"
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
    if [ -z "$line" ]; then
        bad "ollama.mjs ($m): no result (exit $st; 124 = timed out)"; mfail=1
    else
        p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
        echo "ollama.mjs ($m): $p passed, $f failed"
        pass=$((pass + p)); fail=$((fail + f))
        [ "$f" -ne 0 ] && mfail=1
        if [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then bad "ollama.mjs ($m): exit status $st"; mfail=1; fi
    fi
    # A clean exit on SIGTERM (under ASan this also catches leaks).
    pid=$(cat "$tmp/$m.pid")
    kill -TERM "$pid" 2>/dev/null
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -9 "$pid" 2>/dev/null
    wait "$pid"; st=$?
    if [ $st -eq 0 ]; then pass=$((pass + 1)); else bad "server $m: exit status $st on SIGTERM"; mfail=1; fi
    if [ $mfail -ne 0 ]; then echo "--- server log ($m), last 40 lines"; tail -n 40 "$tmp/$m.log"; fi
done
finish
