#!/bin/sh
# kvq8_test.sh — the q8_0 KV cache (--kv-type q8_0) through the server on
# stories260K: the start-up line's bytes per token (q8_0 against f16: the
# saving; both texts printed: q8_0 may pick another token after a while —
# test_attn bounds the error and checks 40 greedy tokens), the prefix cache in RAM (a repeated prompt: its full blocks cached), n 2
# forks sharing the prompt's blocks, and the disk tier: a restarted q8_0
# server restores the prompt's blocks from --kv-disk with the same output,
# and an f16 server on the same directory counts those files as foreign
# (never reads q8_0 bytes as f16). Env: KVLOOM_BIN, KVLOOM_SHARED.
. "$(dirname "$0")/lib.sh"
P=$(python3 -c "print(' '.join(['Once upon a time there was a little dog named Max who liked to run.'] * 12))")
BODY="{\"prompt\":\"$P\",\"max_tokens\":16,\"temperature\":0}"
start() { # kv type, name (its log $tmp/NAME.log)
    serve_up "$2" -m "$SHARED/models/stories260K.gguf" --kv-type "$1" --kv-disk "$tmp/disk" --kv-mem 64M -t 1 || finish
    U=$url
}
post() { curl -s -m 30 "$U/v1/completions" -H 'Content-Type: application/json' -d "$1"; }

start f16 f16; post "$BODY" > "$tmp/f16.json"; serve_end f16
rm -rf "$tmp/disk"
start q8_0 q8a
post "$BODY" > "$tmp/q8a.json"; post "$BODY" > "$tmp/q8b.json"
post "{\"prompt\":\"$P\",\"max_tokens\":8,\"temperature\":1,\"seed\":5,\"n\":2}" > "$tmp/q8n.json"
sleep 1 # the disk tier's writes
serve_end q8a
start q8_0 q8c; post "$BODY" > "$tmp/q8c.json"; restored=$(metric "$U" kvloom_kv_disk_restored_tokens_total); serve_end q8c
start f16 f16b; post "$BODY" > "$tmp/f16b.json"; foreign=$(metric "$U" 'kvloom_kv_disk_rejected_total{reason="foreign"}'); serve_end f16b
out=$(python3 - "$tmp" "$restored" "$foreign" <<'PY'
import json, re, sys
t, restored, foreign = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3] or 0)
j = lambda n: json.load(open(f"{t}/{n}.json"))
kib = lambda n: float(re.search(r"KV pool \d+ MiB \(\w+, ([0-9.]+) KiB per token\)", open(f"{t}/{n}.log").read()).group(1))
f16, a, b, n2, c, fb = j("f16"), j("q8a"), j("q8b"), j("q8n"), j("q8c"), j("f16b")
text = lambda r: r["choices"][0]["text"]
ratio = kib("q8a") / kib("f16")
print("ok" if 0.5 <= ratio <= 0.7 else "FAIL q8_0 bytes per token %.3f of f16's" % ratio)
print("saving: q8_0 %.3f KiB per token, f16 %.3f (%.2fx)" % (kib("q8a"), kib("f16"), ratio))
print("q8_0 greedy: %r; f16: %r" % (text(a), text(f16)))
print("ok" if text(b) == text(a) and b["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256 else "FAIL RAM prefix cache: %s" % b["usage"])
print("ok" if len(n2["choices"]) == 2 and all(c["text"] for c in n2["choices"]) and n2["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256 else "FAIL n 2: %s" % n2)
print("ok" if text(c) == text(a) and c["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256 and restored >= 256 else
      "FAIL disk restore: %s, restored %d" % (c["usage"], restored))
print("ok" if text(fb) == text(f16) and fb["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 and foreign > 0 else
      "FAIL an f16 server read q8_0 files: %s, foreign %d" % (fb["usage"], foreign))
PY
)
line_tally 5 "$out"
finish
