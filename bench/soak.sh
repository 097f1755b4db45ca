#!/bin/sh
# soak.sh — one `kvloom serve` under mixed traffic for SOAK_MINUTES, sampled
# every few seconds; fails if anything leaks, errs or does not settle (issue 14).
#
#   bench/soak.sh            env: SOAK_MINUTES (30), MODEL (../shared/models/
#                            stories260K.gguf), KVLOOM_BIN (build/kvloom),
#                            KV_MEM (1280K), AGENTS (8), SAMPLE_S (5), OUT (a temp dir,
#                            kept: samples.csv, server.log, the JSON summaries)
#
# The server runs with --api-key (so bad keys are part of the mix), a KV pool
# small enough that prefix-cache eviction and preemption happen, a disk tier
# in a temp dir (--kv-disk, written through and read back), and short pin
# TTLs (--kv-ttl-max 20) so that the end state is reached within a minute.
# Load, all at once for the whole duration:
#   - ../shared/bench/agentbench.py in a loop (agents with tool pauses,
#     private documents, staggered starts), through soak_clients.py's
#     wrapper that adds the API key;
#   - bench/soak_clients.py load: well-formed streamed and plain requests,
#     hostile requests (malformed JSON, wrong types, oversized bodies, bad
#     keys, unknown routes) and random disconnects (mid-stream, mid-headers,
#     mid-body);
#   - with TENANTS=1 (the default; issue 26), two hostile tenants with keys
#     of their own: soak_clients.py flood (16 threads of back-to-back
#     64-token completions: each gets a 200 or its 429 client_queue_full)
#     and soak_clients.py noread (8 streams of 2,000 tokens never read,
#     ended by --stall-timeout 10 and replaced). The agents and the load
#     above share the first key and must still see no error. The three
#     keys come from --api-key-file (OUT/keys).
# Samples (samples.csv): RSS (VmRSS), open fds (/proc/PID/fd), threads, and
# from /metrics the running/waiting requests, KV blocks used/cached/pinned,
# pins, request-body bytes held.
#
# It FAILS (exit 1, the reasons printed) when:
#   - any well-formed request errs (agentbench's errors, soak_clients.py's
#     good_* classes) or a hostile one gets anything but its 4xx;
#   - with TENANTS=1: a tenant wrote no summary or erred (a flood request
#     answered with anything but 200 or its 429), or the non-reading
#     tenant opened streams and kvloom_requests_parked_total or
#     kvloom_requests_stalled_total is still 0 (its streams must be parked,
#     then cut);
#   - the server dies;
#   - RSS grows after warm-up: the median of the samples of the load's last
#     quarter exceeds the median of its second quarter by more than
#     max(10 %, 20 MB). Why these: the first quarter is warm-up (malloc
#     arenas per connection thread, the prefix cache and disk index filling,
#     the KV pool touched); after it the working set is flat, so a leak of
#     even a few hundred bytes per request shows as steady growth over
#     thousands of requests, while glibc's arena and fragmentation noise
#     stays within a few MB (20 MB floor: 10 % of a ~50 MB process is too
#     tight for that noise). Medians, not single samples, so that a burst of
#     concurrent requests at one sample does not count;
#   - fds grow: the same medians, by more than 8 (each sample also counts the
#     sockets of connections in flight; the clients hold at most ~8-10);
#   - the metrics do not return to baseline within SETTLE_S (90) after the
#     load stops. Baseline, per metric: requests running = waiting = 0;
#     request-body bytes held = 0; every used KV block is the prefix cache's
#     (used == cached: no request or pin holds one); pins = pinned blocks = 0
#     (their TTL <= --kv-ttl-max has passed); threads and fds back to their
#     value before the load (+2 fds of slack for the disk tier's
#     descriptors). The cache itself keeps its blocks: that is its job.
# It prints a summary: duration, requests by class, errors, RSS start/end/
# max, fds start/end, threads start/end; the well-behaved clients' requests
# and errors with the agents' TTFT beside the tenants; the tenants' counts
# and the server's parked / cut streams and per-client refusals.
set -u
MIN=${SOAK_MINUTES:-30}
SHARED=${KVLOOM_SHARED:-../shared}
MODEL=${MODEL:-$SHARED/models/stories260K.gguf}
BIN=${KVLOOM_BIN:-build/kvloom}
KV_MEM=${KV_MEM:-1280K}
AGENTS=${AGENTS:-8}
TENANTS=${TENANTS:-1}
SAMPLE_S=${SAMPLE_S:-5}
SETTLE_S=${SETTLE_S:-90}
OUT=${OUT:-$(mktemp -d /tmp/kvloom-soak.XXXXXX)}
KEY=sk-soak-$$
FKEY=sk-flood-$$
NKEY=sk-noread-$$
MAX_BODY=65536
PY=python3
HERE=$(dirname "$0")
mkdir -p "$OUT"
SECS=$((MIN * 60))
fail=""
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT INT TERM

