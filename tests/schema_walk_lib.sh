# schema_walk_lib.sh — the part shared by schema_corpus_test.sh and
# grammar_diff_test.sh (sourced, not a test itself): run
# test_schema_walk over a file of schemas, then have the independent Python
# checker (tools/grammar/jsonschema_check.py) judge every record it wrote,
# adding both "N passed, N failed" counts to $pass and $fail.
#
#   walk_and_check WALK_MODE CHECK_MODE SCHEMAS SEED WALKS SKIP_RE C_LABEL PY_LABEL
#
# WALK_MODE: --walk or --corpus; CHECK_MODE: the checker's command (check,
# corpus); SKIP_RE: stderr lines of the walker not worth showing; the labels
# name the two counts in the output. Needs tests/lib.sh (sourced first:
# $B, $tmp, the counters) and walk_setup's $WALK, $PY.

# walk_setup: $PY and $WALK (the test ends, failed, when the walker is not
# built).
walk_setup() {
    PY=/usr/bin/python3
    [ -x "$PY" ] || PY=python3
    WALK="$B/tests/test_schema_walk"
    [ -x "$WALK" ] || { bad "$WALK is not built"; finish; }
}

# add_counts FILE LABEL: adds FILE's last "N passed, N failed" to $pass and
# $fail and prints it after LABEL; false when there is none (a crash).
add_counts() {
    line=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    [ -n "$line" ] || return 1
    pass=$((pass + $(echo "$line" | awk '{print $1}')))
    fail=$((fail + $(echo "$line" | awk '{print $3}')))
    echo "$2: $line"
}

walk_and_check() {
    "$WALK" "$1" "$3" "$tmp/cases.jsonl" "$4" "$5" > "$tmp/walk.out" 2> "$tmp/walk.err"
    st=$?
    grep -v "$6" "$tmp/walk.err" | head -n 40
    grep "^${1#--}:" "$tmp/walk.out"
    if ! add_counts "$tmp/walk.out" "$7"; then
        bad "test_schema_walk $1 crashed (exit $st)"
        tail -n 20 "$tmp/walk.err"
    fi
    if [ -s "$tmp/cases.jsonl" ]; then
        "$PY" tools/grammar/jsonschema_check.py "$2" "$tmp/cases.jsonl" "$3" > "$tmp/py.out" 2>&1
        grep -v 'passed,' "$tmp/py.out" | head -n 60
        if ! add_counts "$tmp/py.out" "$8"; then
            bad "jsonschema_check.py crashed:"
            tail -n 20 "$tmp/py.out"
        fi
    else
        bad "no cases were written"
    fi
}
