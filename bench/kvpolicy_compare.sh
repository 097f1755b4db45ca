#!/bin/sh
# kvpolicy_compare.sh — the agent KV policy against plain LRU on the tool-pause
# agent workload (../shared/bench/agentbench.py), one server after the other
# in one run, same model, same KV memory, same seed; prints a markdown row per
# policy: resumed turns' prompt tokens from the cache, their TTFT p50/p90,
# output throughput, and the ratios of the first policy to the last.
#
#   bench/kvpolicy_compare.sh MODEL.gguf [agentbench flags...]
#   env: KVLOOM_BIN (build/kvloom), THREADS (2), KV_MEM (400M),
#        POLICIES ("agent lru"), LABEL (a name for the rows),
#        LLAMA_SERVER (a llama-server binary built outside the repository:
#        the policy name "llama" runs it), LLAMA_CTX (its -c: the same KV
#        memory as KV_MEM, in tokens of the model's f16 KV), NP (4, its slots),
#        LLAMA_ARGS (more llama-server flags, e.g. "-fa"), PORT (18451)
# A policy name ending in "+disk" (agent+disk, lru+disk) adds the disk tier
# (--kv-disk in a fresh temporary directory): the same RAM for KV, plus disk.
# llama-server gets its best settings for this workload: cache_prompt (sent
# by agentbench), as many slots as whole contexts fit in the same memory
# (NP), continuous batching, and its prompt-similarity slot choice, so a
# returning agent lands on the slot that still holds its context.
# The issue's workload is the default agentbench flags below; extra flags
# are appended (a later flag wins).
set -eu
MODEL=${1:?usage: bench/kvpolicy_compare.sh MODEL.gguf [agentbench flags]}
shift
BIN=${KVLOOM_BIN:-build/kvloom}
THREADS=${THREADS:-2}
KV_MEM=${KV_MEM:-400M}
SHARED=${KVLOOM_SHARED:-../shared}
LABEL=${LABEL:-default}
OUT=$(mktemp -d)
PORT=${PORT:-18451}
pid=""
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$OUT"' EXIT

for pol in ${POLICIES:-agent lru}; do
    if [ "$pol" = llama ]; then
        "${LLAMA_SERVER:?LLAMA_SERVER: a llama-server binary}" -m "$MODEL" --host 127.0.0.1 --port $PORT -t "$THREADS" \
            -c "${LLAMA_CTX:?LLAMA_CTX: llama-server context tokens for KV_MEM}" -np "${NP:-4}" ${LLAMA_ARGS:-} > "$OUT/server-$pol.log" 2>&1 &
    else
        DISK_ARGS=""
        case $pol in *+disk) rm -rf "$OUT/kvdisk"; DISK_ARGS="--kv-disk $OUT/kvdisk";; esac
        "$BIN" serve -m "$MODEL" --port $PORT -t "$THREADS" --kv-mem "$KV_MEM" --kv-policy "${pol%+disk}" $DISK_ARGS 2> "$OUT/server-$pol.log" &
    fi
    pid=$!
    i=0
    until curl -s -m 2 "http://127.0.0.1:$PORT/health" | grep -q ok; do
        i=$((i + 1)); [ $i -gt 600 ] && { echo "server did not start" >&2; tail "$OUT/server-$pol.log"; exit 1; }
        sleep 0.5
    done
    python3 "$SHARED/bench/agentbench.py" --url "http://127.0.0.1:$PORT" --agents 16 --turns 4 --gen 48 \
        --agent-doc-words 1500 --tool-pause 2-6 --tool-result-words 60-120 --stagger 10 --seed 7 "$@" \
        --label "$pol" --json "$OUT/$pol.json" > "$OUT/$pol.txt" 2>&1 || true
    curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^kvloom_kv_(pins|pinned|evicted|ttl|disk|restored|recomputed)' > "$OUT/metrics-$pol.txt" || true
    kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
    sleep 1 # (the port is free before the next server binds it)
    pid=""
done

python3 - "$OUT" "$LABEL" ${POLICIES:-agent lru} <<'PY'
import json, sys
out, label, pols = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = {}
print("| workload | policy | ok | resumed-turn cache hit | resumed TTFT p50 ms | p90 ms | first-turn TTFT p50 ms | out tok/s | wall s |")
print("|---|---|---|---|---|---|---|---|---|")
for p in pols:
    try:
        j = json.load(open(f"{out}/{p}.json"))
    except Exception as e:
        print(f"| {label} | {p} | failed: {e} |"); continue
    rows[p] = j
    print(f"| {label} | {p} | {j['ok']}/{j['requests']} | {j['resume_cache_hit_frac']} | {j['ttft_resume_ms']['p50']} | "
          f"{j['ttft_resume_ms']['p90']} | {j['ttft_first_ms']['p50']} | {j['out_tok_per_s']} | {j['wall_s']} |")
if len(rows) >= 2:
    a, b = rows[pols[0]], rows[pols[-1]]
    r = lambda x, y: (x / y) if x and y else float('nan')
    print(f"\n{pols[0]} vs {pols[-1]}: resumed TTFT p50 {r(b['ttft_resume_ms']['p50'], a['ttft_resume_ms']['p50']):.1f}x lower, "
          f"output throughput {r(a['out_tok_per_s'], b['out_tok_per_s']):.2f}x")
PY
for p in ${POLICIES:-agent lru}; do echo "$p:"; tail -n 3 "$OUT/$p.txt"; cat "$OUT/metrics-$p.txt"; done
