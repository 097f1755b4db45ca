#!/bin/sh
# e2e.sh KVLOOM MODEL ROUNDS "RUN ARGS" CONFIG... : end-to-end decode speed
# of `kvloom run` with and without speculation (docs/perf.md, "Speculative
# decoding"). Each round runs every CONFIG once, in order, so the
# configurations are interleaved and a load change hits them alike; round
# i passes --seed i. A CONFIG is the extra arguments of one configuration
# ("--spec off", "--spec ngram", "--draft-model D.gguf", ...). Prints one
# line per run, then per configuration the median decode tokens/s, its
# ratio to the first configuration's median, and the median forward passes
# (0: no speculation). The prompt is $PROMPT (default "Once upon a time").
# Run it under `flock /tmp/kvloom-bench.lock` (and bench/cpu_share.sh).
set -u
[ $# -ge 5 ] || { echo "usage: e2e.sh KVLOOM MODEL ROUNDS \"RUN ARGS\" CONFIG..." >&2; exit 2; }
bin=$1 model=$2 rounds=$3 args=$4
shift 4
tmp=$(mktemp)
i=1
while [ "$i" -le "$rounds" ]; do
    c=0
    for cfg in "$@"; do
        c=$((c + 1))
        # shellcheck disable=SC2086 # the arguments are word lists
        line=$("$bin" run -m "$model" -p "${PROMPT:-Once upon a time}" $args --seed "$i" $cfg 2>&1 >/dev/null |
            awk '/generated/ { for (k = 1; k <= NF; k++) if ($k ~ /^\(/ && $(k+1) == "t/s),") tps = substr($k, 2) }
                 /forward passes/ { passes = $(NF-2) }
                 END { print tps + 0, passes + 0 }')
        echo "round $i config $c ($cfg): $line tokens/s passes"
        echo "$c $line" >>"$tmp"
    done
    i=$((i + 1))
done
sh "$(dirname "$0")/median.sh" "$tmp" "tokens/s" "forward passes" "$@"
rm -f "$tmp"
