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
cd "$(dirname "$0")/.." || { echo "0 passed, 1 failed"; exit 1; }
B=${KVLOOM_BUILD:-build}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
WALK="$B/tests/test_schema_walk"
if [ ! -x "$WALK" ]; then
    echo "grammar_diff_test: $WALK is not built"
    echo "0 passed, 1 failed"
    exit 1
fi
SEED=${SCHEMA_DIFF_SEED:-1}
case "$B" in
*address* | *thread* | *undefined*) N=${SCHEMA_DIFF_N:-150} ;;
*) N=${SCHEMA_DIFF_N:-600} ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

pass=0
fail=0
if ! "$PY" tools/grammar/gen_schemas.py "$SEED" "$N" > "$tmp/schemas.jsonl"; then
    echo "grammar_diff_test: gen_schemas.py failed"
    echo "0 passed, 1 failed"
    exit 1
fi
"$WALK" --walk "$tmp/schemas.jsonl" "$tmp/cases.jsonl" "$SEED" 4 > "$tmp/walk.out" 2> "$tmp/walk.err"
st=$?
grep -v '^schema [0-9]* not compiled' "$tmp/walk.err" | head -n 40
grep '^walk:' "$tmp/walk.out"
line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/walk.out" | tail -n 1)
if [ -n "$line" ]; then
    pass=$((pass + $(echo "$line" | awk '{print $1}')))
    fail=$((fail + $(echo "$line" | awk '{print $3}')))
    echo "C walk checks: $line"
else
    fail=$((fail + 1))
    echo "test_schema_walk --walk crashed (exit $st)"
    tail -n 20 "$tmp/walk.err"
fi
if [ -s "$tmp/cases.jsonl" ]; then
    "$PY" tools/grammar/jsonschema_check.py check "$tmp/cases.jsonl" "$tmp/schemas.jsonl" > "$tmp/py.out" 2>&1
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/py.out" | tail -n 1)
    if [ -n "$line" ]; then
        grep -v 'passed,' "$tmp/py.out" | head -n 60
        pass=$((pass + $(echo "$line" | awk '{print $1}')))
        fail=$((fail + $(echo "$line" | awk '{print $3}')))
        echo "Python checker: $line"
    else
        fail=$((fail + 1))
        echo "jsonschema_check.py crashed:"
        tail -n 20 "$tmp/py.out"
    fi
else
    fail=$((fail + 1))
    echo "no cases were written"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
