#!/bin/sh
# kvdisk_test.sh — the KV disk tier through the real `kvloom serve` process:
#   1. reference answers (temperature 0) from a server without a disk tier;
#   2. a server with --kv-disk and a tiny --kv-mem serves concurrent requests
#      (heavy eviction, every block written through) and is killed with
#      SIGKILL in the middle of it; every answer it gave equals the reference;
#   3. restarted on the same directory: the first request is served mostly
#      from the cache (usage.prompt_tokens_details.cached_tokens), every
#      answer still equals the reference, /metrics shows tokens restored from
#      disk; a second kill -9 / restart round does the same;
#   4. a disk cap smaller than one block (--kv-disk-size 4K): the same
#      answers, recomputed, never an error.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_SHARED (../shared).
. "$(dirname "$0")/lib.sh"
BIN="$BIN" MODEL="$SHARED/models/stories260K.gguf" TMP="$tmp" TESTS="$ROOT/tests" python3 - <<'EOF'
import os, sys
sys.path.insert(0, os.environ["TESTS"])
import json, signal, threading, time, urllib.request
import kvtest

BIN, MODEL, TMP = os.environ["BIN"], os.environ["MODEL"], os.environ["TMP"]
check, metric, text = kvtest.check, kvtest.metric, kvtest.text

def start(name, *flags):
    p, port, _ = kvtest.start(BIN, MODEL, TMP, name, "--check", *flags)
    return p, port

def post(port, prompt, timeout=60):
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        j = json.load(r)
    u = j["usage"]
    return j["choices"][0]["text"], u["prompt_tokens"], u.get("prompt_tokens_details", {}).get("cached_tokens", 0)

system = "Once upon a time there was a little robot who helped everyone. " + text(999, 30)
prompts = [system + " " + text(i, 40 + 7 * i) for i in range(12)]

# 1. the reference: no disk tier, a big pool
p, port = start("ref", "--kv-mem", "16M")
ref = [post(port, q)[0] for q in prompts]
p.terminate(); p.wait()
check(all(len(t) > 0 for t in ref), "reference answers")

# 2. heavy spilling, then kill -9 in the middle of it
kvdir = os.path.join(TMP, "kv")
flags = ["--kv-mem", "400K", "--kv-disk", kvdir, "--max-running", "4"]
p, port = start("disk1", *flags)
answers, errors, stop = [], [], threading.Event()
def client(k):
    i = k
    while not stop.is_set():
        try:
            t, _, _ = post(port, prompts[i % len(prompts)], timeout=30)
            answers.append((i % len(prompts), t))
        except Exception as ex:
            errors.append(str(ex))
            return
        i += 3
threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
for t in threads: t.start()
t0 = time.time()
while len(answers) < 30 and time.time() - t0 < 120:
    time.sleep(0.05)
written = metric(port, "kvloom_kv_disk_written_bytes_total")
os.kill(p.pid, signal.SIGKILL)
p.wait()
stop.set()
for t in threads: t.join()
check(len(answers) >= 30, "answers before the kill: %d; errors: %s" % (len(answers), errors[:3]))
check(written and written > 0, "blocks written before the kill: %s" % written)
bad = [(i, t) for i, t in answers if t != ref[i]]
check(not bad, "answers before the kill equal the reference: %s" % bad[:3])

# 3. restart on the same directory, twice (the second time killed again
# while busy)
for rnd in range(2):
    p, port = start("disk%d" % (rnd + 2), *flags)
    t, n_prompt, cached = post(port, prompts[0])
    check(t == ref[0], "first answer after restart %d" % rnd)
    check(cached >= 0.8 * n_prompt, "first request after restart %d from the cache: %d of %d" % (rnd, cached, n_prompt))
    ok = True
    hits = 0
    for i, q in enumerate(prompts):
        t, n_prompt, cached = post(port, q)
        ok = ok and t == ref[i]
        hits += cached >= 0.8 * n_prompt
    check(ok, "every answer after restart %d equals the reference" % rnd)
    check(hits >= len(prompts) - 2, "prompts mostly from cache after restart %d: %d of %d" % (rnd, hits, len(prompts)))
    restored = metric(port, "kvloom_kv_disk_restored_tokens_total")
    check(restored and restored > 0, "tokens restored from disk: %s" % restored)
    check(metric(port, "kvloom_kv_disk_blocks") > 0, "blocks on disk in /metrics")
    # busy again, then kill -9
    answers.clear(); errors.clear(); stop.clear()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads: t.start()
    time.sleep(1.0)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    stop.set()
    for t in threads: t.join()
    bad = [(i, t) for i, t in answers if t != ref[i]]
    check(not bad, "answers before kill %d equal the reference: %s" % (rnd + 2, [(i, t, ref[i]) for i, t in bad[:3]]))

# 4. a disk too small for one block: recompute, no error
p, port = start("full", "--kv-mem", "400K", "--kv-disk", os.path.join(TMP, "kv2"), "--kv-disk-size", "4K")
ok = True
for r in range(2):
    for i, q in enumerate(prompts):
        try:
            ok = ok and post(port, q)[0] == ref[i]
        except Exception as ex:
            ok = False
            print("error with a full disk:", ex)
check(ok, "a full disk: every answer equals the reference")
check(metric(port, "kvloom_kv_disk_restored_tokens_total") == 0, "nothing restored from a full disk")
check(metric(port, "kvloom_kv_disk_writes_dropped_total") > 0, "dropped writes counted")
p.terminate()
check(p.wait() == 0, "clean exit")
kvtest.finish("kvdisk_test")
EOF
