#!/bin/sh
# Installs the Debian packages kvloom needs, only those missing. Needs root
# (or sudo) only when something is missing.
set -e
# chromium: the web chat page test drives it headless (tests/webui_test.sh).
# python3-jinja2: tests/chat_templates_test.sh cross-checks our chat template
# renderer against it. clang-format: `make fmt` (.clang-format).
# libclang-rt-14-dev: libFuzzer and the sanitizer runtimes of Debian 12's clang
# (only recommended by clang, so absent where recommends are not installed):
# make fuzz and make test's fuzzing phase link with it.
# haproxy: deploy/ runs replicas behind it (docs/scale-out.md, tests/deploy_test.sh).
PKGS="build-essential clang libclang-rt-14-dev clang-format libmicrohttpd-dev libjansson-dev python3-numpy python3-jinja2 curl nodejs npm chromium haproxy"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# nodejs/npm may come from elsewhere on this machine: accept working binaries.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    missing=$(echo "$missing" | sed -e 's/ nodejs//' -e 's/ npm//')
fi
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
# The npm packages of the server tests (tests/package.json: the openai client,
# @openai/agents, ai, @ai-sdk/openai-compatible, zod; from the npm registry),
# kept in tests/node_modules. Installed exactly as tests/package-lock.json
# pins them (npm ci) whenever package.json or the lock changed since the last
# install (a stamp of both in tests/node_modules), or a dependency is missing.
if [ -f tests/package.json ]; then
    stamp=$(cat tests/package.json tests/package-lock.json 2>/dev/null | sha256sum | cut -c1-64)
    have=$(cat tests/node_modules/.kvloom-stamp 2>/dev/null || true)
    missing_dep=$(cd tests && node -e '
        const fs = require("fs");
        for (const d of Object.keys(require("./package.json").dependencies || {}))
            if (!fs.existsSync("node_modules/" + d + "/package.json")) console.log(d);' 2>/dev/null || echo "?")
    if [ "$stamp" != "$have" ] || [ -n "$missing_dep" ]; then
        echo "setup: npm packages for tests/ (${missing_dep:-package.json or lock changed})" | tr '\n' ' '; echo
        if [ -f tests/package-lock.json ]; then
            (cd tests && npm ci --no-audit --no-fund --silent)
        else
            (cd tests && npm install --no-audit --no-fund --silent)
        fi
        echo "$stamp" > tests/node_modules/.kvloom-stamp
    fi
fi
