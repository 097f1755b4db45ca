#!/bin/sh
# ref_selftest_test.sh — runs the numpy reference's own self-test
# (tools/ref/selftest.py): dequantisers against hand-built blocks, the GGUF
# parser on valid and malformed files, the forward pass against a naive
# second implementation, and stories260K greedy output against
# ../shared/models/expected_greedy.json. Its last line is "N passed, N failed".
# Env: KVLOOM_SHARED (default ../shared). Uses Debian's /usr/bin/python3,
# which has numpy.
cd "$(dirname "$0")/.." || { echo "0 passed, 1 failed"; exit 1; }
PY=/usr/bin/python3
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "ref_selftest: $PY has no numpy (apt-get install python3-numpy)"
    echo "0 passed, 1 failed"
    exit 1
fi
export KVLOOM_SHARED="${KVLOOM_SHARED:-$(cd .. && pwd)/shared}"
exec "$PY" tools/ref/selftest.py
