#!/bin/sh
# paired.sh FILE CONFIG...: the paired ratios e2e.sh and agents.sh print.
# FILE holds one line per run: round, the configuration's index (1 = the
# first CONFIG) and the measured speed. For each CONFIG prints the median
# over the rounds of its ratio to the first CONFIG's run of the same round,
# and in how many rounds that ratio was below 1.
file=$1
shift
c=1
for cfg in "$@"; do
    awk -v c=$c '$2 == 1 { b[$1] = $3 } $2 == c { v[$1] = $3 }
        END { for (r in v) if (b[r] > 0) print v[r] / b[r] }' "$file" | sort -n |
        awk -v cfg="$cfg" '{ v[NR] = $1; lo += $1 < 1 }
            END { printf "paired %-40s median ratio %.3f, below 1 in %d of %d rounds\n", cfg,
                  NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, lo, NR }'
    c=$((c + 1))
done
