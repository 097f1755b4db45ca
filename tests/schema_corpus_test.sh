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
cd "$(dirname "$0")/.." || { echo "0 passed, 1 failed"; exit 1; }
B=${KVLOOM_BUILD:-build}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
WALK="$B/tests/test_schema_walk"
if [ ! -x "$WALK" ]; then
    echo "schema_corpus_test: $WALK is not built"
    echo "0 passed, 1 failed"
    exit 1
fi
SEED=${SCHEMA_CORPUS_SEED:-1}
case "$B" in
*address* | *thread* | *undefined*) W=${SCHEMA_CORPUS_WALKS:-1} ;;
*) W=${SCHEMA_CORPUS_WALKS:-2} ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
cat tests/schemas/*.jsonl > "$tmp/schemas.jsonl"
pass=0
fail=0
"$WALK" --corpus "$tmp/schemas.jsonl" "$tmp/cases.jsonl" "$SEED" "$W" > "$tmp/walk.out" 2> "$tmp/walk.err"
st=$?
grep -v '^relaxed corpus\|^no walk completed' "$tmp/walk.err" | head -n 40
grep '^corpus:' "$tmp/walk.out"
line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/walk.out" | tail -n 1)
if [ -n "$line" ]; then
    pass=$((pass + $(echo "$line" | awk '{print $1}')))
    fail=$((fail + $(echo "$line" | awk '{print $3}')))
    echo "C corpus checks: $line"
else
    fail=$((fail + 1))
    echo "test_schema_walk --corpus crashed (exit $st)"
    tail -n 20 "$tmp/walk.err"
fi
if [ -s "$tmp/cases.jsonl" ]; then
    "$PY" tools/grammar/jsonschema_check.py corpus "$tmp/cases.jsonl" "$tmp/schemas.jsonl" > "$tmp/py.out" 2>&1
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$tmp/py.out" | tail -n 1)
    if [ -n "$line" ]; then
        grep -v 'passed,' "$tmp/py.out" | head -n 60
        pass=$((pass + $(echo "$line" | awk '{print $1}')))
        fail=$((fail + $(echo "$line" | awk '{print $3}')))
        echo "Python validator: $line"
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
