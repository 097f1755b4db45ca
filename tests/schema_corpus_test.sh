#!/bin/sh
# schema_corpus_test.sh — the schema corpus (tests/schemas/*.jsonl: zod 4's
# toJSONSchema for every public zod type and common combinations, the tool
# schemas published MCP servers announce, the OpenAI SDK's zod helpers on
# the OpenAI / Anthropic guide examples; origins in tests/schemas/README.md)
# replayed through the JSON Schema compiler and the matcher:
#
#   1. $KVLOOM_BUILD/tests/test_schema_walk --corpus compiles every schema
#      relaxed (none may be refused: never a 400 unless strict), checks that
#      the strict compile succeeds exactly when nothing was relaxed (else its
#      error names a pointer), and runs WALKS random Qwen3 token walks per
#      schema (the matcher's own consistency checked in C), writing each
#      completed output with the keywords that were relaxed;
#   2. tools/grammar/jsonschema_check.py corpus validates every output with
#      an independent validator of the full JSON Schema semantics (formats by
#      their RFCs, numbers exactly), skipping only the relaxed keywords.
#
# Env: KVLOOM_BUILD (default build), SCHEMA_CORPUS_SEED (1),
# SCHEMA_CORPUS_WALKS (walks per schema: 2, 1 in sanitizer builds; `make
# schema-corpus` runs 1000). Last line: "N passed, N failed".
. "$(dirname "$0")/lib.sh"
cd "$ROOT" || { bad "cd $ROOT"; finish; }
. tests/schema_walk_lib.sh
walk_setup
SEED=${SCHEMA_CORPUS_SEED:-1}
case "$B" in
*address* | *thread* | *undefined*) W=${SCHEMA_CORPUS_WALKS:-1} ;;
*) W=${SCHEMA_CORPUS_WALKS:-2} ;;
esac
cat tests/schemas/*.jsonl > "$tmp/schemas.jsonl"
walk_and_check --corpus corpus "$tmp/schemas.jsonl" "$SEED" "$W" '^relaxed corpus\|^no walk completed' "C corpus checks" "Python validator"
finish
