#!/bin/sh
# tools/fuzz.sh — the fuzzing campaign (issue 14; docs/reliability.md
# "Fuzzing"): runs each libFuzzer target for a while, then merges the new
# inputs that add coverage into its committed corpus, which `make test`
# replays (fuzz/replay.c).
#
#   make fuzz                                   every target, 60 s each
#   make fuzz FUZZ_SECONDS=3600 FUZZ_TARGETS="oai jinja"
#   FUZZ_SECONDS=1800 nice -n 19 sh tools/fuzz.sh request chat_tools
#
# Targets are named without the fuzz_ prefix (fuzz/fuzz_<name>.c); with no
# names, every binary built in FUZZ_DIR runs. `make fuzz` builds them first
# (make fuzz-build); run by hand, build them yourself.
#
# Environment:
#   FUZZ_SECONDS   seconds of fuzzing per target (60)
#   FUZZ_DIR       where the binaries are and the runs go (build-fuzz)
#   FUZZ_TIMEOUT   wall-clock seconds one input may take before libFuzzer
#                  calls it a hang and stops (10). On a loaded machine at nice
#                  19 a process can wait minutes for a core: long runs there
#                  need a larger value (the campaign used 300), and every
#                  timeout-* artifact is re-run once here and its CPU time
#                  measured against an empty input's (the target's one-time
#                  setup, e.g. fuzz_tok loading nine vocabularies): less
#                  than 1 s more is reported as "starved", not as a finding
#   FUZZ_RSS_MB    memory limit of the fuzzer process in MB (2048)
#   FUZZ_MERGE     0 skips the merge into fuzz/corpus/ (1)
#
# Per target T, in FUZZ_DIR/T/: work/ (a fresh corpus each run: libFuzzer
# writes new inputs there and only reads fuzz/corpus/fuzz_T/), fuzz.log,
# merge.log, and the findings libFuzzer writes: crash-<sha1>, leak-<sha1>,
# timeout-<sha1>, oom-<sha1> (reproduce with FUZZ_DIR/fuzz_T FILE, or
# build/fuzz/fuzz_T_replay FILE without libFuzzer).
#
# The merge (libFuzzer -merge=1 -use_counters=0 CORPUS WORK) copies into the
# corpus only the work inputs that reach code (edges, compare operands) the
# corpus does not: without -use_counters=0 every new hit-count bucket of an
# edge counts too, which floods the corpus (docs/decisions.md, 2026-11-26).
# The committed inputs are never removed (hand-written seeds, reproducers);
# -max_len caps an input's size per target.
#
# Output: one line per target — seconds fuzzed (wall clock and CPU),
# executions and exec/s
# (libFuzzer's -print_final_stats), final cov (edges) and ft (features),
# inputs found in work/, corpus files before and after the merge, the
# slowest input, and the findings (artifact paths). The same fields are
# appended, tab-separated, to FUZZ_DIR/summary.tsv for docs/reliability.md.
# Exits 1 after all targets ran when any of them found something or did
# not run.
set -u
SECONDS_EACH=${FUZZ_SECONDS:-60}
[ -n "$SECONDS_EACH" ] || SECONDS_EACH=60
DIR=${FUZZ_DIR:-build-fuzz}
TIMEOUT=${FUZZ_TIMEOUT:-10}
RSS=${FUZZ_RSS_MB:-2048}
MERGE=${FUZZ_MERGE:-1}

targets="$*"
if [ -z "$targets" ]; then
    for b in "$DIR"/fuzz_*; do
        case "$b" in *.d) continue ;; esac
        [ -x "$b" ] && targets="$targets $(basename "$b" | sed 's/^fuzz_//')"
    done
fi
[ -n "$targets" ] || { echo "fuzz.sh: no fuzz targets in $DIR (make fuzz-build)" >&2; exit 1; }

# The largest input libFuzzer makes, per target (the corpora's real inputs
# fit: GGUF headers, chat templates, request bodies, schemas).
max_len() {
    case "$1" in
    gbnf|radix|tok) echo 4096 ;;
    toolcall) echo 8192 ;;
    schema) echo 32768 ;;
    *) echo 16384 ;;
    esac
}
dict() {
    case "$1" in
    oai|request|chat_tools|schema|toolcall) echo fuzz/dict/json.dict ;;
    jinja) echo fuzz/dict/jinja.dict ;;
    gbnf) echo fuzz/dict/gbnf.dict ;;
    esac
}
# User + system CPU seconds of one run of the target over one input (empty
# when /usr/bin/time is missing).
cpu_seconds() {
    [ -x /usr/bin/time ] || return 0
    /usr/bin/time -f '%U %S' -o "$2.cpu" "$1" -runs=1 "$2" > /dev/null 2>&1
    awk '{ print $1 + $2 }' "$2.cpu" 2>/dev/null
    rm -f "$2.cpu"
}
stat_of() { grep "^stat::$1:" "$2" | tail -n 1 | awk '{print $2}'; }

