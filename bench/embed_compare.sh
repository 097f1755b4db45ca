#!/bin/sh
# embed_compare.sh — embeddings throughput of kvloom and llama-server
# --embeddings on the same GGUF files, interleaved (kvloom, llama-server,
# kvloom, llama-server ...), each through bench/embed_bench.py. Run under
# the machine's bench lock: flock /tmp/kvloom-bench.lock sh bench/embed_compare.sh
# Env: KVLOOM (build/kvloom), LLAMA (llama-server binary), T (threads, 2),
# ROUNDS (2), and per model "FILE:BATCH:WORDS:SECONDS:CTX" in MODELS.
KVLOOM=${KVLOOM:-build/kvloom}
LLAMA=${LLAMA:-/tmp/llama/build/bin/llama-server}
T=${T:-2}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-/tmp/embed_compare}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
wait_port() { # url
    i=0
    while [ $i -lt 600 ]; do curl -sf "$1/health" > /dev/null 2>&1 && return 0; sleep 0.2; i=$((i + 1)); done
    return 1
}
for r in $(seq 1 "$ROUNDS"); do
    for spec in $MODELS; do
        f=${spec%%:*}; rest=${spec#*:}
        batch=$(echo "$rest" | cut -d: -f1); words=$(echo "$rest" | cut -d: -f2)
        secs=$(echo "$rest" | cut -d: -f3); ctx=$(echo "$rest" | cut -d: -f4)
        name=$(basename "$f" .gguf)
        for srv in kvloom llama; do
            port=$((18500 + r))
            if [ $srv = kvloom ]; then
                "$KVLOOM" serve -m "$f" -t "$T" --ctx "$ctx" --kv-mem 256M --port $port 2> "$OUT/$srv-$name-$r.log" &
            else
                "$LLAMA" --embeddings -m "$f" -t "$T" -c $((ctx * 4)) -np 4 -b 2048 -ub 2048 --host 127.0.0.1 \
                    --port $port > "$OUT/$srv-$name-$r.log" 2>&1 &
            fi
            pid=$!
            if wait_port "http://127.0.0.1:$port"; then
                printf "round %d %-7s " "$r" "$srv"
                python3 "$here/embed_bench.py" "http://127.0.0.1:$port" "$name" --batch "$batch" --words "$words" \
                    --seconds "$secs" 2>&1 | tail -n 1
            else
                echo "round $r $srv $name: did not start"; tail -n 5 "$OUT/$srv-$name-$r.log"
            fi
            kill $pid; wait $pid 2> /dev/null
        done
    done
done
