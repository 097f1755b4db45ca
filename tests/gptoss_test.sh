#!/bin/sh
# gptoss_test.sh — gpt-oss end to end on a tiny RANDOM-weight model with the
# real vocabulary (kvloom gen --preset gpt-oss-20b at a reduced shape; the
# o200k_harmony tokenizer exported from js-tiktoken by tools/o200k_harmony.mjs):
#  - tokenizer: kvloom's ids equal js-tiktoken's (OpenAI's o200k encoding)
#    on edge cases of the pattern, harmony's special tokens and real files
#    (tests/node/o200k_vectors.mjs, through POST /tokenize);
#  - prefix reuse across an agent's turns on sliding-window layers
#    (tests/gptoss_turns.py: >= 90% of each previous prompt cached, answers
#    equal to a cold server's).
# Env: KVLOOM_BIN, KVLOOM_BUILD (where the vocabulary and model are cached).
# Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"

need_node js-tiktoken

# the vocabulary (exported once per build directory) and the model
. "$ROOT/tests/o200k_lib.sh"
o200k_vocab "$B" || { bad "tools/o200k_harmony.mjs"; finish; }
M="$B/gptoss-models/gptoss-tiny.gguf"
mkdir -p "$B/gptoss-models"
if [ ! -s "$M" ] || [ "$BIN" -nt "$M" ]; then
    KVLOOM_VOCAB_DIR="$B/vocab" timeout 300 "$BIN" gen --preset gpt-oss-20b --n-layer 2 --n-embd 64 --n-head 4 \
        --n-head-kv 2 --head-dim 16 --n-ff 64 --n-expert 4 --n-expert-used 2 --n-ff-exp 64 --n-swa 16 --n-ctx 4096 \
        --type Q8_0 -o "$M.tmp.$$" > "$tmp/gen.log" 2>&1 && mv "$M.tmp.$$" "$M" ||
        { cat "$tmp/gen.log"; rm -f "$M.tmp.$$"; bad "kvloom gen --preset gpt-oss-20b"; finish; }
fi

# tokenizer vectors against js-tiktoken
"$BIN" serve -m "$M" --port 0 --ready-file "$tmp/port" -t 1 --kv-mem 16M 2> "$tmp/serve.log" &
pids="$pids $!"
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
if [ -s "$tmp/port" ]; then
    out=$(cd "$ROOT/tests" && timeout 60 node node/o200k_vectors.mjs "http://127.0.0.1:$(cat "$tmp/port")" \
          "$ROOT/docs/engine.md" "$ROOT/src/model/forward.c" 2>&1)
    echo "$out" | grep FAIL
    n=$(echo "$out" | tail -1 | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
    if [ -n "$n" ]; then pass=$((pass + ${n% *})); fail=$((fail + ${n#* })); else echo "$out" | tail -5; bad "o200k_vectors.mjs"; fi
else
    cat "$tmp/serve.log"; bad "kvloom serve did not start"
fi

# prefix reuse across turns
out=$(TESTS="$ROOT/tests" timeout 240 /usr/bin/python3 "$ROOT/tests/gptoss_turns.py" "$BIN" "$M" "$tmp" 2>&1)
echo "$out" | grep FAIL
n=$(echo "$out" | tail -1 | sed -n 's/^gptoss_turns: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
if [ -n "$n" ]; then pass=$((pass + ${n% *})); fail=$((fail + ${n#* })); else echo "$out" | tail -8; bad "gptoss_turns.py"; fi
finish
