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
# the tests that failed again at the end, where a log's tail shows them
for f in "$@"; do
    grep -E ': [0-9]+ passed, [1-9][0-9]* failed|CRASHED|: exit status [1-9]' "$f" 2>/dev/null |
        grep -vE '^[^ ]+: [0-9]+ passed, [0-9]+ failed$' | sed "s|^|failed in $f: |"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
