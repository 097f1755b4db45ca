#!/bin/sh
# e2e.sh KVLOOM MODEL ROUNDS "RUN ARGS" CONFIG... : end-to-end decode speed
# of `kvloom run` with and without speculation (docs/perf.md, "Speculative
# decoding"). Each round runs every CONFIG once, so the configurations are
# interleaved and a load change hits them alike; round i starts at the i-th
# CONFIG (rotated: ABC, BCA, CAB, ...; with a fixed order the last one
# always ran last, and a load that drifts within a round fell on it) and
# passes --seed i. A CONFIG is the extra arguments of one configuration
# ("--spec off", "--spec ngram", "--draft-model D.gguf", ...). Prints one
# line per run, then per configuration the median decode tokens/s, its
# ratio to the first configuration's median and the median forward passes
# (0: no speculation), then the median of the rounds' paired ratios to the
# first configuration (paired.sh). The prompt is $PROMPT (default "Once
# upon a time"). Run it under `flock /tmp/kvloom-bench.lock` (and
# bench/cpu_share.sh).
set -u
[ $# -ge 5 ] || { echo "usage: e2e.sh KVLOOM MODEL ROUNDS \"RUN ARGS\" CONFIG..." >&2; exit 2; }
bin=$1 model=$2 rounds=$3 args=$4
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=1
n_cfg=$#
while [ "$i" -le "$rounds" ]; do
    j=0
    while [ "$j" -lt "$n_cfg" ]; do
        c=$(((i - 1 + j) % n_cfg + 1))
        j=$((j + 1))
        eval "cfg=\${$c}"
        # shellcheck disable=SC2086 # the arguments are word lists
        line=$("$bin" run -m "$model" -p "${PROMPT:-Once upon a time}" $args --seed "$i" $cfg 2>&1 >/dev/null |
            awk '/generated/ { for (k = 1; k <= NF; k++) if ($k ~ /^\(/ && $(k+1) == "t/s),") tps = substr($k, 2) }
                 /forward passes/ { passes = $(NF-2) }
                 END { print tps + 0, passes + 0 }')
        echo "round $i config $c ($cfg): $line tokens/s passes"
        echo "$c $line" >>"$tmp/all"
        echo "$i $c ${line%% *}" >>"$tmp/rounds"
    done
    i=$((i + 1))
done
sh "$(dirname "$0")/median.sh" "$tmp/all" "tokens/s" "forward passes" "$@"
sh "$(dirname "$0")/paired.sh" "$tmp/rounds" "$@"
