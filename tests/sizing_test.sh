#!/bin/sh
# sizing_test.sh — the default KV pool follows the model's context (issue 24
# item 3): on a model with Qwen3's 40,960-token context and 8 KiB of KV per
# token (320 MiB for one context, more than the old fixed 256 MiB default),
# `kvloom serve` without --kv-mem says at start that the pool holds at least
# one full context and serves a 600-token prompt; with a pool or a context
# too small for it, the prompt is a 400
# whose message names the flag to raise (--kv-mem, --ctx).
# Env: KVLOOM_BIN, KVLOOM_BUILD (model cache), KVLOOM_SHARED. Ends with
# "N passed, N failed".
. "$(dirname "$0")/lib.sh"
command -v curl >/dev/null 2>&1 || { bad "curl is missing"; finish; }

QWEN="$B/sizing-models/qwen3-longctx.gguf"
gen_model "$QWEN" --preset qwen3-0.6b --n-layer 2 --n-embd 128 --n-head 8 --n-head-kv 8 --head-dim 128 \
    --n-ff 256 --type Q8_0 --shared "$SHARED"

start() { # name, flags...
    n=$1; shift
    serve_start "$n" -m "$QWEN" -t 1 "$@"
}
# a prompt of exactly 600 tokens (token ids: /v1/completions takes them)
ids=$(awk 'BEGIN { for (i = 0; i < 600; i++) printf "%s%d", i ? "," : "", 1000 + i % 5000 }')
echo "{\"prompt\":[$ids],\"max_tokens\":1,\"temperature\":0}" > "$tmp/body.json"
post() { curl -s -o "$tmp/$1.out" -w '%{http_code}' "http://127.0.0.1:$2/v1/completions" -H 'Content-Type: application/json' --data-binary "@$tmp/body.json"; }

start auto
start small --kv-mem 1M
start short --ctx 512
p=$(serve_port auto)
line=$(grep -o 'holds [0-9]* tokens' "$tmp/auto.log" | head -n 1)
toks=$(echo "$line" | awk '{print $2}')
if [ -n "$toks" ] && [ "$toks" -ge 40960 ]; then ok; else bad "default pool: start-up line '$line' (want >= 40960 tokens)"; cat "$tmp/auto.log"; fi
st=$(post auto "$p")
if [ "$st" = 200 ] && grep -q '"prompt_tokens":600' "$tmp/auto.out"; then ok; else bad "600-token prompt on the default pool: HTTP $st $(head -c 300 "$tmp/auto.out")"; fi
p=$(serve_port small)
st=$(post small "$p")
if [ "$st" = 400 ] && grep -q -- '--kv-mem' "$tmp/small.out"; then ok; else bad "prompt larger than the pool: HTTP $st $(head -c 300 "$tmp/small.out")"; fi
p=$(serve_port short)
st=$(post short "$p")
if [ "$st" = 400 ] && grep -q -- '--ctx' "$tmp/short.out"; then ok; else bad "prompt longer than --ctx: HTTP $st $(head -c 300 "$tmp/short.out")"; fi
finish
