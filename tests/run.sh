#!/bin/sh
# Runs every test of one build directory and prints per-test lines, then
# "N passed, N failed" for the whole directory.
#   tests/run.sh BUILD_DIR
# Test binaries: BUILD_DIR/tests/test_*; fuzz replays: BUILD_DIR/fuzz/*_replay
# over fuzz/corpus/<target>/; script tests: tests/*_test.sh (given KVLOOM_BIN).
# A test that exits non-zero without printing counts, or times out, counts as
# one failure. Exits 1 when anything failed, else 0.
# KVLOOM_TESTS="test_a test_b" runs only those test binaries, and neither
# fuzz replays nor script tests (the ThreadSanitizer phase: Makefile test-tsan).
B=${1:-build}
ONLY=${KVLOOM_TESTS:-}
export KVLOOM_SHARED=${KVLOOM_SHARED:-$(cd .. && pwd)/shared}
export KVLOOM_BIN=$B/kvloom
export KVLOOM_BUILD=$B
export KVLOOM_FIXTURES=${KVLOOM_FIXTURES:-$B/fixtures/models}
pass=0; fail=0
tally() { # name, output file, exit status (the time since t0 is shown)
    secs=$(( $(date +%s) - t0 ))
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | awk '{print $1}')
        f=$(echo "$line" | awk '{print $3}')
        pass=$((pass + p)); fail=$((fail + f))
        [ "$3" -ne 0 ] && [ "$f" -eq 0 ] && { fail=$((fail + 1)); echo "$1: exit status $3"; }
        echo "$1: $p passed, $f failed (${secs} s)"
    else
        fail=$((fail + 1)); echo "$1: CRASHED or no result (exit $3)"
    fi
    [ "$3" -ne 0 ] && tail -n 30 "$2" | sed 's/^/    /'
}
tmp=$(mktemp -d)
for t in "$B"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    [ -z "$ONLY" ] || echo " $ONLY " | grep -q " $n " || continue
    t0=$(date +%s)
    timeout 600 "$t" > "$tmp/$n.out" 2>&1; tally "$n" "$tmp/$n.out" $?
done
for n in $ONLY; do
    [ -x "$B/tests/$n" ] || { fail=$((fail + 1)); echo "$n: CRASHED or no result (not built)"; }
done
for r in "$B"/fuzz/*_replay; do
    [ -x "$r" ] && [ -z "$ONLY" ] || continue
    n=$(basename "$r" _replay)
    t0=$(date +%s)
    timeout 600 "$r" fuzz/corpus/"$n" > "$tmp/$n.out" 2>&1; tally "$n (corpus replay)" "$tmp/$n.out" $?
done
# Under a sanitizer (any build dir but build/), the script tests whose code
# paths the C tests already run under it are left out, to keep `make test`
# short: kvdisk_test (kill -9 and restart; test_kvdisk covers the format and
# recovery), tools_test (npm agent frameworks; test_server_tools covers the
# server side), cli_test (test_server_* and test_quant run the same code),
# kernels_test (every kernel table; test_kernels runs them against the
# references), crash_restart_test and kvdisk_full_test (kill -9 and a full
# disk under the disk tier; test_kvdisk and kvdisk_test's paths again). They
# all run in the first phase.
SAN_SKIP="kvdisk_test tools_test cli_test kernels_test crash_restart_test kvdisk_full_test"
for s in tests/*_test.sh; do
    [ -f "$s" ] && [ -z "$ONLY" ] || continue
    n=$(basename "$s" .sh)
    if [ "$(basename "$B")" != build ] && echo " $SAN_SKIP " | grep -q " $n "; then
        echo "$n: skipped under the sanitizer (it ran in the first phase)"
        continue
    fi
    t0=$(date +%s)
    timeout 900 sh "$s" > "$tmp/$n.out" 2>&1; tally "$n" "$tmp/$n.out" $?
done
rm -rf "$tmp"
echo "$B: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
