#!/bin/sh
# agent_compare.sh — runs ../shared/bench/agentbench.py (agent and flat
# workloads) against `kvloom serve` and, when LLAMA_SERVER points at a
# llama-server binary built outside the repository, against llama-server on
# the same GGUF with the same thread count, one after the other in one run,
# and prints a markdown table with the ratios.
#
#   bench/agent_compare.sh MODEL.gguf [agentbench flags...]
#   env: KVLOOM_BIN (build/kvloom), LLAMA_SERVER (unset: kvloom only),
#        THREADS (2), KV_MEM (2G), NP (8, llama-server slots), CTX (16384),
#        WORKLOADS ("agents flat"), KEEP (a directory: the servers' logs and
#        agentbench's JSON summaries are kept there instead of removed),
#        KVLOOM_FLAGS (more `kvloom serve` flags, e.g. -v: a line per
#        admission with the tokens matched and copied)
#
# llama-server gets its best prefix-reuse settings: cache_prompt on (sent by
# agentbench), -np 8 parallel slots, continuous batching (its default).
set -eu
MODEL=${1:?usage: bench/agent_compare.sh MODEL.gguf [agentbench flags]}
shift
BIN=${KVLOOM_BIN:-build/kvloom}
THREADS=${THREADS:-2}
KV_MEM=${KV_MEM:-2G}
NP=${NP:-8}
CTX=${CTX:-16384}
WORKLOADS=${WORKLOADS:-agents flat}
SHARED=${KVLOOM_SHARED:-../shared}
OUT=${KEEP:-$(mktemp -d)}
mkdir -p "$OUT"
PY=/usr/bin/python3
PORT_K=18431
PORT_L=18432
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done; [ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT

wait_up() { # url
    i=0
    until curl -s -m 2 "$1/health" | grep -q ok; do
        i=$((i + 1)); [ $i -gt 600 ] && { echo "server at $1 did not start" >&2; exit 1; }
        sleep 0.5
    done
}

EXTRA="$*" # agentbench flags (values without spaces)
run_bench() { # label url
    for w in $WORKLOADS; do
        # shellcheck disable=SC2086
        "$PY" "$SHARED/bench/agentbench.py" --url "$2" --workload $w --label "$1" --json "$OUT/$1-$w.json" $EXTRA \
            > "$OUT/$1-$w.log" 2>&1 || echo "[$1 $w] agentbench reported errors (counted in the table)" >&2
        [ -f "$OUT/$1-$w.json" ] || { cat "$OUT/$1-$w.log" >&2; exit 1; }
        tail -n 2 "$OUT/$1-$w.log" | sed "s/^/[$1 $w] /" >&2
    done
}

# shellcheck disable=SC2086 # KVLOOM_FLAGS: several words
"$BIN" serve -m "$MODEL" --port $PORT_K -t "$THREADS" --kv-mem "$KV_MEM" ${KVLOOM_FLAGS:-} 2> "$OUT/kvloom.log" &
pids="$!"
wait_up "http://127.0.0.1:$PORT_K"
run_bench kvloom "http://127.0.0.1:$PORT_K"
kill $pids; wait 2>/dev/null || true; pids=""

if [ -n "${LLAMA_SERVER:-}" ]; then
    "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port $PORT_L -t "$THREADS" -np "$NP" -c "$CTX" \
        > "$OUT/llama.log" 2>&1 &
    pids="$!"
    wait_up "http://127.0.0.1:$PORT_L"
    run_bench llama "http://127.0.0.1:$PORT_L"
    kill $pids; wait 2>/dev/null || true; pids=""
fi

"$PY" - "$OUT" <<'PYEOF'
import glob, json, os, sys
d = sys.argv[1]
rows = {}
for f in glob.glob(os.path.join(d, "*.json")):
    s = json.load(open(f))
    rows[(s["label"], s["workload"])] = s
def get(s, key):
    v = s
    for k in key.split("."):
        v = v.get(k) if isinstance(v, dict) else None
    return v
print("| server | workload | ok/req | wall s | out tok/s | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | TPOT p50 ms "
      "| cache hit | cache hit (resumed turns) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (label, w), s in sorted(rows.items()):
    print(f"| {label} | {w} | {s['ok']}/{s['requests']} | {s['wall_s']} | {get(s,'out_tok_per_s')} | "
          f"{get(s,'ttft_ms.p50')} | {get(s,'ttft_ms.p90')} | {get(s,'ttft_ms.p99')} | {get(s,'tpot_ms.p50')} | "
          f"{get(s,'cache_hit_frac')} | {get(s,'resume_cache_hit_frac')} |")
for w in ("agents", "flat"):
    k, l = rows.get(("kvloom", w)), rows.get(("llama", w))
    if k and l:
        thr = get(k, "out_tok_per_s") / max(get(l, "out_tok_per_s"), 1e-9)
        ttft = get(l, "ttft_ms.p50") / max(get(k, "ttft_ms.p50"), 1e-9)
        print(f"\n{w}: kvloom/llama-server throughput {thr:.2f}x, median TTFT {ttft:.2f}x lower")
PYEOF
