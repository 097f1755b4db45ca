#!/bin/sh
# Cross-checks the hand-written chat-template expectations
# (tests/fixtures/templates/cases.json + expected/, jinja_cases.json) against
# Jinja2 itself, configured the way Hugging Face transformers renders chat
# templates. Needs Debian's python3-jinja2, which tools/setup.sh installs: a
# missing one is a failure, not a skip.
. "$(dirname "$0")/lib.sh"
cd "$ROOT" || { bad "cd $ROOT"; finish; }
/usr/bin/python3 -c "import jinja2" 2>/dev/null || { bad "python3-jinja2 is not installed (tools/setup.sh installs it)"; finish; }
/usr/bin/python3 tests/fixtures/templates/check_expected.py
