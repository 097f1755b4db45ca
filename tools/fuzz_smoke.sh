#!/bin/sh
# tools/fuzz_smoke.sh — make test's fuzzing phase (issue 14,
# docs/reliability.md "Fuzzing"): a few seconds of real libFuzzer fuzzing per
# target, on top of its committed corpus, with the ASan+UBSan libFuzzer
# binaries of `make fuzz-build`. The corpus replay of the other phases runs
# only inputs found before; this mutates them for a moment, so a change that
# breaks a parser on a near neighbour of a known input is caught by
# `make test`, not only by the next long `make fuzz`.
#
#   tools/fuzz_smoke.sh [FUZZ_DIR]      (build-fuzz; the binaries are there)
#
# Env: FUZZ_SMOKE_SECONDS (3 per target), FUZZ_TIMEOUT (30: a CI machine may
# be slow; tools/fuzz.sh re-runs any timeout and calls a starved one what it
# is). Nothing is merged: the committed corpora change only by `make fuzz`.
# Runs tools/fuzz.sh twice at once (half the targets each, on the two cores),
# each in its own directory under FUZZ_DIR/smoke/, so a long `make fuzz` in
# FUZZ_DIR is not disturbed. Prints one line per target in tests/run.sh's
# form (a target passes when it ran and found nothing) and
# "FUZZ_DIR/smoke: N passed, N failed"; exits 1 when any failed.
set -u
FZ=${1:-build-fuzz}
D=$FZ/smoke
rm -rf "$D"
mkdir -p "$D/a" "$D/b"
i=0
targets=""
for b in "$FZ"/fuzz_*; do
    case "$b" in *.d) continue ;; esac
    [ -x "$b" ] || continue
    n=$(basename "$b")
    targets="$targets ${n#fuzz_}"
    half=a; [ $((i % 2)) -eq 1 ] && half=b
    ln -s "../../$n" "$D/$half/$n"
    i=$((i + 1))
done
[ -n "$targets" ] || { echo "fuzz_smoke: no fuzz targets in $FZ (make fuzz-build)"; echo "$D: 0 passed, 1 failed"; exit 1; }
for half in a b; do
    FUZZ_SECONDS=${FUZZ_SMOKE_SECONDS:-3} FUZZ_MERGE=0 FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-30} FUZZ_DIR=$D/$half \
        sh tools/fuzz.sh > "$D/$half.out" 2>&1 &
done
wait
pass=0
fail=0
for t in $targets; do
    line=$(cat "$D/a.out" "$D/b.out" | grep "^fuzz $t: .*findings: " | tail -n 1)
    case "$line" in
    *"findings: none"*)
        pass=$((pass + 1))
        echo "fuzz_$t (libFuzzer): 1 passed, 0 failed (${line#fuzz "$t": })" ;;
    "")
        fail=$((fail + 1))
        echo "fuzz_$t (libFuzzer): CRASHED or no result"
        cat "$D/a.out" "$D/b.out" | grep "^fuzz $t:" | sed 's/^/    /' ;;
    *)
        fail=$((fail + 1))
        echo "fuzz_$t (libFuzzer): 0 passed, 1 failed (${line#fuzz "$t": })"
        cat "$D/a.out" "$D/b.out" | grep "^fuzz $t:" | sed 's/^/    /' ;;
    esac
done
echo "$D: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
