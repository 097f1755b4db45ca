#!/bin/sh
# Cross-checks the hand-written chat-template expectations
# (tests/fixtures/templates/cases.json + expected/, jinja_cases.json) against
# Jinja2 itself, configured the way Hugging Face transformers renders chat
# templates. Needs Debian's python3-jinja2; without it the check is skipped
# (the C tests test_chat/test_jinja still run the same cases against kvloom).
if ! /usr/bin/python3 -c "import jinja2" 2>/dev/null; then
    echo "chat_templates_test: skipped, python3-jinja2 is not installed"
    echo "0 passed, 0 failed"
    exit 0
fi
exec /usr/bin/python3 tests/fixtures/templates/check_expected.py
