#!/bin/sh
# flags_doc_test.sh — docs/server.md's "## Flags" lists exactly the flags
# `kvloom serve --help` prints (its rows' spellings and the llama-server
# spellings of its last lines), both ways: no flag undocumented, no
# documented flag that serve does not take; the free-text spellings of the
# help's last lines are ones the parser takes (an unknown one is refused by
# name).
# Env: KVLOOM_BIN (the kvloom binary).
. "$(dirname "$0")/lib.sh"
DOC=${KVLOOM_DOC:-$ROOT/docs/server.md}
flags() { grep -oE '(^|[^A-Za-z0-9-])--?[a-z][a-z0-9-]*' | sed -E 's/^[^-]+//' | sort -u; }
# the help: each row's flag column (up to column 27), and the last lines
"$BIN" serve --help > "$tmp/help" || bad "serve --help exits non-zero"
{ grep -E '^  -' "$tmp/help" | cut -c1-27; sed -n '/^llama-server spellings/,$p' "$tmp/help"; } | flags > "$tmp/h"
# the docs: the first column of the Flags table, and its llama-server paragraph
sed -n '/^## Flags/,/^## /p' "$DOC" > "$tmp/sec"
{ grep -E '^\| `' "$tmp/sec" | cut -d'|' -f2; sed -n '/^\*\*llama-server/,/^$/p' "$tmp/sec"; } | flags > "$tmp/d"
[ "$(wc -l < "$tmp/h")" -ge 60 ] || bad "only $(wc -l < "$tmp/h") flags read from serve --help"
undocumented=$(comm -23 "$tmp/h" "$tmp/d" | tr '\n' ' ')
unknown=$(comm -13 "$tmp/h" "$tmp/d" | tr '\n' ' ')
if [ -z "$undocumented" ]; then ok; else bad "in serve --help, not in $DOC's Flags: $undocumented"; fi
if [ -z "$unknown" ]; then ok; else bad "in $DOC's Flags, not in serve --help: $unknown"; fi
# the rows are the parser's own table; the spellings of the last lines are
# free text: each must be one the parser knows (two unknown flags after it:
# whether it takes a value or not, serve stops at one of them before it
# starts), and an unknown flag is refused by name
sed -n '/^llama-server spellings/,$p' "$tmp/help" | flags > "$tmp/tail"
for f in $(cat "$tmp/tail") --no-such-flag; do
    "$BIN" serve "$f" --no-such-flag --no-such-flag2 > /dev/null 2> "$tmp/err" && bad "serve $f ... started"
    if grep -q "unknown option '$f'" "$tmp/err"; then
        [ "$f" = --no-such-flag ] && ok || bad "serve refuses $f as unknown: $(cat "$tmp/err")"
    else
        [ "$f" = --no-such-flag ] && bad "an unknown flag is not refused by name" || ok
    fi
done
finish
