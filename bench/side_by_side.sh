#!/bin/sh
# side_by_side.sh — prefill and decode of `kvloom bench` next to llama.cpp's
# llama-bench on the same GGUF files and thread count, run back to back per
# model (llama-bench, then kvloom, then the next model) so that both see the
# same machine, and printed as one markdown table with the ratios.
#
#   bench/side_by_side.sh MODEL.gguf...
#   env: KVLOOM_BIN (build/kvloom), LLAMA_BENCH (path of a llama-bench built
#        outside the repository; unset: kvloom only), THREADS (2), PP (512),
#        TG (64), DEPTH (2048; 0 = no depth run), REPS (3)
#
# llama-bench runs "-p PP -n TG" and "-p 0 -n TG -d DEPTH"; kvloom bench runs
# "--pp PP --tg TG --depth DEPTH". llama.cpp reports mean +- sd, kvloom the
# median; both over REPS runs. The load average before each model is
# printed: on a shared machine, compare only rows taken at a low load.
set -eu
[ $# -ge 1 ] || { echo "usage: bench/side_by_side.sh MODEL.gguf..." >&2; exit 2; }
BIN=${KVLOOM_BIN:-build/kvloom}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-64}
DEPTH=${DEPTH:-2048}
REPS=${REPS:-3}
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

i=0
for m in "$@"; do
    i=$((i + 1))
    cut -d' ' -f1 /proc/loadavg > "$OUT/$i.load"
    if [ -n "${LLAMA_BENCH:-}" ]; then
        "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p "$PP" -n "$TG" -r "$REPS" -o jsonl > "$OUT/$i.l0" 2>/dev/null || true
        if [ "$DEPTH" -gt 0 ]; then
            "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p 0 -n "$TG" -d "$DEPTH" -r "$REPS" -o jsonl > "$OUT/$i.l1" 2>/dev/null || true
        fi
    fi
    "$BIN" bench -m "$m" -t "$THREADS" --pp "$PP" --tg "$TG" --depth "$DEPTH" -r "$REPS" > "$OUT/$i.k" 2>&1 || true
    echo "$m" > "$OUT/$i.name"
    echo "[$i/$#] $(basename "$m") done" >&2
done

"$PY" - "$OUT" "$i" "$PP" "$TG" "$DEPTH" <<'EOF'
import json, os, re, sys
out, n, pp, tg, depth = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])

def llama(path):
    """{(n_prompt, n_gen, n_depth): (avg, sd)} from llama-bench jsonl."""
    r = {}
    if not os.path.exists(path):
        return r
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        r[(d.get("n_prompt", 0), d.get("n_gen", 0), d.get("n_depth", 0))] = (d["avg_ts"], d.get("stddev_ts", 0.0))
    return r

def kvloom(path):
    """{"pp512": t/s, "tg64": t/s, "tg64 @ depth 2048": t/s} from kvloom bench."""
    r = {}
    for line in open(path):
        m = re.match(r"^(pp\d+|tg\d+(?: @ depth \d+)?)\s+([\d.]+) t/s", line)
        if m:
            r[m.group(1)] = float(m.group(2))
    return r

def cell(v):
    return "-" if v is None else f"{v:.1f}"

def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"**{a / b:.2f}x**"

hdr = f"| model | load | llama pp{pp} | kvloom pp{pp} | ratio | llama tg{tg} | kvloom tg{tg} | ratio |"
sep = "|---|---:|---:|---:|---:|---:|---:|---:|"
if depth > 0:
    hdr += f" llama tg{tg} @{depth} | kvloom tg{tg} @{depth} | ratio |"
    sep += "---:|---:|---:|"
print(hdr)
print(sep)
for i in range(1, n + 1):
    name = os.path.basename(open(f"{out}/{i}.name").read().strip())
    load = open(f"{out}/{i}.load").read().strip()
    l0, l1, k = llama(f"{out}/{i}.l0"), llama(f"{out}/{i}.l1"), kvloom(f"{out}/{i}.k")
    lpp = l0.get((int(pp), 0, 0), (None,))[0]
    ltg = l0.get((0, int(tg), 0), (None,))[0]
    kpp, ktg = k.get(f"pp{pp}"), k.get(f"tg{tg}")
    row = f"| {name} | {load} | {cell(lpp)} | {cell(kpp)} | {ratio(kpp, lpp)} | {cell(ltg)} | {cell(ktg)} | {ratio(ktg, ltg)} |"
    if depth > 0:
        ld = l1.get((0, int(tg), depth), (None,))[0]
        kd = k.get(f"tg{tg} @ depth {depth}")
        row += f" {cell(ld)} | {cell(kd)} | {ratio(kd, ld)} |"
    print(row)
EOF
