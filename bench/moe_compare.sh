#!/bin/sh
# moe_compare.sh MODEL.gguf: the MoE side by side of docs/perf.md
# ("Mixture of experts: qwen3moe"): ROUNDS (2) interleaved rounds of
# llama-bench (pp512, tg64), `kvloom bench` (pp512, tg64, and 8 sequences
# decoding after a shared 128-token prompt) and llama-batched-bench (the same
# 8-sequence shape), each round after reading the file once so both engines
# start from the page cache. Raw output; the table in perf.md is the medians.
#   env: KVLOOM_BIN (build/kvloom), LLAMA_BIN (directory with llama-bench and
#        llama-batched-bench, built outside the repository), THREADS (2),
#        ROUNDS (2), TG (64: tokens decoded, also per sequence of the 8)
# Run it as `flock /tmp/kvloom-bench.lock bench/cpu_share.sh bench/moe_compare.sh M`
# on a shared machine.
set -u
M=${1:?usage: bench/moe_compare.sh MODEL.gguf}
K=${KVLOOM_BIN:-build/kvloom}
L=${LLAMA_BIN:?set LLAMA_BIN to a llama.cpp build/bin directory}
T=${THREADS:-2}
R=${ROUNDS:-2}
G=${TG:-64}
r=0
while [ "$r" -lt "$R" ]; do
    r=$((r + 1))
    cat "$M" > /dev/null
    echo "== round $r load $(cut -d' ' -f1 /proc/loadavg) $(date +%T)"
    "$L/llama-bench" -m "$M" -t "$T" -p 512 -n "$G" -r 1 2>&1 | grep -E '\| *(pp|tg)'
    "$K" bench -m "$M" -t "$T" --pp 512 --tg "$G" --depth 128 --seqs 8 -r 1 2>&1 | grep -v '^$'
    "$L/llama-batched-bench" -m "$M" -t "$T" -c 4096 -npp 128 -ntg "$G" -npl 8 -pps 2>&1 | grep -E '^\|'
done
