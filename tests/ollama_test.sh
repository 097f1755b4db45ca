#!/bin/sh
# ollama_test.sh — the Ollama API (/api/chat, /api/generate, /api/tags,
# /api/show, /api/version) end to end through the official `ollama` npm client
# (tests/package.json; tests/node/ollama.mjs), against `kvloom serve` with two
# models: the shared stories260K (ChatML fallback template, generic tool
# calls) and a tiny RANDOM-weight Qwen3 (its own template: hermes calls,
# <think>), where only constrained decoding makes outputs parse; the script
# validates them against their schemas itself.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_BUILD (where the generated
# model is cached), KVLOOM_SHARED (../shared). Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"
T=${OLLAMA_TEST_T:-90} # deadline of one node script in seconds (its own is 10 s shorter)

need_node ollama
# the Qwen3 model, in the same place and shape as tools_test.sh's
qwen3_tiny
STORIES="$SHARED/models/stories260K.gguf"

start_server() { # name, model file
    serve_start "$1" -m "$2" -t 1 --kv-mem 64M --max-body 256K
}
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
run_model() { # name, model id, model file
    port=$(serve_port "$1")
    if [ -z "$port" ]; then
        echo "server $1 did not start" > "$tmp/$1.nostart"
        return
    fi
    file=$(abs "$3")
    (cd "$ROOT/tests" && timeout -k 5 "$T" node node/ollama.mjs "http://127.0.0.1:$port" "$2" "$file" $(( (T - 10) * 1000 ))) \
        > "$tmp/$1.out" 2>&1
    echo $? > "$tmp/$1.status"
}

start_server stories "$STORIES"
start_server qwen3 "$QWEN"
run_model stories stories260K "$STORIES" & r1=$!
run_model qwen3 qwen3-tiny "$QWEN" & r2=$!
wait $r1 $r2

for m in stories qwen3; do
    if [ -f "$tmp/$m.nostart" ]; then
        bad "server $m did not start"
        echo "--- server log ($m)"; tail -n 40 "$tmp/$m.log"
        continue
    fi
    mfail=0
    node_tally "ollama.mjs ($m)" "$tmp/$m.out" "$(cat "$tmp/$m.status" 2>/dev/null || echo 1)" || mfail=1
    serve_stop "$m" || mfail=1
    if [ $mfail -ne 0 ]; then echo "--- server log ($m), last 40 lines"; tail -n 40 "$tmp/$m.log"; fi
done
finish
