#!/bin/sh
# Installs the Debian packages kvloom needs, only those missing. Needs root
# (or sudo) only when something is missing.
set -e
PKGS="build-essential clang libmicrohttpd-dev libjansson-dev python3-numpy curl nodejs npm"
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
# The openai npm client for the server tests (from the npm registry), kept in
# tests/node_modules; installed only when package.json asks for it.
if [ -f tests/package.json ] && [ ! -d tests/node_modules/openai ]; then
    (cd tests && npm install --no-audit --no-fund --silent)
fi
