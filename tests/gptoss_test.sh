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
export KVLOOM_VOCAB_DIR="$B/vocab" # (read by kvloom gen only)
gen_model "$M" --preset gpt-oss-20b --n-layer 2 --n-embd 64 --n-head 4 --n-head-kv 2 --head-dim 16 --n-ff 64 \
    --n-expert 4 --n-expert-used 2 --n-ff-exp 64 --n-swa 16 --n-ctx 4096 --type Q8_0

# tokenizer vectors against js-tiktoken
if serve_up vectors -m "$M" -t 1 --kv-mem 16M; then
    out=$(cd "$ROOT/tests" && timeout 60 node node/o200k_vectors.mjs "$url" \
          "$ROOT/docs/engine.md" "$ROOT/src/model/forward.c" 2>&1)
    echo "$out" | grep FAIL
    n=$(echo "$out" | tail -1 | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
    if [ -n "$n" ]; then pass=$((pass + ${n% *})); fail=$((fail + ${n#* })); else echo "$out" | tail -5; bad "o200k_vectors.mjs"; fi
fi

# prefix reuse across turns
out=$(TESTS="$ROOT/tests" timeout 240 /usr/bin/python3 "$ROOT/tests/gptoss_turns.py" "$BIN" "$M" "$tmp" 2>&1)
echo "$out" | grep FAIL
n=$(echo "$out" | tail -1 | sed -n 's/^gptoss_turns: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
if [ -n "$n" ]; then pass=$((pass + ${n% *})); fail=$((fail + ${n#* })); else echo "$out" | tail -8; bad "gptoss_turns.py"; fi
finish
