#!/bin/sh
# memory_budget_test.sh — the server's peak resident set stays within the
# memory budget it reports itself (issue 26: "one accounting that /metrics
# exposes", docs/server.md "Memory budget"). kvloom serve on stories260K
# with small transient bounds (--max-connections 8, --max-body-total 32K,
# so that the budget is mostly the parts it names), under a small mixed
# load at once: streamed completions, constrained (JSON schema) chats,
# /tokenize with pieces, an oversized body (413). Then:
#  - VmHWM (/proc/PID/status: the peak since start) <= the
#    kvloom_memory_budget_bytes it reports afterwards;
#  - the resident set now <= kvloom_memory_accounted_bytes + 1 MiB (every
#    resident byte is in a part, but for page granularity and the
#    allocator's own bookkeeping);
#  - every part the budget sums is reported, and the new ones are > 0.
# The margin is printed: it is smaller than the program, stacks or scratch
# parts, so a budget that leaves one out fails the first check.
# Env: KVLOOM_BIN, KVLOOM_SHARED. Ends with "N passed, N failed".
. "$(dirname "$0")/lib.sh"
command -v curl > /dev/null 2>&1 || { bad "curl is missing"; finish; }
[ -r /proc/self/status ] || { echo "memory_budget_test: no /proc: skipped"; finish; }

serve_start mem -m "$SHARED/models/stories260K.gguf" -t 1 --kv-mem 4M --max-connections 8 --max-body 16K \
    --max-body-total 32K
P=$(serve_port mem)
[ -n "$P" ] || { bad "the server did not start"; cat "$tmp/mem.log"; finish; }
U=http://127.0.0.1:$P
SPID=$(cat "$tmp/mem.pid")

# the load: all at once
jobs_=""
for i in 1 2; do
    curl -s -N "$U/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":48,"stream":true}' > "$tmp/s$i" &
    jobs_="$jobs_ $!"
done
curl -s "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"a cat"}],"max_tokens":24,
    "response_format":{"type":"json_schema","json_schema":{"name":"c","schema":{"type":"object",
    "properties":{"name":{"type":"string","pattern":"^[a-z]{1,12}$"},"age":{"type":"integer"}},
    "required":["name","age"]}}}}' > "$tmp/g1" &
jobs_="$jobs_ $!"
awk 'BEGIN { printf "{\"content\":\""; for (i = 0; i < 500; i++) printf "the little dog ran home. "; printf "\",\"with_pieces\":true}" }' > "$tmp/tok.json"
curl -s "$U/tokenize" -d @"$tmp/tok.json" > "$tmp/t1" &
jobs_="$jobs_ $!"
awk 'BEGIN { printf "{\"prompt\":\""; for (i = 0; i < 2000; i++) printf "xxxxxxxxxx"; printf "\"}" }' > "$tmp/big.json"
curl -s -o /dev/null "$U/v1/completions" -d @"$tmp/big.json" & # 413 (or reset while sending)
jobs_="$jobs_ $!"
for j in $jobs_; do wait "$j"; done
check "grep -q '\[DONE\]' '$tmp/s1' && grep -q '\[DONE\]' '$tmp/s2'" "the streams did not finish"
check "grep -q '\"choices\"' '$tmp/g1'" "the constrained chat failed: $(head -c 300 "$tmp/g1")"
check "grep -q '\"tokens\"' '$tmp/t1'" "/tokenize failed: $(head -c 300 "$tmp/t1")"

curl -s "$U/metrics" > "$tmp/metrics"
hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$SPID/status")
rss=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$SPID/status")
m() { sed -n "s/^$1 \([0-9.e+]*\)$/\1/p" "$tmp/metrics"; }
budget=$(m kvloom_memory_budget_bytes)
accounted=$(m kvloom_memory_accounted_bytes)
check "[ -n '$budget' ] && [ -n '$accounted' ] && [ -n '$hwm' ]" "no budget, accounted or VmHWM"
grep -E '^kvloom_(process_)?memory_bytes|^kvloom_memory_(budget|accounted)_bytes|^kvloom_process_threads' "$tmp/metrics"
awk -v h="$hwm" -v b="$budget" -v r="$rss" -v a="$accounted" 'BEGIN {
    printf "peak RSS %.1f MiB, budget %.1f MiB (margin %.1f MiB); RSS %.1f MiB, accounted %.1f MiB\n",
        h / 1024, b / 1048576, (b - h * 1024) / 1048576, r / 1024, a / 1048576 }'
check "awk -v h='$hwm' -v b='$budget' 'BEGIN { exit !(h * 1024 <= b) }'" \
    "peak RSS $hwm kB is over the budget the server reports ($budget bytes)"
check "awk -v r='$rss' -v a='$accounted' 'BEGIN { exit !(r * 1024 <= a + 1048576) }'" \
    "RSS $rss kB is more than the accounted memory ($accounted bytes) + 1 MiB: a part is missing"
for part in weights kv_pool requests grammar_caches grammar_idle kv_disk scratch tables; do
    check "grep -q '^kvloom_memory_bytes{part=\"$part\"} ' '$tmp/metrics'" "no kvloom_memory_bytes part $part"
done
for part in program stacks kernel_buffers heap_free heap_other; do
    check "grep -q '^kvloom_process_memory_bytes{part=\"$part\"} ' '$tmp/metrics'" "no process part $part"
done
for part in 'memory_bytes{part="scratch"}' 'memory_bytes{part="tables"}' 'process_memory_bytes{part="program"}' \
    'process_memory_bytes{part="stacks"}'; do
    check "grep -qE '^kvloom_$part [1-9]' '$tmp/metrics'" "kvloom_$part is 0"
done
serve_stop mem
finish
