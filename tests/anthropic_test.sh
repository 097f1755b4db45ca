#!/bin/sh
# anthropic_test.sh — the Anthropic Messages API end to end through the
# official `@anthropic-ai/sdk` client from npm (tests/package.json), in
# tests/node/anthropic.mjs, against `kvloom serve --api-key` with a tiny
# RANDOM-weight Qwen3 (real vocabulary and chat template: hermes calls,
# <think> reasoning). With random weights only constrained decoding makes the
# calls valid; the script validates each one itself.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_BUILD (where the generated
# model is cached, shared with tools_test.sh), KVLOOM_SHARED (../shared).
# Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"
T=${ANTHROPIC_TEST_T:-150} # deadline of the node script in seconds

need_node @anthropic-ai/sdk
qwen3_tiny
KEY=sk-ant-kvloom-test
serve_start server -m "$QWEN" -t 1 --kv-mem 64M --api-key "$KEY"
port=$(serve_port server)
if [ -z "$port" ]; then
    bad "the server did not start"; tail -n 40 "$tmp/server.log"
    finish
fi

(cd "$ROOT/tests" && timeout -k 5 "$T" node node/anthropic.mjs "http://127.0.0.1:$port" "$KEY" $(( (T - 10) * 1000 ))) \
    > "$tmp/node.out" 2>&1
node_tally anthropic.mjs "$tmp/node.out" $?
serve_stop server
[ $fail -ne 0 ] && { echo "--- server log, last 40 lines"; tail -n 40 "$tmp/server.log"; }
finish
