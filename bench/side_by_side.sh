#!/bin/sh
# side_by_side.sh — prefill and decode of `kvloom bench` next to llama.cpp on
# the same GGUF files and thread count, interleaved run by run so that both
# engines see the same machine, printed as one markdown table with ratios.
#
#   bench/side_by_side.sh MODEL.gguf...
#   env: KVLOOM_BIN (build/kvloom), LLAMA_BENCH (path of a llama-bench built
#        outside the repository; unset: kvloom only), LLAMA_BATCHED (path of
#        llama-batched-bench: used for decode at depth when set, for
#        llama.cpp builds whose llama-bench has no -d), THREADS (2), PP (512),
#        TG (64), DEPTH (2048; 0 = no depth run), ROUNDS (3)
#
# Why interleaved: this machine's memory bandwidth drifts by 30-50% from one
# minute to the next (other tenants), and decode follows it. Running one
# engine's repetitions and then the other's turns that drift into the
# ratio. Here each round runs, per model: llama-bench once ("-p PP -n TG
# -r 1"), its decode at depth once ("-p 0 -n TG -d DEPTH -r 1", or
# llama-batched-bench "-npp DEPTH -ntg TG -npl 1"), then `kvloom bench
# --pp PP --tg TG --depth DEPTH -r 1`; ROUNDS rounds in all. Each cell is
# the median over the rounds; "ratio" is kvloom's median over llama.cpp's,
# and [lo..hi] the smallest and largest of the per-round ratios (the two
# runs of a round are seconds apart). The load average before each model's
# first round is printed.
set -eu
[ $# -ge 1 ] || { echo "usage: bench/side_by_side.sh MODEL.gguf..." >&2; exit 2; }
BIN=${KVLOOM_BIN:-build/kvloom}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-64}
DEPTH=${DEPTH:-2048}
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

i=0
for m in "$@"; do
    i=$((i + 1))
    cut -d' ' -f1 /proc/loadavg > "$OUT/$i.load"
    echo "$m" > "$OUT/$i.name"
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        r=$((r + 1))
        if [ -n "${LLAMA_BENCH:-}" ]; then
            "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p "$PP" -n "$TG" -r 1 -o jsonl > "$OUT/$i.$r.l0" 2>/dev/null || true
            if [ "$DEPTH" -gt 0 ] && [ -n "${LLAMA_BATCHED:-}" ]; then
                "$LLAMA_BATCHED" -m "$m" -t "$THREADS" -c $((DEPTH + TG + 16)) -npp "$DEPTH" -ntg "$TG" -npl 1 \
                    --output-format jsonl > "$OUT/$i.$r.l1" 2>/dev/null || true
            elif [ "$DEPTH" -gt 0 ]; then
                "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p 0 -n "$TG" -d "$DEPTH" -r 1 -o jsonl > "$OUT/$i.$r.l1" 2>/dev/null || true
            fi
        fi
        "$BIN" bench -m "$m" -t "$THREADS" --pp "$PP" --tg "$TG" --depth "$DEPTH" -r 1 > "$OUT/$i.$r.k" 2>&1 || true
        echo "[$i/$#] $(basename "$m") round $r/$ROUNDS done" >&2
    done
done

"$PY" - "$OUT" "$i" "$ROUNDS" "$PP" "$TG" "$DEPTH" <<'EOF'
import json, os, re, statistics, sys
out, n, rounds, pp, tg, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])

def jsonl(path):
    rows = []
    if os.path.exists(path):
        for line in open(path):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows

def llama(path, n_prompt, n_gen, n_depth):
    """t/s of the llama-bench row (n_prompt, n_gen, n_depth), or of a
    llama-batched-bench row (speed_tg) for decode at depth."""
    for d in jsonl(path):
        if "speed_tg" in d and n_prompt == 0 and d.get("pp") == n_depth:
            return d["speed_tg"]
        if (d.get("n_prompt", 0), d.get("n_gen", 0), d.get("n_depth", 0)) == (n_prompt, n_gen, n_depth):
            return d["avg_ts"]
    return None

def kvloom(path):
    """{"pp512": t/s, "tg64": t/s, "tg64 @ depth 2048": t/s} from kvloom bench."""
    r = {}
    if os.path.exists(path):
        for line in open(path):
            m = re.match(r"^(pp\d+|tg\d+(?: @ depth \d+)?)\s+([\d.]+) t/s", line)
            if m:
                r[m.group(1)] = float(m.group(2))
    return r

def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None

def cell(v):
    return "-" if v is None else f"{v:.1f}"

def ratio(ks, ls):
    a, b = med(ks), med(ls)
    if a is None or b is None or b == 0:
        return "-"
    per = [k / l for k, l in zip(ks, ls) if k is not None and l]
    return f"**{a / b:.2f}x** [{min(per):.2f}..{max(per):.2f}]"

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
    rs = range(1, rounds + 1)
    lpp = [llama(f"{out}/{i}.{r}.l0", pp, 0, 0) for r in rs]
    ltg = [llama(f"{out}/{i}.{r}.l0", 0, tg, 0) for r in rs]
    ks = [kvloom(f"{out}/{i}.{r}.k") for r in rs]
    kpp = [k.get(f"pp{pp}") for k in ks]
    ktg = [k.get(f"tg{tg}") for k in ks]
    row = (f"| {name} | {load} | {cell(med(lpp))} | {cell(med(kpp))} | {ratio(kpp, lpp)} | {cell(med(ltg))} |"
           f" {cell(med(ktg))} | {ratio(ktg, ltg)} |")
    if depth > 0:
        ld = [llama(f"{out}/{i}.{r}.l1", 0, tg, depth) for r in rs]
        kd = [k.get(f"tg{tg} @ depth {depth}") for k in ks]
        row += f" {cell(med(ld))} | {cell(med(kd))} | {ratio(kd, ld)} |"
    print(row)
EOF
