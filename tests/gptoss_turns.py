"""gptoss_turns.py — an agent's conversation on a gpt-oss-shaped model
(sliding-window layers, sinks) keeps full prefix reuse across turns: each
turn's prompt is the previous prompt, the model's answer and a new message,
sent to one warm server (--check: pool and prefix tree verified after every
step); each turn must find the whole previous prompt in the cache
(usage.prompt_tokens_details.cached_tokens), and at least 90% of it plus the
answer's tokens — whole blocks, and the rows of the previous turn's partial
last block copied into a block of the new turn's own (copy-on-write,
docs/kv-cache.md; kvloom_kv_partial_tokens_total) — and its answer must equal
the answer of a cold server (a fresh process, nothing cached) given the same
prompt. The same with --kv-type q8_0 (cold answers of its last two turns). Then the disk tier: a server with --kv-disk answers the last turn,
is stopped, and a new one on the same directory finds >= 90% of that
prompt cached and gives the same answer. The window (16) is far shorter than the prompts (~150-450 tokens),
so a cache that dropped out-of-window blocks, or reprocessed whole prompts
as llama.cpp's server does on sliding-window models, fails the first check.

    python3 tests/gptoss_turns.py KVLOOM_BIN MODEL.gguf TMPDIR
"""
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvtest  # noqa: E402

BIN, MODEL, TMP = sys.argv[1:4]


def post(port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        j = json.load(r)
    u = j["usage"]
    return j["choices"][0]["text"], u["prompt_tokens"], u.get("prompt_tokens_details", {}).get("cached_tokens", 0)


def conversation(tag, flags, cold_turns):
    """Four turns on one warm server; the answers of cold_turns against cold
    servers. Returns the turns (prompt, answer)."""
    warm, wport, _ = kvtest.start(BIN, MODEL, TMP, "warm" + tag, "--kv-mem", "64M", "--check", *flags)
    prompt = "You are a helpful agent. " + kvtest.text(7, 90)
    prev_n = 0
    turns = []
    for t in range(4):
        out, n, cached = post(wport, prompt)
        turns.append((prompt, out))
        if t > 0:
            # the previous prompt ends in the middle of a block; its last
            # rows come from a copy of that block, so it is all cached
            kvtest.check(cached >= prev_n and cached >= 0.9 * (prev_n + 12),
                         "%s turn %d: %d tokens cached; the previous prompt had %d (+ 12 generated)"
                         % (tag, t, cached, prev_n))
        kvtest.check(n > 16 * (t + 1), "turn %d: the prompt (%d tokens) is longer than the window" % (t, n))
        prev_n = n
        prompt = prompt + out + " Tool result: " + kvtest.text(100 + t, 30) + " Next step?"
    copied = kvtest.metrics(wport).get("kvloom_kv_partial_tokens_total", 0)
    kvtest.check(copied > 0, "%s: no rows copied from a partial block" % tag)
    warm.terminate()
    warm.wait()
    for t in cold_turns:
        p, out = turns[t]
        cold, cport, _ = kvtest.start(BIN, MODEL, TMP, "cold%s%d" % (tag, t), "--kv-mem", "64M", *flags)
        cout, _, ccached = post(cport, p)
        kvtest.check(ccached == 0, "%s turn %d: the cold server found %d tokens cached" % (tag, t, ccached))
        kvtest.check(cout == out, "%s turn %d: warm answer %r != cold answer %r" % (tag, t, out, cout))
        cold.terminate()
        cold.wait()
    return turns


turns = conversation("", [], range(4))
conversation("q8", ["--kv-type", "q8_0"], [2, 3])
disk = os.path.join(TMP, "kvdisk")
last_prompt, last_out = turns[-1]
for run in range(2):
    d, dport, _ = kvtest.start(BIN, MODEL, TMP, "disk%d" % run, "--kv-mem", "64M", "--kv-disk", disk)
    out, n, cached = post(dport, last_prompt)
    kvtest.check(out == last_out, "disk run %d: answer %r != %r" % (run, out, last_out))
    if run == 1:
        kvtest.check(cached >= 0.9 * n, "disk: %d of %d prompt tokens restored from the disk tier" % (cached, n))
    d.terminate()
    d.wait()
kvtest.finish("gptoss_turns")
