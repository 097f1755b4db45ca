#!/bin/sh
# moe_decode.sh MODEL.gguf: batch-1 decode of kvloom beside llama.cpp, the
# first MoE target of issue 21 (docs/perf.md, "Mixture of experts"): ROUNDS
# (3) interleaved rounds of `llama-bench -n TG -r REPS` and `kvloom bench --tg
# TG -r REPS` on the same file and threads, each round after reading the file once
# so both start from the page cache. Prints each round (load average, both
# engines' tokens/s, their ratio, and kvloom's percentage of the roofline of
# the bandwidth probed in its own run: `kvloom bench`'s "streamed" line), then
# the medians. The targets: ratio >= 1.0 and roofline >= 85%.
#   env: KVLOOM_BIN (build/kvloom), LLAMA_BIN (directory with llama-bench,
#        built outside the repository), THREADS (2), ROUNDS (3), TG (64), REPS (2:
#        repetitions within a round; kvloom probes the bandwidth before each)
# On a shared machine: flock /tmp/kvloom-bench.lock sh bench/cpu_share.sh sh bench/moe_decode.sh M
set -u
M=${1:?usage: bench/moe_decode.sh MODEL.gguf}
K=${KVLOOM_BIN:-build/kvloom}
L=${LLAMA_BIN:?set LLAMA_BIN to a llama.cpp build/bin directory}
T=${THREADS:-2}
R=${ROUNDS:-3}
G=${TG:-64}
N=${REPS:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
r=0
while [ "$r" -lt "$R" ]; do
    r=$((r + 1))
    cat "$M" > /dev/null
    load=$(cut -d' ' -f1 /proc/loadavg)
    # llama-bench's row: | model | size | params | backend | threads | tg64 | 12.16 ± 0.00 |
    l=$("$L/llama-bench" -m "$M" -t "$T" -p 0 -n "$G" -r "$N" 2>/dev/null |
        awk -F'|' -v w="tg$G" 'NF > 3 && $(NF-2) ~ w { split($(NF-1), a, " "); print a[1] }')
    # kvloom's rows: "tg64   16.01 t/s [..]" and "  streamed  15.46 GB/s = 100% of the ..."
    k=$("$K" bench -m "$M" -t "$T" --pp 1 --tg "$G" -r "$N" 2>/dev/null |
        awk -v w="tg$G" '$1 == w { t = $2 } $1 == "streamed" { p = $5; sub("%", "", p) } END { print t, p }')
    set -- $k
    echo "$r $load ${l:-0} ${1:-0} ${2:-0}" >> "$out"
done
awk -v g="$G" '
function med(v, n,   i, j, x) {
    for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
BEGIN { printf "%-5s %6s %14s %12s %7s %9s\n", "round", "load", "llama.cpp t/s", "kvloom t/s", "ratio", "roofline" }
{
    n++; lt[n] = $3; kt[n] = $4; rt[n] = $3 > 0 ? $4 / $3 : 0; rf[n] = $5
    printf "%-5d %6s %14.2f %12.2f %6.2fx %8d%%\n", $1, $2, $3, $4, rt[n], $5
}
END {
    printf "median tg%s: llama.cpp %.2f t/s, kvloom %.2f t/s, ratio %.2fx (of the rounds), roofline %d%%\n",
        g, med(lt, n), med(kt, n), med(rt, n), med(rf, n)
}' "$out"
