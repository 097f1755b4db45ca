#!/bin/sh
# fim_test.sh — /v1/completions 'suffix' (fill-in-the-middle) on a model
# whose vocabulary has FIM tokens: a tiny random llama with StarCoder's
# vocabulary (../shared/vocab/ggml-vocab-starcoder.gguf: <fim_prefix>,
# <fim_suffix>, <fim_middle>). A greedy request with prompt + suffix must
# run exactly the prompt <fim_prefix> P <fim_suffix> S <fim_middle> (the
# same text and token count as that prompt written out, tokenized by
# /tokenize), streamed too; n 2 with a seed reproducible. The 400 for a
# vocabulary without FIM tokens is in tests/node/openai_params.mjs.
# Env: KVLOOM_BIN, KVLOOM_BUILD (model cache), KVLOOM_SHARED.
. "$(dirname "$0")/lib.sh"
M="$B/embed-models/fim-tiny.gguf"
gen_model "$M" --arch llama --n-embd 32 --n-layer 1 --n-head 2 --n-ff 64 --n-vocab 49152 --type F32 \
    --vocab "$SHARED/vocab/ggml-vocab-starcoder.gguf" --seed 5
serve_up fim -m "$M" --kv-mem 32M -t 1 || finish
U=$url
post() { curl -s -m 30 "$U$1" -H 'Content-Type: application/json' -d "$2"; }
post /v1/completions '{"prompt":"def add(a, b):\n    ","suffix":"\n    return c\n","max_tokens":8,"temperature":0}' > "$tmp/fim.json"
post /v1/completions '{"prompt":"<fim_prefix>def add(a, b):\n    <fim_suffix>\n    return c\n<fim_middle>","max_tokens":8,"temperature":0}' > "$tmp/plain.json"
post /tokenize '{"content":"<fim_prefix>def add(a, b):\n    <fim_suffix>\n    return c\n<fim_middle>"}' > "$tmp/tok.json"
post /v1/completions '{"prompt":"def add(a, b):\n    ","suffix":"\n    return c\n","max_tokens":8,"temperature":0,"stream":true}' > "$tmp/stream.txt"
post /v1/completions '{"prompt":"def add(a, b):\n    ","suffix":"\n    return c\n","max_tokens":8,"temperature":1,"seed":3,"n":2}' > "$tmp/n1.json"
post /v1/completions '{"prompt":"def add(a, b):\n    ","suffix":"\n    return c\n","max_tokens":8,"temperature":1,"seed":3,"n":2}' > "$tmp/n2.json"
post /v1/completions '{"prompt":["a","b"],"suffix":"c","max_tokens":2}' > "$tmp/two.json"
out=$(python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
j = lambda n: json.load(open(f"{t}/{n}"))
fim, plain, tok = j("fim.json"), j("plain.json"), j("tok.json")
ids = tok["tokens"]
print("ok" if ids[0] == 1 and 3 in ids and ids[-1] == 2 else "FAIL the FIM tokens are not 1/3/2: %s" % ids)
print("ok" if fim["choices"][0]["text"] == plain["choices"][0]["text"] and fim["choices"][0]["text"] else
      "FAIL suffix and the written-out FIM prompt differ: %r vs %r" % (fim["choices"][0]["text"], plain["choices"][0]["text"]))
print("ok" if fim["usage"]["prompt_tokens"] == len(ids) == plain["usage"]["prompt_tokens"] else
      "FAIL prompt tokens: %d, want %d" % (fim["usage"]["prompt_tokens"], len(ids)))
text = "".join(json.loads(l[6:])["choices"][0]["text"] for l in open(f"{t}/stream.txt") if l.startswith("data: {"))
print("ok" if text == fim["choices"][0]["text"] else "FAIL streamed %r" % text)
a, b = j("n1.json"), j("n2.json")
print("ok" if [c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]] and len(a["choices"]) == 2 else "FAIL n 2 seeded")
two = j("two.json")
print("ok" if two.get("error", {}).get("param") == "suffix" else "FAIL suffix with two prompts: %s" % two)
PY
)
line_tally 6 "$out"
serve_stop fim
finish
