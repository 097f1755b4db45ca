#!/bin/sh
# median.sh FILE CONFIG COLUMN: the median of COLUMN over the lines of FILE
# whose first field is CONFIG (the per-run records of e2e.sh and agents.sh).
awk -v c="$2" -v k="$3" '$1 == c { print $k }' "$1" | sort -n |
    awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
