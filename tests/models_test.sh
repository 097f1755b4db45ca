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

# --models-dir, the KV budget rule and the caches per model: one model under
# two names (DIR/a.gguf, DIR/b.gguf and a file that is not a .gguf), so equal
# prompts are equal tokens and only the keying keeps them apart.
# --kv-mem 32M over --models-max 2: each pool is at most 16M, both the same.
# A prompt cached under a is not a hit under b (RAM), and after a restart a's
# blocks come back from a's disk directory only.
check() { if eval "$1"; then pass=$((pass + 1)); else bad "$2"; fi; }
mkdir -p "$tmp/md"
cp "$SHARED/models/stories260K.gguf" "$tmp/md/a.gguf"; cp "$SHARED/models/stories260K.gguf" "$tmp/md/b.gguf"
echo "not a model" > "$tmp/md/notes.txt"
serve2() {
    "$BIN" serve --models-dir "$tmp/md" --models-max 2 --kv-mem 32M --kv-disk "$tmp/kvd" --port 0 --ready-file "$tmp/port2" -t 1 2>> "$tmp/log2" &
    pid=$!
    i=0
    while [ ! -s "$tmp/port2" ] && [ $i -lt 300 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    U="http://127.0.0.1:$(cat "$tmp/port2" 2>/dev/null)"
}
stop2() {
    kill -TERM $pid; i=0
    while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    wait $pid; pid=""; rm -f "$tmp/port2"
}
P1="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree and"
P2="Tom had a small dog called Max. Every morning they walked to the river to look at the fish, and Max barked at the ducks while Tom laughed and threw bread into the water for"
cached() { # model, prompt -> the answer's cached_tokens
    curl -s -m 30 "$U/v1/completions" -d "{\"model\":\"$1\",\"prompt\":\"$2\",\"max_tokens\":1,\"temperature\":0}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null
}
metric() { curl -s -m 10 "$U/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
serve2
ids=$(curl -s -m 10 "$U/v1/models" | python3 -c 'import json,sys; print(",".join(m["id"] for m in json.load(sys.stdin)["data"]))' 2>/dev/null)
check '[ "$ids" = "a,b" ]' "--models-dir: the .gguf files by name, in name order: $ids"
c1=$(cached a "$P1"); c2=$(cached a "$P1"); c3=$(cached b "$P1")
check '[ "$c1" = 0 ] && [ "${c2:-0}" -ge 32 ] && [ "$c3" = 0 ]' "prefix cache per model: a cold $c1, a again $c2 (>= 32), b $c3 (0)"
pa=$(metric 'kvloom_memory_bytes{model="a",part="kv_pool"}'); pb=$(metric 'kvloom_memory_bytes{model="b",part="kv_pool"}')
check '[ -n "$pa" ] && [ "$pa" = "$pb" ] && [ "$pa" -le 16777216 ] && [ "$pa" -ge 15000000 ]' \
    "KV budget: --kv-mem 32M over --models-max 2 is at most 16M each, the same for both: a $pa, b $pb"
# the choices of one request (n 3) each hold the model and release it once:
# the server outlives them (it panicked on the second release) and a is idle
# after them (unloaded: 200, not 409 busy)
n3=$(curl -s -m 30 "$U/v1/completions" -d '{"model":"a","prompt":"Once","max_tokens":2,"n":3}' |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["choices"]))' 2>/dev/null)
st=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$U/models/unload" -d '{"model":"a"}')
check '[ "$n3" = 3 ] && [ "$st" = 200 ]' "n 3 with several models served: $n3 choices, then a unloads: $st"
cached a "$P2" > /dev/null
stop2
check '[ -n "$(ls "$tmp/kvd/a")" ] && [ -n "$(ls "$tmp/kvd/b")" ]' "a disk tier directory per model: $(ls "$tmp/kvd" | tr '\n' ' ')"
serve2
c4=$(cached b "$P2"); c5=$(cached a "$P2")
r=$(metric 'kvloom_kv_disk_restored_tokens_total{model="a"}')
check '[ "$c4" = 0 ] && [ "${c5:-0}" -ge 32 ] && [ "${r%.*}" -ge 32 ]' "disk tier per model after a restart: b $c4 (0), a $c5 restored from a's directory ($r tokens)"
stop2
[ $fail -ne 0 ] && tail -n 20 "$tmp/log2"
finish
