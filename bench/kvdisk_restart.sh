#!/bin/sh
# kvdisk_restart.sh — the disk tier's restart benchmark: an agent workload
# (../shared/bench/agentbench.py) runs against `kvloom serve --kv-disk DIR`,
# the server is killed with SIGKILL, restarted on the same DIR, and the same
# workload runs again; prints, per server setting, how
# much of each agent's first request after the restart came from the cache
# and its TTFT. The control is the same restart without --kv-disk.
#
#   bench/kvdisk_restart.sh MODEL.gguf [agentbench flags of the first run...]
#   env: KVLOOM_BIN (build/kvloom), THREADS (2), KV_MEM (400M), DISK_SIZE (4G),
#        MODES ("disk nodisk")
set -eu
MODEL=${1:?usage: bench/kvdisk_restart.sh MODEL.gguf [agentbench flags]}
shift
BIN=${KVLOOM_BIN:-build/kvloom}
THREADS=${THREADS:-2}
KV_MEM=${KV_MEM:-400M}
DISK_SIZE=${DISK_SIZE:-4G}
SHARED=${KVLOOM_SHARED:-../shared}
OUT=$(mktemp -d)
PORT=18441
pid=""
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$OUT"' EXIT
AB="python3 $SHARED/bench/agentbench.py --url http://127.0.0.1:$PORT --agents 16 --gen 48 --agent-doc-words 1500 --stagger 10 --seed 7"

start() { # extra flags...
    "$BIN" serve -m "$MODEL" --port $PORT -t "$THREADS" --kv-mem "$KV_MEM" "$@" 2>> "$OUT/server.log" &
    pid=$!
    i=0
    until curl -s -m 2 "http://127.0.0.1:$PORT/health" | grep -q ok; do
        i=$((i + 1)); [ $i -gt 600 ] && { echo "server did not start" >&2; tail "$OUT/server.log"; exit 1; }
        sleep 0.5
    done
}

report() { # label json
    python3 - "$1" "$2" <<'EOF'
import json, sys
label, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
recs = [r for r in j["records"] if r.get("turn") == 0 and r.get("ok")]
fr = sorted((r["cached_tokens"] or 0) / r["prompt_tokens"] for r in recs)
tt = sorted(r["ttft"] * 1000 for r in recs)
n = len(fr)
print(f"| {label} | {n} | {min(fr):.3f} | {sum(fr)/n:.3f} | {sum(f >= 0.9 for f in fr)}/{n} | "
      f"{tt[n//2]:.0f} | {tt[-1]:.0f} |")
EOF
}

echo "| after kill -9 + restart | agents | first-request cache hit min | mean | agents >= 90% | TTFT p50 ms | TTFT max ms |"
echo "|---|---|---|---|---|---|---|"
for mode in ${MODES:-disk nodisk}; do
    flags=""
    [ $mode = disk ] && flags="--kv-disk $OUT/kv --kv-disk-size $DISK_SIZE"
    # shellcheck disable=SC2086
    start $flags
    $AB "$@" --json "$OUT/run1-$mode.json" > "$OUT/run1-$mode.txt"
    curl -s "http://127.0.0.1:$PORT/metrics" | grep '^kvloom_kv_disk' > "$OUT/metrics1-$mode.txt" || true
    kill -9 $pid; wait $pid 2>/dev/null || true
    # shellcheck disable=SC2086
    start $flags
    # the same workload again (agentbench derives every text from the seed and
    # the flags); its first turns are the agents' first requests after the restart
    $AB "$@" --per-request --json "$OUT/run2-$mode.json" > "$OUT/run2-$mode.txt"
    curl -s "http://127.0.0.1:$PORT/metrics" | grep '^kvloom_kv_disk' > "$OUT/metrics2-$mode.txt" || true
    kill -9 $pid; wait $pid 2>/dev/null || true
    pid=""
    report "$mode" "$OUT/run2-$mode.json"
done
echo
for f in "$OUT"/run*.txt; do echo "$(basename "$f"):"; tail -n 3 "$f"; done
[ -f "$OUT/metrics1-disk.txt" ] && { echo "disk metrics after the first run:"; cat "$OUT/metrics1-disk.txt"; }
[ -f "$OUT/metrics2-disk.txt" ] && { echo "disk metrics after the run after the restart:"; cat "$OUT/metrics2-disk.txt"; }
grep 'kvdisk:' "$OUT/server.log" || true