# one key per tenant, from a file (kept out of ps): each is a client of its
# own for the fair admission, the parking and the per-client limits
printf '%s\n%s\n%s\n' "$KEY" "$FKEY" "$NKEY" > "$OUT/keys"
"$BIN" serve -m "$MODEL" --port 0 --ready-file "$OUT/port" --api-key-file "$OUT/keys" \
    --kv-mem "$KV_MEM" --kv-disk "$OUT/kvdisk" --kv-ttl-max 20 --max-body $MAX_BODY --stall-timeout 10 -t 2 \
    2> "$OUT/server.log" &
SPID=$!
pids="$SPID"
i=0
until [ -s "$OUT/port" ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { echo "soak: the server did not start" >&2; cat "$OUT/server.log" >&2; exit 1; }
    sleep 0.2
done
PORT=$(cat "$OUT/port")
URL=http://127.0.0.1:$PORT

metric() { # name (first sample line)
    grep "^$1 " "$OUT/metrics.txt" | head -n 1 | awk '{print $2}'
}
sample() { # phase
    [ -d /proc/$SPID ] || return 1
    rss=$(awk '/^VmRSS:/ {print $2}' /proc/$SPID/status)
    thr=$(awk '/^Threads:/ {print $2}' /proc/$SPID/status)
    fds=$(ls /proc/$SPID/fd | wc -l)
    curl -s -m 10 -H "Authorization: Bearer $KEY" "$URL/metrics" > "$OUT/metrics.txt" || : > "$OUT/metrics.txt"
    echo "$(($(date +%s) - T0)),$1,$rss,$fds,$thr,$(metric kvloom_requests_running),$(metric kvloom_requests_waiting),$(metric kvloom_kv_blocks_used),$(metric kvloom_kv_blocks_cached),$(metric kvloom_kv_pinned_blocks),$(metric kvloom_kv_pins),$(metric kvloom_http_body_bytes),$(metric kvloom_preemptions_total),$(metric kvloom_kv_evicted_blocks_total),$(metric kvloom_kv_disk_restored_tokens_total),$(metric kvloom_requests_parked_total),$(metric kvloom_requests_stalled_total),$(metric kvloom_client_refused_total)" >> "$OUT/samples.csv"
}

T0=$(date +%s)
echo "t_s,phase,rss_kb,fds,threads,running,waiting,kv_used,kv_cached,kv_pinned_blocks,kv_pins,body_bytes,preemptions,evicted_blocks,disk_restored_tokens,parked,stalled,client_refused" > "$OUT/samples.csv"
sleep 1
# two idle samples, the baseline from the second: the first one's /metrics
# request starts a handler thread, which the sampling (every SAMPLE_S, less
# than the 10 s after which an idle handler thread exits) then keeps alive
sample idle
sleep 1
sample idle
read -r _ _ RSS0 FDS0 THR0 _ <<EOF
$(tail -n 1 "$OUT/samples.csv" | tr ',' ' ')
EOF
echo "soak: server pid $SPID on $URL for $MIN min; output in $OUT" >&2

# agentbench in a loop, each round a new seed (new agents) until the time is up
(
    r=0
    end=$(($(date +%s) + SECS))
    while [ "$(date +%s)" -lt "$end" ]; do
        r=$((r + 1))
        left=$((end - $(date +%s)))
        "$PY" "$HERE/soak_clients.py" agentbench --api-key "$KEY" --agentbench "$SHARED/bench/agentbench.py" -- \
            --url "$URL" --agents "$AGENTS" --turns 4 --gen 16 --sys-words 30 --tool-words 10 --user-words 3-6 \
            --tool-pause 0.5-4 --tool-result-words 3-8 --agent-doc-words 30 --stagger 3 --timeout 120 \
            --seed $r --max-seconds "$left" --warmup 0 --json "$OUT/agentbench-$r.json" \
            > "$OUT/agentbench-$r.log" 2>&1
    done
) &
AB=$!
pids="$pids $AB"
"$PY" "$HERE/soak_clients.py" load --url "$URL" --seconds "$SECS" --api-key "$KEY" --max-body $MAX_BODY \
    --json "$OUT/clients.json" > "$OUT/clients.log" 2>&1 &
CL=$!
pids="$pids $CL"
TN=""
if [ "$TENANTS" = 1 ]; then
    "$PY" "$HERE/soak_clients.py" flood --url "$URL" --seconds "$SECS" --api-key "$FKEY" --json "$OUT/flood.json" \
        > "$OUT/flood.log" 2>&1 &
    TN="$!"
    "$PY" "$HERE/soak_clients.py" noread --url "$URL" --seconds "$SECS" --api-key "$NKEY" --json "$OUT/noread.json" \
        > "$OUT/noread.log" 2>&1 &
    TN="$TN $!"
    pids="$pids $TN"
fi

end=$((T0 + SECS))
while [ "$(date +%s)" -lt "$end" ]; do
    sleep "$SAMPLE_S"
    sample load || { fail="$fail; the server died (see $OUT/server.log)"; break; }
done
wait $CL
wait $AB
for p in $TN; do wait "$p"; done

# settle: wait for the baseline (or SETTLE_S)
settled=0
s_end=$(($(date +%s) + SETTLE_S))
while [ -z "$fail" ] && [ "$(date +%s)" -lt "$s_end" ]; do
    sleep "$SAMPLE_S"
    sample settle || { fail="$fail; the server died (see $OUT/server.log)"; break; }
    set -- $(tail -n 1 "$OUT/samples.csv" | tr ',' ' ')
    # t phase rss fds thr running waiting used cached pinned pins body
    if [ "$6" = 0 ] && [ "$7" = 0 ] && [ "$8" = "$9" ] && [ "${10}" = 0 ] && [ "${11}" = 0 ] && [ "${12}" = 0 ] &&
        [ "$5" -le "$THR0" ] && [ "$4" -le $((FDS0 + 2)) ]; then
        settled=1
        break
    fi
done
[ -z "$fail" ] && [ $settled = 0 ] && fail="$fail; not back to baseline after ${SETTLE_S}s: $(tail -n 1 "$OUT/samples.csv") (start: fds $FDS0, threads $THR0)"

SUMMARY=$("$PY" - "$OUT" "$SECS" "$TENANTS" <<'PYEOF'
import csv, glob, json, statistics, sys
out, secs, with_tenants = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
rows = list(csv.DictReader(open(out + "/samples.csv")))
load = [r for r in rows if r["phase"] == "load"]
msgs = []
def med(rs, k):
    return statistics.median(int(r[k]) for r in rs) if rs else 0
q = len(load) // 4
if q >= 2:
    q2, q4 = load[q:2 * q], load[3 * q:]
    r2, r4 = med(q2, "rss_kb"), med(q4, "rss_kb")
    f2, f4 = med(q2, "fds"), med(q4, "fds")
    if r4 - r2 > max(0.10 * r2, 20 * 1024):
        msgs.append(f"RSS grew after warm-up: median {r2/1024:.1f} MB (2nd quarter) -> {r4/1024:.1f} MB (last quarter)")
    if f4 - f2 > 8:
        msgs.append(f"fds grew after warm-up: median {f2} -> {f4}")
    growth = f"RSS median q2 {r2/1024:.1f} MB, q4 {r4/1024:.1f} MB; fds median q2 {f2}, q4 {f4}"
else:
    msgs.append(f"too few samples ({len(load)}) to judge growth")
    growth = "n/a"
ab = {"requests": 0, "ok": 0, "errors": 0, "samples": []}
for f in sorted(glob.glob(out + "/agentbench-*.json")):
    d = json.load(open(f))
    ab["requests"] += d["requests"]; ab["ok"] += d["ok"]; ab["errors"] += d["errors"]
    ab["samples"] += d["error_samples"]
logs = glob.glob(out + "/agentbench-*.log")
if len(logs) > len(glob.glob(out + "/agentbench-*.json")):
    msgs.append("an agentbench round wrote no summary (crashed?)")
if ab["errors"]:
    msgs.append(f"agentbench: {ab['errors']} errors, e.g. {ab['samples'][:2]}")
try:
    cl = json.load(open(out + "/clients.json"))
except (OSError, ValueError):
    cl = {"requests": {}, "n_requests": 0, "n_errors": 1, "error_samples": ["soak_clients.py wrote no summary"]}
if cl["n_errors"]:
    msgs.append(f"soak_clients: {cl['n_errors']} errors, e.g. {cl['error_samples'][:3]}")
tenants = {}
for name in ("flood", "noread"):
    try:
        tenants[name] = json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError):
        continue
    if tenants[name]["n_errors"]:
        msgs.append(f"{name}: {tenants[name]['n_errors']} errors, e.g. {tenants[name]['error_samples'][:3]}")
ttft = []
for f in sorted(glob.glob(out + "/agentbench-*.json")):
    d = json.load(open(f))
    t = d.get("ttft_ms") or {}
    if t.get("p50") is not None:
        ttft.append(("ttft_p50_ms", t["p50"]))
    if t.get("p99") is not None:
        ttft.append(("ttft_p99_ms", t["p99"]))
rss = [int(r["rss_kb"]) for r in rows]
last = rows[-1]
print(f"duration: {secs/60:.1f} min of load ({len(load)} samples), then {int(last['t_s']) - secs} s settling")
print(f"requests: agentbench {ab['requests']} ({ab['ok']} ok, {ab['errors']} errors); "
      + ", ".join(f"{k} {v}" for k, v in cl["requests"].items()) + f"; errors {cl['n_errors']}")
print(f"RSS: start {rss[0]/1024:.1f} MB, end {rss[-1]/1024:.1f} MB, max {max(rss)/1024:.1f} MB ({growth})")
print(f"fds: start {rows[0]['fds']}, end {last['fds']}; threads: start {rows[0]['threads']}, end {last['threads']}")
print(f"engine: preemptions {last['preemptions']}, evicted blocks {last['evicted_blocks']}, "
      f"disk-restored tokens {last['disk_restored_tokens']}; end: running {last['running']}, waiting "
      f"{last['waiting']}, kv used/cached {last['kv_used']}/{last['kv_cached']}, pins {last['kv_pins']}")
good_n, good_err = ab["requests"] + cl["n_requests"], ab["errors"] + cl["n_errors"]
lat = ""
if ttft:
    p50 = [v for k, v in ttft if k == "ttft_p50_ms"]
    p99 = [v for k, v in ttft if k == "ttft_p99_ms"]
    lat = (f"; agents' TTFT p50 {statistics.median(p50):.0f} ms (median of rounds), "
           f"p99 {max(p99):.0f} ms (worst round)")
print(f"well-behaved (agents + load, their own key): {good_n} requests, {good_err} errors (must be 0)"
      + (", beside the tenants" if with_tenants else "") + lat)
if with_tenants:
    for name in ("flood", "noread"):
        if name not in tenants:
            msgs.append(f"{name}: the tenant wrote no summary")
    print("tenants: " + "; ".join(f"{k}: " + ", ".join(f"{c} {n}" for c, n in v["requests"].items())
                                  for k, v in tenants.items()))
    parked, stalled = int(last["parked"] or 0), int(last["stalled"] or 0)
    print(f"server: streams parked {parked} (kvloom_requests_parked_total), cut {stalled} "
          f"(kvloom_requests_stalled_total), per-client refusals {last['client_refused'] or 0} "
          f"(kvloom_client_refused_total)")
    opened = tenants.get("noread", {}).get("requests", {}).get("noread_opened", 0)
    if opened and (not parked or not stalled):
        msgs.append(f"the non-reading tenant opened {opened} streams but the server parked {parked} and cut {stalled}")
for m in msgs:
    print("FAIL: " + m)
PYEOF
)
echo "$SUMMARY"
echo "$SUMMARY" > "$OUT/summary.txt"
echo "$SUMMARY" | grep -q '^FAIL' && fail="$fail; see the FAIL lines"
[ -d /proc/$SPID ] || fail="$fail; the server is gone"
if [ -n "$fail" ]; then
    echo "soak: FAILED${fail}" | tee -a "$OUT/summary.txt" >&2
    exit 1
fi
echo "soak: passed ($OUT)" | tee -a "$OUT/summary.txt"
exit 0
