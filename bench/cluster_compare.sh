#!/bin/sh
# cluster_compare.sh — routing quality through HAProxy (docs/scale-out.md,
# docs/perf.md): the same agentbench workload against
#   one kvloom server with KV = R x PER_KV, and
#   R replicas of PER_KV each behind HAProxy (deploy/cluster.sh) under each
#   policy: roundrobin, hash (bounded load), dualmap; dualmap again with no
#   session key (sessions recognised from their prompts),
# then the simulator (bench/cluster_sim.py) on the same workload shape with
# a cost model measured on the one server, side by side (the calibration
# error). Hold the benchmark lock:
#   flock /tmp/kvloom-bench.lock sh bench/cluster_compare.sh
# Env: KVLOOM_BIN, KVLOOM_SHARED, R (3), PER_KV (4M), AGENTS (12), TURNS (6),
# GEN (16), PAUSE (0.2-0.8), DOC (0: private document words per agent), ROUNDS (1),
# OUT (/tmp/kvloom-cluster-compare); DEPLOY_TTFT_SLO_S reaches kvloom.lua.
set -e
BIN=${KVLOOM_BIN:-build/kvloom}
SHARED=${KVLOOM_SHARED:-../shared}
R=${R:-3}; PER_KV=${PER_KV:-4M}; AGENTS=${AGENTS:-12}; TURNS=${TURNS:-6}; GEN=${GEN:-16}
PAUSE=${PAUSE:-0.2-0.8}; ROUNDS=${ROUNDS:-1}; DOC=${DOC:-0}
OUT=${OUT:-/tmp/kvloom-cluster-compare}
MODEL="$SHARED/models/stories260K.gguf"
AB="$SHARED/bench/agentbench.py"
mkdir -p "$OUT"
export DEPLOY_DIR="$OUT/cluster"
trap 'sh deploy/cluster.sh stop > /dev/null 2>&1 || true' EXIT
num() { echo "$1" | sed 's/M$//'; }
TOTAL_KV="$(( $(num "$PER_KV") * R ))M"
SERVE="-m $MODEL -t 1"
ABARGS="--agents $AGENTS --turns $TURNS --gen $GEN --sys-words 40 --tool-words 24 --user-words 8-12 \
 --tool-pause $PAUSE --agent-doc-words $DOC --warmup 0 --seed 5"

