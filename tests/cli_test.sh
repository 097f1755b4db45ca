#!/bin/sh
# cli_test.sh — the kvloom program as a user runs it:
#  - `kvloom run --temp 0` on stories260K prints exactly the expected text of
#    every case in ../shared/models/expected_greedy.json (independent numpy
#    reference), prompt first, then the generation;
#  - `kvloom run` with no -m uses the shipped model; sampling flags work and a
#    seed makes sampling reproducible;
#  - `kvloom quantize` of an F32 model gives byte-for-byte the model that
#    `kvloom gen` quantises directly from the same random values;
#  - `kvloom info` describes a model; bad input gets a clear error and a
#    non-zero exit, never a crash;
#  - `kvloom --help` and every subcommand's -h/--help print that usage on
#    stdout, nothing on stderr, and exit 0;
#  - paths: run without -m and gen work from another directory, and from a
#    `make install PREFIX=...` tree.
#  - `kvloom bench --spec-e2e` on stories260K: the speculating engine's output
#    is the --spec off engine's token for token, and its passes and draft
#    counts are the replayed drafter's pattern's.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3

# expected greedy text, one case at a time
"$PY" - "$SHARED/models/expected_greedy.json" "$tmp" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for i, c in enumerate(d["cases"]):
    n_new = len(c["output_ids"]) - (len(c["prompt_ids"]) - 1)
    open(f"{sys.argv[2]}/case{i}.prompt", "w").write(c["prompt"])
    open(f"{sys.argv[2]}/case{i}.n", "w").write(str(n_new))
    open(f"{sys.argv[2]}/case{i}.text", "w").write(c["text"] + "\n")
PYEOF
for p in "$tmp"/case*.prompt; do
    c=${p%.prompt}
    for threads in 1 2; do
        "$BIN" run -m "$SHARED/models/stories260K.gguf" -p "$(cat "$p")" -n "$(cat "$c.n")" --temp 0 -t $threads \
            > "$c.out" 2> "$c.err"
        check 'cmp -s "$c.out" "$c.text"' "run on $(basename "$c") with $threads threads differs: $(head -c 200 "$c.out")"
    done
done

# default model, sampling flags, seeds
"$BIN" run -n 30 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 --seed 7 -p "Tom" > "$tmp/s1" 2>/dev/null
"$BIN" run -n 30 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 --seed 7 -p "Tom" > "$tmp/s2" 2>/dev/null
"$BIN" run -n 30 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 --seed 8 -p "Tom" > "$tmp/s3" 2>/dev/null
check 'cmp -s "$tmp/s1" "$tmp/s2"' "same seed gave different text"
check '! cmp -s "$tmp/s1" "$tmp/s3"' "different seeds gave the same text"
check '[ "$(head -c 3 "$tmp/s1")" = "Tom" ] && [ $(wc -c < "$tmp/s1") -gt 40 ]' "run printed no generation"
"$BIN" run -n 5 --temp -1 > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 2 ] && grep -q temperature "$tmp/err"' "negative temperature not rejected clearly"
"$BIN" run -n abc > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 2 ] && grep -q "\-n" "$tmp/err"' "bad -n not rejected clearly"
"$BIN" run -m /nonexistent.gguf > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 1 ] && grep -q "/nonexistent.gguf" "$tmp/err"' "missing model not reported"
head -c 1000 "$SHARED/models/stories260K.gguf" > "$tmp/trunc.gguf"
"$BIN" run -m "$tmp/trunc.gguf" > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 1 ] && grep -qi "gguf" "$tmp/err"' "truncated model not reported: $(cat "$tmp/err")"

# quantize == gen's own quantisation, for every type
SHAPE="--arch llama --n-embd 256 --n-layer 1 --n-head 4 --n-head-kv 2 --n-ff 256 --n-vocab 300 --seed 5"
"$BIN" gen $SHAPE --type F32 -o "$tmp/f32.gguf" 2>/dev/null
for ty in F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K MXFP4; do
    "$BIN" gen $SHAPE --type $ty -o "$tmp/gen.gguf" 2>/dev/null
    "$BIN" quantize "$tmp/f32.gguf" "$tmp/q.gguf" $ty 2>/dev/null
    check 'cmp -s "$tmp/gen.gguf" "$tmp/q.gguf"' "quantize to $ty differs from gen --type $ty"
    "$BIN" info "$tmp/q.gguf" > "$tmp/info" 2>&1
    check 'grep -q "blk.0.attn_q.weight *$ty" "$tmp/info"' "info does not show $ty weights"
