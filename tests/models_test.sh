#!/bin/sh
# models_test.sh — several models by name in one server (tests/node/models.mjs
# through the `openai` and `ollama` clients and the Anthropic route):
# stories260K (--alias stories), a tiny random bert encoder and a tiny qwen3
# last-token embedder, with --models-max 2 and --models-idle 2, every load
# slowed by 0.7 s (--load-delay-ms) so that a request to another model runs
# during one. Also: a
# clean exit on SIGTERM with models loaded and unloaded along the way.
# Env: KVLOOM_BIN, KVLOOM_BUILD (model cache, shared with embed_test.sh),
# KVLOOM_SHARED. Ends with "N passed, N failed".
BIN=${KVLOOM_BIN:-build/kvloom}
B=${KVLOOM_BUILD:-build}
SHARED=${KVLOOM_SHARED:-../shared}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${MODELS_TEST_T:-90}
pass=0; fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() { echo "models_test: $pass passed, $fail failed"; [ $fail -eq 0 ]; exit $?; }
tmp=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' INT TERM
command -v node >/dev/null 2>&1 || { bad "node is missing"; finish; }

M="$B/embed-models"; mkdir -p "$M"
gen() {
    f=$1; shift
    if [ ! -s "$f" ] || [ "$BIN" -nt "$f" ]; then
        timeout 120 "$BIN" gen "$@" --type F32 --shared "$SHARED" -o "$f.$$.tmp" > "$tmp/gen.log" 2>&1 && mv "$f.$$.tmp" "$f" ||
            { rm -f "$f.$$.tmp"; bad "kvloom gen $*"; cat "$tmp/gen.log"; finish; }
    fi
}
gen "$M/bert-tiny.gguf" --arch bert --n-embd 64 --n-layer 2 --n-head 4 --n-ff 128 --n-vocab 30522 --n-ctx 128 --pooling cls \
    --vocab "$SHARED/vocab/ggml-vocab-bert-bge.gguf" --seed 21
gen "$M/qwen3-emb-tiny.gguf" --arch qwen3 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --n-vocab 300 --pooling last --seed 22

IDLE=2
"$BIN" serve -m "$SHARED/models/stories260K.gguf" --alias stories -m "$M/bert-tiny.gguf" -m "$M/qwen3-emb-tiny.gguf" \
    --models-max 2 --models-idle $IDLE --load-delay-ms 700 --kv-mem 64M --check --port 0 --ready-file "$tmp/port" -t 1 2> "$tmp/log" &
pid=$!
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 300 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
port=$(cat "$tmp/port" 2>/dev/null)
[ -n "$port" ] || { bad "the server did not start"; cat "$tmp/log"; finish; }
(cd "$ROOT/tests" && timeout -k 5 "$T" node node/models.mjs "http://127.0.0.1:$port" $IDLE $(( (T - 10) * 1000 ))) > "$tmp/out" 2>&1
grep -v -E '^models: [0-9]+ passed, [0-9]+ failed$' "$tmp/out"
line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/out" | tail -n 1)
if [ -z "$line" ]; then bad "models.mjs: no result"; else
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    echo "models.mjs: $p passed, $f failed"; pass=$((pass + p)); fail=$((fail + f))
    [ "$f" -ne 0 ] && { echo "--- server log"; tail -n 40 "$tmp/log"; }
fi
# two loads of qwen3-emb-tiny (LRU section, the slow-load section): a
# request that waited on a load did not start a second one
n=$(grep -c 'serve: model qwen3-emb-tiny (' "$tmp/log")
if [ "$n" -eq 2 ]; then pass=$((pass + 1)); else bad "qwen3-emb-tiny loaded $n times, not 2"; fi
kill -TERM $pid
i=0
while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
wait $pid; st=$?; pid=""
if [ $st -eq 0 ]; then pass=$((pass + 1)); else bad "exit status $st on SIGTERM"; tail -n 20 "$tmp/log"; fi
finish
