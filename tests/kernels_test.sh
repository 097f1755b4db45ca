#!/bin/sh
# kernels_test.sh — the engine's reference tests on every kernel path: runs
# the build's test_model (stories260K greedy outputs, ragged-batch bitwise
# invariance), test_matmul and test_kernels once per kernel table, forcing
# the table with KVLOOM_KERNELS; also test_model_ref (the numpy reference's
# logits for every architecture x weight type) when it is built and its
# fixture models exist ($KVLOOM_FIXTURES, default $B/fixtures/models). Tables this CPU cannot run are skipped and
# named (the list comes from kern_available, printed by test_kernels).
# Last line: "N passed, N failed" (one check per test binary and table).
# Env: KVLOOM_BIN (default build/kvloom; its directory holds tests/),
#      KVLOOM_SHARED (default ../shared).
. "$(dirname "$0")/lib.sh"
cd "$ROOT" || { bad "cd $ROOT"; finish; }
B=$(dirname "$BIN")
export KVLOOM_SHARED="${KVLOOM_SHARED:-$(cd .. && pwd)/shared}"
for t in test_model test_matmul test_kernels; do
    [ -x "$B/tests/$t" ] || bad "$B/tests/$t is not built"
done
[ "$fail" -eq 0 ] || finish
avail=$(KVLOOM_KERNELS=scalar "$B/tests/test_kernels" 2>/dev/null | sed -n 's/^kernel tables on this CPU: //p')
[ -n "$avail" ] || { bad "cannot list the kernel tables"; finish; }
echo "kernel tables on this CPU: $avail"
export KVLOOM_FIXTURES="${KVLOOM_FIXTURES:-$B/fixtures/models}"
extra=
if [ -x "$B/tests/test_model_ref" ] && [ -d "$KVLOOM_FIXTURES" ]; then
    extra=test_model_ref
else
    echo "skip test_model_ref: not built or no fixtures in $KVLOOM_FIXTURES"
fi
for k in scalar avx2 avx512; do
    case " $avail " in
    *" $k "*) ;;
    *)
        echo "skip $k: not available on this CPU or not compiled for this architecture"
        continue ;;
    esac
    for t in test_model test_matmul test_kernels $extra; do
        if KVLOOM_KERNELS=$k timeout 600 "$B/tests/$t" > "$tmp/out" 2>&1 &&
            tail -n 1 "$tmp/out" | grep -q ' 0 failed$'; then
            echo "ok   $k $t: $(tail -n 1 "$tmp/out")"
            ok
        else
            bad "$k $t:"
            tail -n 20 "$tmp/out" | sed 's/^/    /'
        fi
    done
done
# kvloom bench end to end on the shipped model (decode past two attention chunks)
if [ -x "$BIN" ] && "$BIN" bench -m "$KVLOOM_SHARED/models/stories260K.gguf" --pp 32 --tg 8 --depth 600 -r 1 \
        > "$tmp/bench" 2>&1 && grep -q '^pp32 ' "$tmp/bench" && grep -q '^tg8 @ depth 600 ' "$tmp/bench" &&
        grep -q '^bandwidth' "$tmp/bench" && grep -q 'roofline' "$tmp/bench"; then
    echo "ok   kvloom bench"
    ok
else
    bad "kvloom bench:"
    sed 's/^/    /' "$tmp/bench" 2>/dev/null | tail -n 20
fi
finish
