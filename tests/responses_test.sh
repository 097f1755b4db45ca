#!/bin/sh
# responses_test.sh — the OpenAI Responses API end to end through real
# clients from npm (tests/package.json): the `openai` package's
# client.responses and the OpenAI Agents SDK on its default (Responses)
# model, in tests/node/responses.mjs, against `kvloom serve` with a tiny
# RANDOM-weight Qwen3 (real vocabulary and chat template: hermes calls,
# <think> reasoning). With random weights only constrained decoding makes the
# calls and structured outputs valid; the script validates each one itself.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_BUILD (where the generated
# model is cached, shared with tools_test.sh), KVLOOM_SHARED (../shared).
# Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"
T=${RESPONSES_TEST_T:-150} # deadline of the node script in seconds

need_node openai @openai/agents zod
qwen3_tiny
serve_start server -m "$QWEN" -t 1 --kv-mem 64M
port=$(serve_port server)
if [ -z "$port" ]; then
    bad "the server did not start"; tail -n 40 "$tmp/server.log"
    finish
fi

(cd "$ROOT/tests" && timeout -k 5 "$T" node node/responses.mjs "http://127.0.0.1:$port/v1" $(( (T - 10) * 1000 ))) \
    > "$tmp/node.out" 2>&1
node_tally responses.mjs "$tmp/node.out" $?
serve_stop server
[ $fail -ne 0 ] && { echo "--- server log, last 40 lines"; tail -n 40 "$tmp/server.log"; }
finish
