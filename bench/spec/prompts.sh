#!/bin/sh
# prompts.sh KVLOOM MODEL ROUNDS "RUN ARGS" PROMPTS CONFIG... : e2e.sh over
# every line of the file PROMPTS (bench/spec/prompts.txt: 16 story openings
# for stories260K, docs/perf.md "Speculative decoding"), so a drafter is
# measured on a model's continuations rather than on one of them. For each
# prompt, e2e.sh runs ROUNDS interleaved rounds of the CONFIGs; this prints
# per prompt and CONFIG after the first the median of the rounds' paired
# ratios to the first CONFIG and the median forward passes; then per CONFIG
# the geometric mean of those per-prompt medians and of every (prompt,
# round) ratio, and how many of those were below 1. Run it under
# `flock /tmp/kvloom-bench.lock` (and bench/cpu_share.sh).
set -u
[ $# -ge 6 ] || { echo "usage: prompts.sh KVLOOM MODEL ROUNDS \"RUN ARGS\" PROMPTS CONFIG..." >&2; exit 2; }
bin=$1 model=$2 rounds=$3 args=$4 prompts=$5
shift 5
n_cfg=$#
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
k=0
while IFS= read -r p; do
    [ -n "$p" ] || continue
    k=$((k + 1))
    PROMPT=$p sh "$(dirname "$0")/e2e.sh" "$bin" "$model" "$rounds" "$args" "$@" >"$tmp/out" 2>&1
    # "round I config C (...): TOKENS/S PASSES tokens/s passes" -> round config t/s passes
    sed -n 's/^round \([0-9]*\) config \([0-9]*\) (.*): \([0-9.]*\) \([0-9]*\) tokens\/s passes$/\1 \2 \3 \4/p' \
        "$tmp/out" >"$tmp/runs"
    line=$(printf '%-40s' "$p")
    c=2
    while [ "$c" -le "$n_cfg" ]; do
        awk -v c=$c '$2 == 1 { b[$1] = $3 } $2 == c { v[$1] = $3 }
            END { for (r in v) if (b[r] > 0) print v[r] / b[r] }' "$tmp/runs" >"$tmp/r"
        sed "s/^/$c $k /" "$tmp/r" >>"$tmp/all"
        med=$(median <"$tmp/r")
        echo "$c $med" >>"$tmp/meds"
        passes=$(awk -v c=$c '$2 == c { print $4 }' "$tmp/runs" | median)
        line="$line  config $c: $(printf '%.3f' "$med")x ($passes passes)"
        c=$((c + 1))
    done
    echo "$line"
done <"$prompts"
c=2
while [ "$c" -le "$n_cfg" ]; do
    eval "cfg=\${$c}"
    g=$(awk -v c=$c '$1 == c { s += log($2); n++ } END { printf "%.3f", exp(s / n) }' "$tmp/meds")
    awk -v c=$c -v g="$g" -v k=$k -v cfg="$cfg" '$1 == c { s += log($3); n++; lo += $3 < 1 }
        END { printf "config %d (%s): geometric mean of the %d prompts'"'"' paired medians %sx; of all %d paired ratios %.3fx, below 1 in %d\n",
              c, cfg, k, g, n, exp(s / n), lo }' "$tmp/all"
    c=$((c + 1))
done