done
"$BIN" quantize "$tmp/f32.gguf" "$tmp/q.gguf" Q3_K > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 2 ] && grep -q Q3_K "$tmp/err"' "unsupported quantize type not rejected"

# info
"$BIN" info "$SHARED/models/stories260K.gguf" > "$tmp/info" 2>&1
check 'grep -q "architecture: llama" "$tmp/info" && grep -q "n_layer 5" "$tmp/info" && grep -q "total weight bytes" "$tmp/info"' "info output incomplete"
check 'grep -q "tokenizer: llama, 512 tokens" "$tmp/info"' "info misses the tokenizer"
"$BIN" info "$SHARED/vocab/ggml-vocab-gpt-2.gguf" > "$tmp/info" 2>&1; st=$?
check '[ $st -eq 0 ] && grep -q "0 tensors" "$tmp/info"' "info on a vocabulary-only file failed"
"$BIN" frobnicate > /dev/null 2>&1; st=$?
check '[ $st -eq 2 ]' "unknown command not rejected"

# --help: the usage on stdout, nothing on stderr, exit 0 (with no command:
# the usage on stderr, exit 2)
for h in -h --help; do
    "$BIN" $h > "$tmp/out" 2> "$tmp/err"; st=$?
    check '[ $st -eq 0 ] && grep -q "^usage: kvloom COMMAND" "$tmp/out" && [ ! -s "$tmp/err" ]' "kvloom $h: exit $st, $(head -c 200 "$tmp/err")"
    for cmd in run info tokenize gen quantize serve bench; do
        "$BIN" $cmd $h > "$tmp/out" 2> "$tmp/err"; st=$?
        check '[ $st -eq 0 ] && grep -q "^usage: kvloom $cmd " "$tmp/out" && [ ! -s "$tmp/err" ]' \
            "kvloom $cmd $h: exit $st, stdout $(head -c 100 "$tmp/out"), stderr $(head -c 200 "$tmp/err")"
    done
done
"$BIN" > "$tmp/out" 2> "$tmp/err"; st=$?
check '[ $st -eq 2 ] && [ ! -s "$tmp/out" ] && grep -q "^usage: kvloom COMMAND" "$tmp/err"' "kvloom with no command: exit $st"
"$BIN" gen --n-embd 64 -o "$tmp/x.gguf" > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 2 ] && grep -q "^usage: kvloom gen" "$tmp/err" && [ ! -e "$tmp/x.gguf" ]' "gen without a shape not rejected with its usage"
"$BIN" gen $SHAPE --type F32 -o "$tmp/g.gguf" > /dev/null 2> "$tmp/err"; st=$?
check '[ $st -eq 0 ] && grep -q "^kvloom gen: wrote $tmp/g.gguf" "$tmp/err"' "gen does not label its message 'kvloom gen': $(cat "$tmp/err")"

# presets generate and run (smallest real shape, tiny prompt)
"$BIN" gen --preset smollm2-135m --type Q4_0 --shared "$SHARED" -o "$tmp/smol.gguf" 2>/dev/null
"$BIN" run -m "$tmp/smol.gguf" -p "Hello" -n 3 --temp 0 > "$tmp/out" 2>&1; st=$?
check '[ $st -eq 0 ] && grep -q "^Hello" "$tmp/out"' "smollm2 preset model does not run: $(cat "$tmp/out")"
"$BIN" info "$tmp/smol.gguf" > "$tmp/info" 2>&1
check 'grep -q "n_vocab 49152, n_embd 576, n_layer 30, n_head 9, n_head_kv 3" "$tmp/info" && grep -q "tokenizer: gpt2, 49152" "$tmp/info"' "smollm2 preset shape or vocabulary wrong"

# the embedding presets: architecture, width, vocabulary and pooling of the
# real models (one layer; Qwen3-Embedding's width reduced: its 151,669-row
# embedding matrix at 1,024 would be 160 MB)
"$BIN" gen --preset bge-small-en-v1.5 --n-layer 1 --type Q8_0 --shared "$SHARED" -o "$tmp/bge.gguf" > "$tmp/gen.log" 2>&1
"$BIN" info "$tmp/bge.gguf" > "$tmp/info" 2>&1
check 'grep -q "^architecture: bert" "$tmp/info" && grep -q "n_vocab 30522, n_embd 384, n_layer 1, n_head 12" "$tmp/info" &&
       grep -q "bert.pooling_type = 2" "$tmp/info" && grep -q "^tokenizer: bert, 30522" "$tmp/info"' \
    "bge-small-en-v1.5 preset: $(grep -E "architecture|n_vocab|pooling|tokenizer" "$tmp/info" | tr '\n' ' ') $(cat "$tmp/gen.log")"
