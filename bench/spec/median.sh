#!/bin/sh
# median.sh FILE UNIT EXTRA CONFIG...: the summary e2e.sh and agents.sh
# print. FILE holds one line per run: the configuration's index (1 = the
# first CONFIG), the measured speed and, when EXTRA names it (else ""), a
# third number. Prints per configuration the median speed in UNIT, its
# ratio to the first configuration's median, and the median of the third
# number followed by EXTRA.
file=$1 unit=$2 extra=$3
shift 3
med() { # config column
    awk -v c="$1" -v k="$2" '$1 == c { print $k }' "$file" | sort -n |
        awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
c=0
base=
for cfg in "$@"; do
    c=$((c + 1))
    m=$(med $c 2)
    [ -z "$base" ] && base=$m
    x=
    [ -n "$extra" ] && x="  $(med $c 3) $extra"
    awk -v cfg="$cfg" -v m="$m" -v b="$base" -v u="$unit" -v x="$x" \
        'BEGIN { printf "median %-40s %9.1f %s  %.3fx%s\n", cfg, m, u, (b > 0 ? m / b : 0), x }'
done