status=0
for t in $targets; do
    bin=$DIR/fuzz_$t
    corpus=fuzz/corpus/fuzz_$t
    out=$DIR/$t
    if [ ! -x "$bin" ]; then
        echo "fuzz $t: no binary $bin (make fuzz-build)"; status=1; continue
    fi
    mkdir -p "$corpus" "$out"
    rm -rf "$out/work"; mkdir -p "$out/work"
    stamp=$out/.start; : > "$stamp"
    d=$(dict "$t"); dflag=; [ -n "$d" ] && [ -f "$d" ] && dflag=-dict=$d
    before=$(ls "$corpus" | wc -l)
    t0=$(date +%s)
    timer=; [ -x /usr/bin/time ] && timer="/usr/bin/time -f %U+%S -o $out/cpu"
    $timer "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -max_len="$(max_len "$t")" \
        -timeout="$TIMEOUT" -rss_limit_mb="$RSS" -artifact_prefix="$out/" $dflag \
        "$out/work" "$corpus" > "$out/fuzz.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    # CPU seconds the fuzzer got (at nice 19 on a busy machine, far fewer
    # than the wall-clock ones)
    cpu=$(tail -n 1 "$out/cpu" 2>/dev/null | awk -F+ 'NF == 2 { printf "%d", $1 + $2 }')
    execs=$(stat_of number_of_executed_units "$out/fuzz.log")
    eps=$(stat_of average_exec_per_sec "$out/fuzz.log")
    slow=$(stat_of slowest_unit_time_sec "$out/fuzz.log")
    covline=$(grep -E ' cov: [0-9]+ ft: [0-9]+' "$out/fuzz.log" | tail -n 1)
    cov=$(echo "$covline" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$covline" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    found=$(ls "$out/work" | wc -l)
    if [ "$MERGE" = 1 ] && [ "$found" -gt 0 ]; then
        "$bin" -merge=1 -use_counters=0 -max_len="$(max_len "$t")" -timeout="$TIMEOUT" -rss_limit_mb="$RSS" \
            -artifact_prefix="$out/" "$corpus" "$out/work" > "$out/merge.log" 2>&1 ||
            echo "fuzz $t: the merge failed (see $out/merge.log)"
    fi
    after=$(ls "$corpus" | wc -l)
    arts=; base=; starved=0
    for a in $(find "$out" -maxdepth 1 -newer "$stamp" \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
        -o -name 'oom-*' \) | sort); do
        case "$a" in
        */timeout-*)
            : > "$out/.empty"
            [ -n "${base:-}" ] || base=$(cpu_seconds "$bin" "$out/.empty")
            tcpu=$(cpu_seconds "$bin" "$a")
            if [ -n "$tcpu" ] && [ -n "$base" ] && awk "BEGIN { exit !($tcpu - $base < 1) }"; then
                echo "fuzz $t: $a: ${tcpu} s of CPU when re-run (an empty input: ${base} s): the process was" \
                    "starved, not hung"
                mv "$a" "$out/starved-${a##*/timeout-}"
                starved=$((starved + 1))
                continue
            fi ;;
        esac
        arts="$arts$a "
    done
    findings=${arts:-none}
    # libFuzzer exits 70 on a timeout: a starved one ended the run early
    [ -z "$arts" ] && [ "$rc" -eq 70 ] && [ "$starved" -gt 0 ] && rc=0 && findings="none (stopped early by a starved timeout)"
    if [ -n "$arts" ] || [ "$rc" -ne 0 ]; then
        status=1
        [ -z "$arts" ] && findings="exit $rc (see $out/fuzz.log)"
    fi
    echo "fuzz $t: ${secs} s (${cpu:-?} s of CPU), ${execs:-?} execs (${eps:-?}/s), cov ${cov:-?} ft ${ft:-?}, $found new inputs," \
        "corpus $before -> $after, slowest ${slow:-?} s, findings: $findings"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%d)" "$t" "$secs" "${execs:-?}" "${eps:-?}" \
        "${cov:-?}" "${ft:-?}" "$before" "$after" "$findings" "${cpu:-?}" >> "$DIR/summary.tsv"
done
exit $status