"$BIN" gen --preset qwen3-embedding-0.6b --n-layer 1 --n-embd 64 --n-head 2 --n-head-kv 1 --head-dim 32 --n-ff 64 --type Q8_0 \
    --shared "$SHARED" -o "$tmp/qemb.gguf" > "$tmp/gen.log" 2>&1
"$BIN" info "$tmp/qemb.gguf" > "$tmp/info" 2>&1
check 'grep -q "^architecture: qwen3" "$tmp/info" && grep -q "qwen3.pooling_type = 3" "$tmp/info" && grep -q "^tokenizer: gpt2, 151669" "$tmp/info"' \
    "qwen3-embedding-0.6b preset: $(grep -E "architecture|n_vocab|pooling|tokenizer" "$tmp/info" | tr '\n' ' ') $(cat "$tmp/gen.log")"
rm -f "$tmp/bge.gguf" "$tmp/qemb.gguf"

# tokenize: every test vector of two vocabularies through the command line
for v in gpt-2 llama-spm; do
    "$PY" - "$SHARED/vocab/ggml-vocab-$v.gguf.inp" "$SHARED/vocab/ggml-vocab-$v.gguf.out" "$tmp/tv" <<'PYEOF'
import os, sys
inp = open(sys.argv[1], encoding="utf-8", newline="").read().split("\n__ggml_vocab_test__\n")
out = open(sys.argv[2]).read().split("\n")
os.makedirs(sys.argv[3], exist_ok=True)
for i, (text, ids) in enumerate(zip(inp, out)):
    if text == "" and i == len(inp) - 1: break
    open(f"{sys.argv[3]}/{i}.txt", "w", encoding="utf-8", newline="").write(text)
    open(f"{sys.argv[3]}/{i}.ids", "w").write(" ".join(ids.split()) + "\n")
