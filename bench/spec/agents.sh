#!/bin/sh
# agents.sh KVLOOM MODEL ROUNDS "SERVE ARGS" "AGENTBENCH ARGS" CONFIG... :
# concurrent agents (../shared/bench/agentbench.py, temperature 0) against
# `kvloom serve` with and without speculation (docs/perf.md, "Speculative
# decoding"). Each round starts one server per CONFIG (a CONFIG is its extra
# serve arguments, e.g. "--spec off", "--spec suffix"), so the
# configurations are interleaved, round i starting at the i-th CONFIG
# (rotated: a load that drifts within a round, or a slot that runs after
# a warm cache, falls on each in turn; a fixed order skews the ratios:
# docs/decisions.md, 2026-11-27);
# prints per run the output tokens/s and the server's drafted / accepted
# counters, then the median per configuration and its ratio to the first
# one's, and the median of the rounds' paired ratios. WARMUP=1: before the
# measured run each server first serves one unmeasured agentbench run of
# another seed (1000 + the round), so the measurement is of a server that
# has learnt its drafts' costs and acceptance, as a long-running one has
# (without it, every run is a fresh server's first ~400 steps). Run it under
# `flock /tmp/kvloom-bench.lock` (and bench/cpu_share.sh).
set -u
[ $# -ge 6 ] || { echo "usage: agents.sh KVLOOM MODEL ROUNDS \"SERVE ARGS\" \"AGENTBENCH ARGS\" CONFIG..." >&2; exit 2; }
bin=$1 model=$2 rounds=$3 sargs=$4 bargs=$5
shift 5
shared=${KVLOOM_SHARED:-../shared}
port=18461
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
i=1
n_cfg=$#
while [ "$i" -le "$rounds" ]; do
    j=0
    while [ "$j" -lt "$n_cfg" ]; do
        c=$(((i - 1 + j) % n_cfg + 1))
        j=$((j + 1))
        eval "cfg=\${$c}"
        # shellcheck disable=SC2086 # word lists
        "$bin" serve -m "$model" --port $port $sargs $cfg 2>"$tmp/serve.log" &
        pid=$!
        n=0
        until curl -s -m 2 "http://127.0.0.1:$port/health" | grep -q ok; do
            n=$((n + 1))
            [ $n -gt 600 ] && { echo "the server did not start:" >&2; cat "$tmp/serve.log" >&2; exit 1; }
            sleep 0.5
        done
        if [ -n "${WARMUP:-}" ]; then
            # shellcheck disable=SC2086
            python3 "$shared/bench/agentbench.py" --url "http://127.0.0.1:$port" --seed $((1000 + i)) $bargs \
                --json "$tmp/w.json" >"$tmp/ab.log" 2>&1
            # (the counters the measured run's counts are taken from)
            d0=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^kvloom_spec_drafted_tokens_total/ { d += $NF } END { print d + 0 }')
            a0=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^kvloom_spec_accepted_tokens_total/ { a += $NF } END { print a + 0 }')
        fi
        # shellcheck disable=SC2086
        python3 "$shared/bench/agentbench.py" --url "http://127.0.0.1:$port" --seed "$i" $bargs --json "$tmp/r.json" \
            >"$tmp/ab.log" 2>&1
        tps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["out_tok_per_s"])' "$tmp/r.json" 2>/dev/null || echo 0)
        met=$(curl -s "http://127.0.0.1:$port/metrics" |
            awk -v d0="${d0:-0}" -v a0="${a0:-0}" '/^kvloom_spec_drafted_tokens_total/ { d += $NF }
                 /^kvloom_spec_accepted_tokens_total/ { a += $NF }
                 END { printf "%d drafted, %d accepted", d - d0, a - a0 }')
        kill $pid
        wait $pid 2>/dev/null
        pid=
        echo "round $i config $c ($cfg): $tps out tokens/s, $met"
        echo "$c $tps" >>"$tmp/all"
        echo "$i $c $tps" >>"$tmp/rounds"
    done
    i=$((i + 1))
done
sh "$(dirname "$0")/median.sh" "$tmp/all" "out tokens/s" "" "$@"
sh "$(dirname "$0")/paired.sh" "$tmp/rounds" "$@"
