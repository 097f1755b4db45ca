#!/bin/sh
# embed_test.sh — embeddings end to end (tests/node/embed.mjs): /v1/embeddings
# through the `openai` client and LangChain.js OpenAIEmbeddings, /api/embed
# and /api/embeddings through the `ollama` client, every vector compared with
# the numpy reference (tools/ref/gguf_ref.py embed) on the same file, against
# two tiny RANDOM-weight embedders: a bert encoder with the real bge
# vocabulary (CLS pooling; and the same shape with mean pooling, served
# beside it by the same server) and a qwen3 decoder with last-token pooling
# (the Qwen3-Embedding recipe, through the engine), plus stories260K (a
# generation-only model: a 400).
# Env: KVLOOM_BIN, KVLOOM_BUILD (where the models are cached), KVLOOM_SHARED.
# Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"
T=${EMBED_TEST_T:-90}

need_node openai ollama @langchain/openai

embed_tiny
M="$B/embed-models"
BMEAN="$M/bert-mean.gguf"
gen_model "$BMEAN" --arch bert --n-embd 64 --n-layer 2 --n-head 4 --n-ff 128 --n-vocab 30522 --n-ctx 128 --pooling mean \
    --vocab "$SHARED/vocab/ggml-vocab-bert-bge.gguf" --seed 23 --type F32 --shared "$SHARED"

start_server() { # name, model file, more flags
    n=$1; f=$2; shift 2
    serve_start "$n" -m "$f" -t 1 --kv-mem 16M "$@"
}
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

start_server bert "$BERT" -m "$BMEAN"
# 2 ms per engine step: a generation of 400 tokens lasts long enough for
# an embedding to be asked and answered while it runs (embed.mjs)
start_server qwen "$QEMB" --step-delay-us 2000
start_server stories "$SHARED/models/stories260K.gguf"
gp=$(serve_port stories)
for id in bert-tiny bert-mean qwen3-emb-tiny; do
    m=$([ $id = qwen3-emb-tiny ] && echo qwen || echo bert)
    port=$(serve_port $m)
    if [ -z "$port" ]; then bad "server $m did not start"; tail -n 20 "$tmp/$m.log"; continue; fi
    file=$(abs "$M/$id.gguf")
    gen_url=""; [ $id = bert-tiny ] && [ -n "$gp" ] && gen_url="http://127.0.0.1:$gp"
    (cd "$ROOT/tests" && timeout -k 5 "$T" node node/embed.mjs "http://127.0.0.1:$port" "$id" "$file" \
        "$ROOT/tools/ref/gguf_ref.py" "$gen_url" $(( (T - 10) * 1000 ))) > "$tmp/$id.out" 2>&1
    node_tally "embed.mjs ($id)" "$tmp/$id.out" $? || { echo "--- server log ($m)"; tail -n 20 "$tmp/$m.log"; }
done
# inputs at and past a decoder's context (2048): truncated to what the
# engine takes (2047 tokens: one step runs on the prompt), or refused by
# name, and answered either way (an input the engine refused was once
# waited on forever)
qp=$(serve_port qwen)
if [ -n "$qp" ]; then
    ids=$(awk 'BEGIN { for (i = 0; i < 2051; i++) printf "%s%d", i ? "," : "", 1 + i % 250 }')
    ids48=$(echo "$ids" | cut -d, -f1-2048)
    st=$(curl -s -m 60 -o "$tmp/trunc.json" -w '%{http_code}' -d "{\"model\":\"qwen3-emb-tiny\",\"input\":[$ids]}" \
        "http://127.0.0.1:$qp/api/embed")
    check '[ "$st" = 200 ] && grep -q "\"prompt_eval_count\":2047" "$tmp/trunc.json"' \
        "/api/embed of 2051 tokens (truncate): $st $(head -c 200 "$tmp/trunc.json")"
    st=$(curl -s -m 60 -o "$tmp/full.json" -w '%{http_code}' -d "{\"input\":[$ids48]}" "http://127.0.0.1:$qp/v1/embeddings")
    check '[ "$st" = 400 ] && grep -q "the prompt has 2048 tokens" "$tmp/full.json"' \
        "/v1/embeddings of 2048 tokens: $st $(head -c 200 "$tmp/full.json")"
fi
for m in bert qwen stories; do serve_stop $m; done
finish
