#!/bin/sh
# grammar_diff_test.sh — differential test of the JSON Schema compiler
# (src/grammar/schema.c) and the grammar matcher against an independent
# Python checker (tools/grammar/jsonschema_check.py).
#
#   1. tools/grammar/gen_schemas.py writes N random schemas (seeded);
#   2. $KVLOOM_BUILD/tests/test_schema_walk --walk compiles each one, walks
#      random tokens of the Qwen3 vocabulary through gmatch_mask (checking the
#      matcher's own consistency in C) and records the outputs it completed,
#      prefixes it accepted, tokens it refused, places it could not end, and
#      one-byte mutations of complete outputs with the matcher's verdict;
#   3. the Python checker must agree with every record: completed outputs are
#      canonical documents that json.loads and validate, accepted prefixes can
#      be completed, refused ones cannot.
#
# Env: KVLOOM_BUILD (default build), SCHEMA_DIFF_SEED (default 1),
# SCHEMA_DIFF_N (default 600; 150 in sanitizer builds, whose walks are ~5x
# slower). Last line: "N passed, N failed".
. "$(dirname "$0")/lib.sh"
cd "$ROOT" || { bad "cd $ROOT"; finish; }
. tests/schema_walk_lib.sh
walk_setup
SEED=${SCHEMA_DIFF_SEED:-1}
case "$B" in
*address* | *thread* | *undefined*) N=${SCHEMA_DIFF_N:-150} ;;
*) N=${SCHEMA_DIFF_N:-600} ;;
esac
"$PY" tools/grammar/gen_schemas.py "$SEED" "$N" > "$tmp/schemas.jsonl" || { bad "gen_schemas.py failed"; finish; }
walk_and_check --walk check "$tmp/schemas.jsonl" "$SEED" 4 '^schema [0-9]* not compiled' "C walk checks" "Python checker"
finish