one() { # label: one server with the whole KV
    "$BIN" serve $SERVE --kv-mem "$TOTAL_KV" --port 0 --ready-file "$OUT/one.port" > "$OUT/one.log" 2>&1 &
    pid=$!
    i=0; while [ ! -s "$OUT/one.port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    python3 "$AB" --url "http://127.0.0.1:$(cat "$OUT/one.port")" $ABARGS --session-key prompt_cache_key \
        --label "$1" --json "$OUT/$1.json" | head -3
    if [ "$1" = one-r1 ]; then
        /usr/bin/python3 bench/cluster_sim.py calibrate "http://127.0.0.1:$(cat "$OUT/one.port")" --out "$OUT/cost.json"
    fi
    kill -TERM $pid; wait $pid || true
    rm -f "$OUT/one.port"
}

front() { # policy, label, session key
    url=$(DEPLOY_POLICY=$1 KVLOOM_BIN="$BIN" sh deploy/cluster.sh start "$R" $SERVE --kv-mem "$PER_KV" | tail -1)
    python3 "$AB" --url "$url" $ABARGS --session-key "$3" --label "$2" --json "$OUT/$2.json" | head -3
    sh deploy/cluster.sh stop
}

r=1
while [ $r -le "$ROUNDS" ]; do
    one "one-r$r"
    front roundrobin "roundrobin-r$r" prompt_cache_key
    front hash "hash-r$r" prompt_cache_key
    front dualmap "dualmap-r$r" prompt_cache_key
    front dualmap "dualmap-nokey-r$r" none
    r=$((r + 1))
done

# the workload's shape in tokens, for the simulator
"$BIN" serve $SERVE --kv-mem 4M --port 0 --ready-file "$OUT/tok.port" > /dev/null 2>&1 &
pid=$!
i=0; while [ ! -s "$OUT/tok.port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
AB="$AB" AGENTS=$AGENTS TURNS=$TURNS GEN=$GEN PAUSE=$PAUSE DOC=$DOC URL="http://127.0.0.1:$(cat "$OUT/tok.port")" \
    OUT="$OUT" python3 - <<'EOF'
import importlib.util, json, os, random, urllib.request
spec = importlib.util.spec_from_file_location("agentbench", os.environ["AB"])
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)
A, T, G = int(os.environ["AGENTS"]), int(os.environ["TURNS"]), int(os.environ["GEN"])
def ntok(text):
    req = urllib.request.Request(os.environ["URL"] + "/tokenize", json.dumps({"content": text}).encode(),
                                 {"Content-Type": "application/json"})
    return len(json.loads(urllib.request.urlopen(req).read())["tokens"])
# the same draws as agentbench.main (seed 5, the flags above)
rng = random.Random(5)
shared = ab.make_shared_prefix(rng, 40, 24)
users = [[ab.words(rng, rng.randint(8, 12)) for _ in range(T)] for _ in range(A)]
D = int(os.environ["DOC"])
docs = [ab.words(rng, D) if D > 0 else "" for _ in range(A)]
for i in range(A):  # the first turn reads the agent's document
    if docs[i]:
        users[i][0] = "Read this document first:\n%s\n\n%s" % (docs[i], users[i][0])
lo, hi = (float(x) for x in os.environ["PAUSE"].split("-"))
shape = {"agents": A, "turns": T, "gen": G, "pause": [lo, hi], "prefix_tokens": ntok(shared),
         "user_tokens": [[ntok("\nUser: %s\nAssistant:" % u) for u in row] for row in users]}
json.dump(shape, open(os.path.join(os.environ["OUT"], "shape.json"), "w"))
EOF
kill -TERM $pid; wait $pid || true

# KV capacity of one replica in tokens: blocks x 16 (from its /metrics)
"$BIN" serve $SERVE --kv-mem "$PER_KV" --port 0 --ready-file "$OUT/kv.port" > /dev/null 2>&1 &
pid=$!
i=0; while [ ! -s "$OUT/kv.port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
blocks=$(curl -s "http://127.0.0.1:$(cat "$OUT/kv.port")/metrics" | sed -n 's/^kvloom_kv_blocks_total //p')
kill -TERM $pid; wait $pid || true
rm -f "$OUT"/*.port
echo "== the simulator on this workload (R=$R, $blocks blocks x 16 tokens per replica)"
/usr/bin/python3 bench/cluster_sim.py agentbench --shape "$OUT/shape.json" --cost "$OUT/cost.json" \
    --replicas "$R" --kv-tokens $((blocks * 16)) --policies rr,bounded,dualmap --slo "${DEPLOY_TTFT_SLO_S:-1.0}" \
    --json "$OUT/sim.json"
echo "== measured"
OUT="$OUT" ROUNDS=$ROUNDS python3 - <<'EOF'
import json, os, statistics
out, rounds = os.environ["OUT"], int(os.environ["ROUNDS"])
sim = json.load(open(os.path.join(out, "sim.json")))
simname = {"roundrobin": "rr", "hash": "bounded", "dualmap": "dualmap"}
print("| setup | cache hit | resumed-turn hit | TTFT p50 ms | TTFT p99 ms | sim cache hit | sim TTFT p50 / p99 ms |")
print("|---|---:|---:|---:|---:|---:|---:|")
for lab in ("one", "roundrobin", "hash", "dualmap", "dualmap-nokey"):
    rs = [json.load(open(os.path.join(out, "%s-r%d.json" % (lab, r)))) for r in range(1, rounds + 1)]
    med = lambda f: statistics.median(f(x) for x in rs)
    row = "| %s | %.3f | %.3f | %.1f | %.1f |" % (lab, med(lambda x: x["cache_hit_frac"]), med(lambda x: x["resume_cache_hit_frac"]),
                                               med(lambda x: x["ttft_ms"]["p50"]), med(lambda x: x["ttft_ms"]["p99"]))
    s = sim.get(simname.get(lab, ""))
    row += (" %.3f | %.1f / %.1f |" % (s["cache_hit"], s["ttft_p50_ms"], s["ttft_p99_ms"])) if s else " | |"
    errs = sum(x["errors"] for x in rs)
    print(row + ("  (%d errors)" % errs if errs else ""))
EOF