PYEOF
    n_ok=0; n_all=0
    for f in "$tmp"/tv/*.txt; do
        n_all=$((n_all + 1))
        "$BIN" tokenize -m "$SHARED/vocab/ggml-vocab-$v.gguf" --no-bos --stdin < "$f" > "$tmp/got" 2>/dev/null
        cmp -s "$tmp/got" "${f%.txt}.ids" && n_ok=$((n_ok + 1))
    done
    check '[ $n_all -gt 30 ] && [ $n_ok -eq $n_all ]' "tokenize --stdin on $v: $n_ok of $n_all vectors match"
    rm -rf "$tmp/tv"
done
"$BIN" tokenize -m "$SHARED/models/stories260K.gguf" "Once upon a time" > "$tmp/got"
check '[ "$(cat "$tmp/got")" = "1 403 407 261 378" ]' "tokenize with BOS: $(cat "$tmp/got")"
"$BIN" tokenize -m "$SHARED/vocab/ggml-vocab-phi-3.gguf" --no-bos --special "<|user|>hi" > "$tmp/got"
"$BIN" tokenize -m "$SHARED/vocab/ggml-vocab-phi-3.gguf" --no-bos "<|user|>hi" > "$tmp/got2"
check '[ $(wc -w < "$tmp/got") -lt $(wc -w < "$tmp/got2") ]' "--special does not match control tokens"

# model benchmark: every figure is reported (prefill at depth and shared-prefix decode too)
"$BIN" bench -m "$SHARED/models/stories260K.gguf" -t 2 --pp 16 --tg 4 --depth 40 --seqs 3 -r 1 > "$tmp/mb" 2>&1; st=$?
check '[ $st -eq 0 ] && grep -qE "^pp16 +[0-9.]+ t/s" "$tmp/mb" && grep -qE "^tg4 @ depth 40 +[0-9.]+ t/s" "$tmp/mb" &&
       grep -qE "^pp16 @ depth 40 +[0-9.]+ t/s" "$tmp/mb" && grep -qE "^tg4 @ depth 40 x 3 +[0-9.]+ t/s" "$tmp/mb" &&
       grep -qE "^bandwidth" "$tmp/mb"' "bench figures missing: $(cat "$tmp/mb")"
"$BIN" bench -m "$SHARED/models/stories260K.gguf" --seqs 0 -r 1 > "$tmp/mbe" 2>&1; st=$?
check '[ $st -eq 2 ] && grep -q -- "--seqs" "$tmp/mbe"' "bad --seqs not rejected clearly: $(cat "$tmp/mbe")"

# speculation end to end with a replayed acceptance pattern (bench --spec-e2e): the output of the
# speculating engine equals the --spec off engine's token for token, and its decode passes, drafted
# and accepted counts are exactly those of the drafter replayed over bench/spec/edit.txt (drafts
# both accepted and rejected); 2 sequences with ngram k <= 16, 1 with suffix k <= 8
for cfg in "--seqs 2 --drafter ngram --kmax 16 --depth 40" "--drafter suffix --depth 8"; do
    # shellcheck disable=SC2086 # a word list
    "$BIN" bench -m "$SHARED/models/stories260K.gguf" --spec-e2e --text "$ROOT/bench/spec/edit.txt" --tg 96 -r 1 -t 1 \
        $cfg > "$tmp/se" 2>&1; st=$?
    check '[ $st -eq 0 ] && grep -q "^outputs: 0 tokens differ .*pattern: 0 of 1$" "$tmp/se" &&
           awk "/^pattern: [0-9]+ decode passes/ { ok = \$12 > \$14 && \$14 > 0 } END { exit !ok }" "$tmp/se"' \
          "bench --spec-e2e $cfg: $(cat "$tmp/se")"
done
# tokenizer throughput benchmark works on a vocabulary-only file
"$BIN" bench -m "$SHARED/vocab/ggml-vocab-gpt-2.gguf" --tokenizer -r 1 > "$tmp/tb" 2>&1; st=$?
check '[ $st -eq 0 ] && grep -q "^tokenizer gpt2" "$tmp/tb" && grep -qE "^encode +[0-9.]+ MB/s" "$tmp/tb"' "bench --tokenizer: $(cat "$tmp/tb")"

# Paths: from another directory, `run` without -m finds the shipped model and
# `gen` the shared tokenizers (from the binary's path, no KVLOOM_SHARED);
# `make install PREFIX` gives a binary that does the same from anywhere.
ABS_BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
ABS_SHARED=$(cd "$SHARED" && pwd)
want=$("$BIN" run -p "Once upon a time" -n 8 --temp 0 2>/dev/null)
GEN_ARGS="--preset smollm2-135m --n-layer 1 --n-embd 64 --n-head 2 --n-head-kv 1 --head-dim 32 --n-ff 64"
mkdir -p "$tmp/elsewhere"
got=$(cd "$tmp/elsewhere" && "$ABS_BIN" run -p "Once upon a time" -n 8 --temp 0 2>/dev/null)
check '[ -n "$want" ] && [ "$got" = "$want" ]' "run without -m from another directory: '$got' vs '$want'"
if [ "$ABS_SHARED" = "$(cd "$(dirname "$ABS_BIN")/../.." && pwd)/shared" ]; then
    (cd "$tmp/elsewhere" && env -u KVLOOM_SHARED "$ABS_BIN" gen $GEN_ARGS -o "$tmp/g1.gguf" > "$tmp/g1.log" 2>&1); st=$?
    check '[ $st -eq 0 ] && [ -s "$tmp/g1.gguf" ]' "gen from another directory without KVLOOM_SHARED: $(cat "$tmp/g1.log")"
fi
make -s -C "$ROOT" -o "$(dirname "$BIN")/kvloom" install B="$(cd "$ROOT" && realpath --relative-to=. "$(dirname "$ABS_BIN")")" \
    PREFIX="$tmp/inst" SHARED="$ABS_SHARED" > "$tmp/inst.log" 2>&1; st=$?
check '[ $st -eq 0 ] && [ -x "$tmp/inst/bin/kvloom" ] && [ -s "$tmp/inst/share/kvloom/models/stories260K.gguf" ]' "make install: $(cat "$tmp/inst.log")"
got=$(cd / && "$tmp/inst/bin/kvloom" run -p "Once upon a time" -n 8 --temp 0 2>/dev/null)
check '[ "$got" = "$want" ]' "installed run without -m from /: '$got'"
(cd / && env -u KVLOOM_SHARED "$tmp/inst/bin/kvloom" gen $GEN_ARGS -o "$tmp/g2.gguf" > "$tmp/g2.log" 2>&1); st=$?
check '[ $st -eq 0 ] && [ -s "$tmp/g2.gguf" ]' "installed gen from / without KVLOOM_SHARED: $(cat "$tmp/g2.log")"
check '[ "$("$tmp/inst/bin/kvloom" --version)" = "$("$BIN" --version)" ]' "installed --version"

finish
