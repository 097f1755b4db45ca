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
# TEST_JOBS (default 2, the CI machine's cores) tests run at once: most of
# them wait on a server, a socket or a child process, so two at a time
# nearly halve a phase's wall time. Every test keeps its own temporary files,
# ports (--port 0) and servers. Results are printed in the list's order once
# all have run. TEST_JOBS=1 runs them one after the other.
JOBS=${TEST_JOBS:-2}
tally() { # key, display name (results in $tmp/key.out, .rc, .secs, .cpu)
    out="$tmp/$1.out"; rc=$(cat "$tmp/$1.rc" 2>/dev/null || echo 127); secs=$(cat "$tmp/$1.secs" 2>/dev/null || echo "?")
    cpu=$(cat "$tmp/$1.cpu" 2>/dev/null || echo "?")
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$out" 2>/dev/null | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | awk '{print $1}')
        f=$(echo "$line" | awk '{print $3}')
        pass=$((pass + p)); fail=$((fail + f))
        [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && { fail=$((fail + 1)); echo "$2: exit status $rc"; }
        echo "$2: $p passed, $f failed (${secs} s, ${cpu} s CPU)"
    else
        fail=$((fail + 1)); echo "$2: CRASHED or no result (exit $rc)"
    fi
    [ "$rc" -ne 0 ] && [ -f "$out" ] && tail -n 30 "$out" | sed 's/^/    /'
}
tmp=$(mktemp -d)
# The job list: one line per test, "key timeout command [arg]"; the display
# names go to $tmp/names in the same order.
: > "$tmp/jobs"; : > "$tmp/names"
job() { # key, timeout, command, argument ("" for none), display name
    if [ -n "$4" ]; then echo "$1 $2 $3 $4"; else echo "$1 $2 $3"; fi >> "$tmp/jobs"
    echo "$1 $5" >> "$tmp/names"
}
# Under a sanitizer (any build dir but build/), the script tests whose code
# paths the C tests already run under it are left out, to keep `make test`
# short: kvdisk_test (kill -9 and restart; test_kvdisk covers the format and
# recovery), tools_test (npm agent frameworks; test_server_tools covers the
# server side), cli_test (test_server_* and test_quant run the same code),
# kernels_test (every kernel table; test_kernels runs them against the
# references), crash_restart_test and kvdisk_full_test (kill -9 and a full
# disk under the disk tier; test_kvdisk and kvdisk_test's paths again),
# deploy_test (replicas behind HAProxy: test_server_api and test_kvdisk run
# the metrics, /load and shared-directory code), gptoss_test (a 201,088-token
# vocabulary exported by node and tokenized against js-tiktoken: the C
# tokenizer tests and fuzz_tok run the tokenizer code under the sanitizer),
# ref_selftest_test (the numpy reference's self-test: Python, and the fixture
# models' sums, which the phase's own `make fixtures` already checked),
# memory_budget_test (resident memory: the sanitizers' shadow and
# quarantine are not the server's), webui_test (the chat page in headless
# chromium: its server side is a static file and the streaming chat API,
# which test_server_api runs under the sanitizer), sizing_test (the default
# pool from a model's context: the same sizing code runs at the start of
# every server the C tests start).
# They all run in the first phase.
SAN_SKIP="kvdisk_test tools_test cli_test kernels_test crash_restart_test kvdisk_full_test deploy_test gptoss_test ref_selftest_test memory_budget_test webui_test sizing_test"
skipped=""
# Script tests first: the longest ones are among them, and starting them
# first leaves the short C tests to fill in at the end.
for s in tests/*_test.sh; do
    [ -f "$s" ] && [ -z "$ONLY" ] || continue
    n=$(basename "$s" .sh)
    if [ "$(basename "$B")" != build ] && echo " $SAN_SKIP " | grep -q " $n "; then
        skipped="$skipped $n"
        continue
    fi
    job "$n" 900 sh "$s" "$n"
done
for t in "$B"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    [ -z "$ONLY" ] || echo " $ONLY " | grep -q " $n " || continue
    job "$n" 600 "$t" "" "$n"
done
for r in "$B"/fuzz/*_replay; do
    [ -x "$r" ] && [ -z "$ONLY" ] || continue
    n=$(basename "$r" _replay)
    job "$n" 600 "$r" fuzz/corpus/"$n" "$n (corpus replay)"
done
# Longest first: with two at a time, a long test started last leaves one
# core idle at the end of the phase, so the tests that took longest in
# either phase (the per-test seconds measured on a quiet machine,
# docs/reliability.md "Test time") start first, in this order; the rest keep
# the order above.
# A test missing from the phase (skipped, or not in KVLOOM_TESTS) is passed over.
LONG_FIRST="test_server_kvpolicy kvdisk_test test_engine_spec kvdisk_full_test crash_restart_test tools_test
    test_server_hardening test_engine_fair test_server_isolation grammar_diff_test cli_test test_server_responses
    gptoss_test kernels_test test_server_load test_server_backpressure test_server_spec test_engine_sched
    test_server_anthropic test_server_api test_kvdisk test_server_tools test_fault_alloc test_server_engine
    test_matmul test_attn"
: > "$tmp/jobs.sorted"
for n in $LONG_FIRST; do grep "^$n " "$tmp/jobs" >> "$tmp/jobs.sorted"; done
for n in $LONG_FIRST; do echo "$n"; done | awk 'NR == FNR { long[$1] = 1; next } !($1 in long)' - "$tmp/jobs" >> "$tmp/jobs.sorted"
# Each job's seconds of CPU (user + system of the test and the processes
# it waited for: its servers, kvloom runs, python) go beside its wall time:
# a test whose CPU is far below its wall time waits (sleeps, timeouts).
# shellcheck disable=SC2016
T="$tmp" xargs -P "$JOBS" -L 1 sh -c 'k=$1; to=$2; shift 2; t0=$(date +%s)
    timeout "$to" "$@" > "$T/$k.out" 2>&1; echo $? > "$T/$k.rc"; echo $(( $(date +%s) - t0 )) > "$T/$k.secs"
    times > "$T/$k.times"
    awk "NR == 2 { split(\$1, u, /[ms]/); split(\$2, s, /[ms]/); printf \"%.0f\\n\", u[1] * 60 + u[2] + s[1] * 60 + s[2] }" "$T/$k.times" > "$T/$k.cpu"' sh \
    < "$tmp/jobs.sorted" || true
while read -r k name; do tally "$k" "$name"; done < "$tmp/names"
for n in $ONLY; do
    [ -x "$B/tests/$n" ] || { fail=$((fail + 1)); echo "$n: CRASHED or no result (not built)"; }
done
for n in $skipped; do echo "$n: skipped under the sanitizer (it ran in the first phase)"; done
rm -rf "$tmp"
echo "$B: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
