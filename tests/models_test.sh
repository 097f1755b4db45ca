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
. "$(dirname "$0")/lib.sh"
T=${MODELS_TEST_T:-90}
need_node openai ollama
embed_tiny

IDLE=2
serve_up models -m "$SHARED/models/stories260K.gguf" --alias stories -m "$BERT" -m "$QEMB" \
    --models-max 2 --models-idle $IDLE --load-delay-ms 700 --kv-mem 64M --check -t 1 || finish
(cd "$ROOT/tests" && timeout -k 5 "$T" node node/models.mjs "$url" $IDLE $(( (T - 10) * 1000 ))) > "$tmp/out" 2>&1
node_tally models.mjs "$tmp/out" $? || { echo "--- server log"; tail -n 40 "$tmp/models.log"; }
# two loads of qwen3-emb-tiny (LRU section, the slow-load section): a
# request that waited on a load did not start a second one
n=$(grep -c 'serve: model qwen3-emb-tiny (' "$tmp/models.log")
check '[ "$n" -eq 2 ]' "qwen3-emb-tiny loaded $n times, not 2"
serve_stop models || tail -n 20 "$tmp/models.log"

# --models-dir, the KV budget rule and the caches per model: one model under
# two names (DIR/a.gguf, DIR/b.gguf and a file that is not a .gguf), so equal
# prompts are equal tokens and only the keying keeps them apart.
# --kv-mem 32M over --models-max 2: each pool is at most 16M, both the same.
# A prompt cached under a is not a hit under b (RAM), and after a restart a's
# blocks come back from a's disk directory only.
mkdir -p "$tmp/md"
cp "$SHARED/models/stories260K.gguf" "$tmp/md/a.gguf"; cp "$SHARED/models/stories260K.gguf" "$tmp/md/b.gguf"
echo "not a model" > "$tmp/md/notes.txt"
serve2() { # name
    serve_up "$1" --models-dir "$tmp/md" --models-max 2 --kv-mem 32M --kv-disk "$tmp/kvd" -t 1
    U=$url
}
P1="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree and"
P2="Tom had a small dog called Max. Every morning they walked to the river to look at the fish, and Max barked at the ducks while Tom laughed and threw bread into the water for"
cached() { # model, prompt -> the answer's cached_tokens
    curl -s -m 30 "$U/v1/completions" -d "{\"model\":\"$1\",\"prompt\":\"$2\",\"max_tokens\":1,\"temperature\":0}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null
}
serve2 dir
ids=$(curl -s -m 10 "$U/v1/models" | python3 -c 'import json,sys; print(",".join(m["id"] for m in json.load(sys.stdin)["data"]))' 2>/dev/null)
check '[ "$ids" = "a,b" ]' "--models-dir: the .gguf files by name, in name order: $ids"
c1=$(cached a "$P1"); c2=$(cached a "$P1"); c3=$(cached b "$P1")
check '[ "$c1" = 0 ] && [ "${c2:-0}" -ge 32 ] && [ "$c3" = 0 ]' "prefix cache per model: a cold $c1, a again $c2 (>= 32), b $c3 (0)"
pa=$(metric "$U" 'kvloom_memory_bytes{model="a",part="kv_pool"}'); pb=$(metric "$U" 'kvloom_memory_bytes{model="b",part="kv_pool"}')
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
serve_end dir
check '[ -n "$(ls "$tmp/kvd/a")" ] && [ -n "$(ls "$tmp/kvd/b")" ]' "a disk tier directory per model: $(ls "$tmp/kvd" | tr '\n' ' ')"
serve2 dir2
c4=$(cached b "$P2"); c5=$(cached a "$P2")
r=$(metric "$U" 'kvloom_kv_disk_restored_tokens_total{model="a"}')
check '[ "$c4" = 0 ] && [ "${c5:-0}" -ge 32 ] && [ "${r%.*}" -ge 32 ]' "disk tier per model after a restart: b $c4 (0), a $c5 restored from a's directory ($r tokens)"
serve_end dir2
[ $fail -ne 0 ] && tail -n 20 "$tmp/dir.log" "$tmp/dir2.log"
finish
