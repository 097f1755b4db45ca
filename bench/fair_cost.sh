#!/bin/sh
# fair_cost.sh — what fairness costs when nobody attacks (issue 26): agentbench
# against two kvloom binaries, rounds interleaved (the order alternates every
# round), a fresh server per run, the same seed every run; prints each run
# and the medians of output tok/s and TTFT p50/p99 with the ratio of A to B.
#
#   bench/fair_cost.sh A_BIN B_BIN    env: MODEL (../shared/models/stories260K.gguf),
#                                     ROUNDS (5), THREADS (1), OUT (a temp dir, kept)
#
# B is the build from before the fairness work, e.g.
#   git worktree add --detach /tmp/wt-prefair 568581c~1 && make -C /tmp/wt-prefair build/kvloom
#   flock /tmp/kvloom-bench.lock sh bench/cpu_share.sh sh bench/fair_cost.sh build/kvloom /tmp/wt-prefair/build/kvloom
# stories260K makes the scheduler's own per-step cost (the fair pick, the
# prefill order, the KV counts) as large a share of a step as it can be.
set -u
A=${1:?usage: bench/fair_cost.sh A_BIN B_BIN}
B=${2:?usage: bench/fair_cost.sh A_BIN B_BIN}
SHARED=${KVLOOM_SHARED:-../shared}
MODEL=${MODEL:-$SHARED/models/stories260K.gguf}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-1}
OUT=${OUT:-$(mktemp -d /tmp/kvloom-faircost.XXXXXX)}
mkdir -p "$OUT"
SPID=""
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null' EXIT INT TERM

run() { # bin label round
    rm -f "$OUT/port"
    "$1" serve -m "$MODEL" --port 0 --ready-file "$OUT/port" -t "$THREADS" 2> "$OUT/$2-$3.server.log" &
    SPID=$!
    i=0
    until [ -s "$OUT/port" ]; do
        i=$((i + 1)); [ $i -gt 300 ] && { echo "fair_cost: $1 did not start" >&2; exit 1; }
        sleep 0.1
    done
    python3 "$SHARED/bench/agentbench.py" --url "http://127.0.0.1:$(cat "$OUT/port")" --agents 8 --turns 4 --gen 96 \
        --seed 5 --sys-words 120 --tool-words 24 --user-words 8-12 --warmup 0 --json "$OUT/$2-$3.json" \
        > "$OUT/$2-$3.log" 2>&1
    kill "$SPID"
    wait "$SPID" 2>/dev/null
    SPID=""
}

for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then run "$A" A "$r"; run "$B" B "$r"; else run "$B" B "$r"; run "$A" A "$r"; fi
done
python3 - "$OUT" "$ROUNDS" <<'PYEOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = {}
for lab in ("A", "B"):
    d = [json.load(open(f"{out}/{lab}-{r}.json")) for r in range(1, rounds + 1)]
    print(lab, "out tok/s:", " ".join(f"{x['out_tok_per_s']:.1f}" for x in d),
          "| errors", sum(x["errors"] for x in d))
    med[lab] = {k: statistics.median(f(x) for x in d) for k, f in
                (("tps", lambda x: x["out_tok_per_s"]), ("p50", lambda x: x["ttft_ms"]["p50"]),
                 ("p99", lambda x: x["ttft_ms"]["p99"]))}
for lab in ("A", "B"):
    m = med[lab]
    print(f"{lab}: median out tok/s {m['tps']:.1f}, TTFT p50 {m['p50']:.1f} ms, p99 {m['p99']:.1f} ms")
print(f"A/B: out tok/s {med['A']['tps'] / med['B']['tps']:.3f}, TTFT p50 {med['A']['p50'] / med['B']['p50']:.3f}, "
      f"p99 {med['A']['p99'] / med['B']['p99']:.3f}")
PYEOF
echo "fair_cost: output in $OUT"
