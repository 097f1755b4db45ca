#!/bin/sh
# tools_test.sh — tool calling and structured output end to end, through real
# agent frameworks from npm (tests/package.json): the `openai` client
# (tests/node/tools_openai.mjs), the OpenAI Agents SDK (tools_agents.mjs) and
# the Vercel AI SDK (tools_vercel.mjs), against `kvloom serve` with three tiny
# RANDOM-weight models that have real tokenizers and chat templates: Qwen3
# (hermes <tool_call>, its own template), Llama 3.2 (JSON calls, served with
# tests/fixtures/templates/llama32.jinja) and SmolLM2 (a template without a
# call syntax: smollm2.jinja with --tool-format generic). With random weights only
# constrained decoding makes the outputs parse and validate, and the scripts
# validate every output against its schema themselves.
# A fourth server runs a reduced qwen3moe (Qwen3-30B-A3B's architecture,
# tokenizer and template) through the Agents SDK tool loop: Qwen3's parsers
# and template unchanged on the MoE model. A fifth runs a reduced gpt-oss
# (gpt-oss-20b's architecture, the o200k_harmony vocabulary exported from
# js-tiktoken, OpenAI's template tests/fixtures/templates/gpt-oss.jinja)
# through the `openai` client's script and the Agents SDK tool loop: the
# harmony format (channels, to=functions.NAME calls, tool results) end to end.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_BUILD (where the generated
# models are cached), KVLOOM_SHARED (../shared). Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"
# Deadline of one node script in seconds (its own deadline is 10 s shorter);
# the models run side by side, each its three scripts one after another.
T_OPENAI=${TOOLS_TEST_T_OPENAI:-110}
T_AGENTS=${TOOLS_TEST_T_AGENTS:-50}
T_VERCEL=${TOOLS_TEST_T_VERCEL:-50}

# Node and every package of tests/package.json: missing ones are failures.
command -v node >/dev/null 2>&1 || need_node
need_node $(node -e 'for (const d of Object.keys(require(process.argv[1]).dependencies)) console.log(d)' "$ROOT/tests/package.json")

# The models: random weights, real vocabularies; generated once per build
# directory (again when the kvloom binary is newer).
M="$B/tools-models"
mkdir -p "$M"
tiny() { # preset, file name, more kvloom gen flags...
    _p=$1; _n=$2; shift 2
    gen_model "$M/$_n.gguf" --preset "$_p" --n-layer 2 --n-embd 128 --n-head 4 --n-head-kv 2 --head-dim 32 \
        --n-ff 256 --type Q8_0 --shared "$SHARED" "$@"
}
qwen3_tiny
tiny llama-3.2-1b llama32-tiny
tiny smollm2-135m smollm2-tiny
# Qwen3-30B-A3B's architecture (qwen3moe), tokenizer and template at a tiny
# shape: 8 experts, 2 used (the overrides of kvloom gen)
tiny qwen3-30b-a3b qwen3moe-tiny --n-expert 8 --n-expert-used 2 --n-ff-exp 64
# gpt-oss-20b's architecture and vocabulary (exported once per build directory)
. "$ROOT/tests/o200k_lib.sh"
if o200k_vocab "$B"; then
    export KVLOOM_VOCAB_DIR="$B/vocab"
    tiny gpt-oss-20b gptoss-tiny --n-expert 8 --n-expert-used 2 --n-ff-exp 64 \
        --template "$ROOT/tests/fixtures/templates/gpt-oss.jinja"
else
    bad "tools/o200k_harmony.mjs"
fi
[ $fail -ne 0 ] && finish

# One server per model, each on a free port.
start_server() { # name, model file, extra flags...
    name=$1; model=$2; shift 2
    serve_start "$name" -m "$model" -t 1 --kv-mem 64M "$@"
}
start_server qwen3 "$M/qwen3-tiny.gguf"
start_server llama32 "$M/llama32-tiny.gguf" --chat-template-file "$ROOT/tests/fixtures/templates/llama32.jinja"
start_server smollm2 "$M/smollm2-tiny.gguf" --chat-template-file "$ROOT/tests/fixtures/templates/smollm2.jinja" --tool-format generic
# The MoE model with Qwen3's own template and parsers, unchanged; told that
# the machine has 1 MB of free memory, so the server must say at start that
# the weights do not fit (and then serve anyway: they are memory-mapped).
KVLOOM_MEM_AVAILABLE=1000000 start_server qwen3moe "$M/qwen3moe-tiny.gguf"
start_server gptoss "$M/gptoss-tiny.gguf"

# The three scripts against one server, one after another; each prints
# "NAME: N passed, N failed" last.
run_model() { # name
    port=$(serve_port "$1")
    if [ -z "$port" ]; then
        echo "server $1 did not start" > "$tmp/$1.nostart"
        return
    fi
    U="http://127.0.0.1:$port/v1"
    scripts="openai:$T_OPENAI agents:$T_AGENTS vercel:$T_VERCEL"
    [ "$1" = qwen3moe ] && scripts="agents:$T_AGENTS" # the Agents SDK tool loop
    [ "$1" = gptoss ] && scripts="openai:$T_OPENAI agents:$T_AGENTS"
    for s in $scripts; do
        n=${s%%:*}; t=${s#*:}
        (cd "$ROOT/tests" && timeout -k 5 "$t" node "node/tools_$n.mjs" "$U" "$1" $(( (t - 10) * 1000 ))) \
            > "$tmp/$1.$n.out" 2>&1
        echo $? > "$tmp/$1.$n.status"
    done
}
run_model qwen3 & r1=$!
run_model llama32 & r2=$!
run_model smollm2 & r3=$!
run_model qwen3moe & r4=$!
run_model gptoss & r5=$!
wait $r1 $r2 $r3 $r4 $r5

if grep -q "weights do not fit in memory" "$tmp/qwen3moe.log" && grep -q "of 8 experts per layer" "$tmp/qwen3moe.log"; then
    pass=$((pass + 1))
else
    bad "serve (qwen3moe, KVLOOM_MEM_AVAILABLE=1000000) did not say at start that the weights do not fit"
fi
for m in qwen3 llama32 smollm2 qwen3moe gptoss; do
    if [ -f "$tmp/$m.nostart" ]; then
        bad "server $m did not start"
        echo "--- server log ($m)"; tail -n 40 "$tmp/$m.log"
        continue
    fi
    mfail=0
    names="openai agents vercel"
    [ "$m" = qwen3moe ] && names=agents
    [ "$m" = gptoss ] && names="openai agents"
    for n in $names; do
        node_tally "tools_$n.mjs ($m)" "$tmp/$m.$n.out" "$(cat "$tmp/$m.$n.status" 2>/dev/null || echo 1)" || mfail=1
    done
    serve_stop "$m" || mfail=1
    if [ $mfail -ne 0 ]; then echo "--- server log ($m), last 40 lines"; tail -n 40 "$tmp/$m.log"; fi
done
finish
