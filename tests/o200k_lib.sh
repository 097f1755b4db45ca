# o200k_lib.sh — sourced by the script tests that need gpt-oss's vocabulary
# (gptoss_test.sh, tools_test.sh): o200k_vocab B exports o200k_harmony
# (tools/o200k_harmony.mjs, from js-tiktoken's ranks) into B/vocab once per
# build directory, atomically (the tests run in parallel), and prints
# nothing on success; on failure it prints the exporter's output and
# returns 1. Needs ROOT (the repository).
o200k_vocab() {
    _v="$1/vocab/o200k_harmony"
    if [ -s "$_v/tokenizer.json" ] && [ ! "$ROOT/tools/o200k_harmony.mjs" -nt "$_v/tokenizer.json" ]; then return 0; fi
    mkdir -p "$_v"
    _t="$1/vocab/.o200k.$$"
    if node "$ROOT/tools/o200k_harmony.mjs" "$_t" > "$_t.log" 2>&1; then
        mv "$_t/tokenizer_config.json" "$_v/tokenizer_config.json" && mv "$_t/tokenizer.json" "$_v/tokenizer.json"
        _r=$?
    else
        cat "$_t.log"
        _r=1
    fi
    rm -rf "$_t" "$_t.log"
    return $_r
}
