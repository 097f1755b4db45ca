#!/bin/sh
# Sums the last "N passed, N failed" line of each results file given and
# prints the total as the closing line; exits 1 if anything failed.
pass=0; fail=0
for f in "$@"; do
    line=$(grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed$' "$f" 2>/dev/null | tail -n 1)
    if [ -z "$line" ]; then echo "missing results in $f"; fail=$((fail + 1)); continue; fi
    p=$(echo "$line" | awk '{print $2}')
    q=$(echo "$line" | awk '{print $4}')
    pass=$((pass + p)); fail=$((fail + q))
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
