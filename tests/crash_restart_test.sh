#!/bin/sh
# crash_restart_test.sh — kill -9 under load, then restart on the same disk
# tier, several times at random points (issue 14, fault injection):
#   1. reference answers (temperature 0) from a server without a disk tier;
#   2. rounds: `kvloom serve --kv-disk DIR` (a small --kv-mem, so blocks spill
#      and are read back) under 4 concurrent clients (streaming and not) is
#      killed with SIGKILL at a random point (0-1 s after the fourth
#      answer); between rounds the test adds what a crash or a bad disk can
#      leave: a torn block file (a valid name, half the bytes), a leftover
#      temporary, and (every other round) a block whose payload has a flipped
#      byte (right size, wrong checksum);
#   3. each restart must come up, delete the torn file and the temporary
#      (counted: kvloom_kv_disk_rejected_total{reason="corrupt"}, the start
#      log line), never serve the flipped block (the prompts' shared first
#      block: rejected when read, counted corrupt, the answer recomputed),
#      answer every prompt exactly as the reference, and restore tokens
#      from disk (kvloom_kv_disk_restored_tokens_total);
#   4. the model file is opened read-only (O_RDONLY, PROT_READ in
#      src/model/gguf.c): its sha256 is the same after every kill.
# Every answer given before a kill must equal the reference too.
# Env: KVLOOM_BIN (the kvloom binary), KVLOOM_SHARED (../shared),
# CRASH_ROUNDS (default 3), CRASH_SEED (default 14).
. "$(dirname "$0")/lib.sh"
BIN="$BIN" MODEL="$SHARED/models/stories260K.gguf" TMP="$tmp" TESTS="$ROOT/tests" python3 - <<'EOF'
import sys, os
sys.path.insert(0, os.environ["TESTS"])
import atexit, glob, hashlib, json, os, random, re, signal, subprocess, sys, threading, time, urllib.request

BIN, MODEL, TMP = os.environ["BIN"], os.environ["MODEL"], os.environ["TMP"]
ROUNDS = int(os.environ.get("CRASH_ROUNDS", "3"))
rng = random.Random(int(os.environ.get("CRASH_SEED", "14")))
import kvtest
check = kvtest.check

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def start(name, *flags):
    return kvtest.start(BIN, MODEL, TMP, name, *flags)

def post(port, prompt, stream=False, timeout=60):
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                       "stream": stream}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        raw = r.read().decode()
    if not stream:
        return json.loads(raw)["choices"][0]["text"]
    text, done = "", False
    for line in raw.split("\n"):
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            text += json.loads(line[6:])["choices"][0].get("text", "")
    if not done:
        raise RuntimeError("stream without [DONE]")
    return text

metrics = kvtest.metrics

words = ["the", "cat", "dog", "sun", "tree", "happy", "little", "girl", "boy", "ball", "park", "big", "red",
         "blue", "played", "saw", "went", "home", "mom", "friend", "toy", "box", "bird", "sky", "fun", "day"]
def text(seed, n):
    r = random.Random(seed)
    return " ".join(r.choice(words) for _ in range(n)) + "."

system = "Once upon a time there was a little robot who helped everyone. " + text(777, 30)
prompts = [system + " " + text(i, 30 + 9 * i) for i in range(8)]
model_sha = sha256(MODEL)

# 1. the reference
p, port, _ = start("ref", "--kv-mem", "16M")
ref = [post(port, q) for q in prompts]
p.terminate()
p.wait()
check(all(len(t) > 0 for t in ref), "reference answers")

def check_restored(what, m):
    """Tokens came back from disk (not checked after a flipped first block:
    the prompts' shared block is then recomputed, and with it, as timing
    goes, what follows)."""
    if not flipped_path:
        check(m.get("kvloom_kv_disk_restored_tokens_total", 0) > 0,
              "%s: tokens restored from disk: %s" % (what, m.get("kvloom_kv_disk_restored_tokens_total")))

def check_flipped(what, log_path, m):
    """The flipped block was read, rejected (deleted, counted corrupt),
    recomputed and written again under its name with the right bytes."""
    global flipped_caught
    if not flipped_path:
        return
    log = open(log_path).read()
    caught = flipped_path in log and "checksum mismatch" in log
    flipped_caught += caught
    check(caught, "%s: the flipped block rejected when read (log)" % what)
    corrupt = m.get('kvloom_kv_disk_rejected_total{reason="corrupt"}', 0)
    check(corrupt >= 2, "%s: the torn and the flipped block counted corrupt: %s" % (what, corrupt))
    check(not os.path.exists(flipped_path) or open(flipped_path, "rb").read() != flipped_bytes,
          "%s: the flipped bytes are gone from disk" % what)

kvdir = os.path.join(TMP, "kv")
flags = ["--kv-mem", "400K", "--kv-disk", kvdir, "--max-running", "4"]
planted = {"torn": 0, "tmp": 0, "flipped": 0}
kills = 0
flipped_path, flipped_caught = None, 0
answers_before_kills = 0
for rnd in range(ROUNDS):
    p, port, log_path = start("disk%d" % rnd, *flags)
    if rnd > 0:
        # the restart: the torn file and the temporary are gone, and counted
        m = metrics(port)
        log = open(log_path).read()
        mo = re.search(r"kvdisk: .*: (\d+) blocks .* indexed; (\d+) corrupt, (\d+) foreign, (\d+) temporaries removed", log)
        check(mo is not None, "round %d: the start log names the blocks indexed and removed" % rnd)
        if mo:
            check(int(mo.group(2)) >= 1, "round %d: the torn file counted corrupt at start: %s" % (rnd, mo.group(0)))
            check(int(mo.group(4)) >= 1, "round %d: the temporary removed at start: %s" % (rnd, mo.group(0)))
        check(m.get('kvloom_kv_disk_rejected_total{reason="corrupt"}', 0) >= 1,
              "round %d: corrupt files in /metrics after the restart" % rnd)
        check(not glob.glob(os.path.join(kvdir, ".tmp-*")), "round %d: no temporary left" % rnd)
        check(not os.path.exists(torn_path), "round %d: the torn file deleted" % rnd)
        # every prompt, one at a time: the reference, partly from disk
        ok = True
        for i, q in enumerate(prompts):
            t = post(port, q)
            if t != ref[i]:
                ok = False
                print("round %d prompt %d: %r != %r" % (rnd, i, t, ref[i]))
        check(ok, "round %d: every answer after the restart equals the reference" % rnd)
        m = metrics(port)
        check_restored("round %d" % rnd, m)
        check_flipped("round %d" % rnd, log_path, m)
    # load, then kill -9 at a random point
    answers, errors, stop = [], [], threading.Event()
    def client(k):
        i = k
        while not stop.is_set():
            try:
                answers.append((i % len(prompts), post(port, prompts[i % len(prompts)], stream=k % 2 == 1, timeout=30)))
            except Exception as ex:
                if not stop.is_set():
                    errors.append(str(ex))
                return
            i += 3
    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    # a random point once the load is on (a few answers out, blocks written)
    t0 = time.time()
    while len(answers) < 4 and not errors and time.time() - t0 < 90:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 1.0))
    stop.set()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    kills += 1
    for t in threads:
        t.join()
    answers_before_kills += len(answers)
    check(not errors, "round %d: no error before the kill: %s" % (rnd, errors[:3]))
    bad = [(i, t) for i, t in answers if t != ref[i]]
    check(not bad, "round %d: answers before the kill equal the reference: %s" % (rnd, bad[:3]))
    check(sha256(MODEL) == model_sha, "round %d: the model file is unchanged after kill -9" % rnd)
    # what a crash or a bad disk leaves behind
    files = sorted(glob.glob(os.path.join(kvdir, "*.kvb")))
    check(len(files) >= 2, "round %d: block files on disk: %d" % (rnd, len(files)))
    if len(files) < 2:
        break
    src = rng.choice(files)
    fp = os.path.basename(src)[:16]
    torn_path = os.path.join(kvdir, "%s-%016x.kvb" % (fp, rng.getrandbits(64)))
    data = open(src, "rb").read()
    open(torn_path, "wb").write(data[: len(data) // 2])
    planted["torn"] += 1
    open(os.path.join(kvdir, ".tmp-%016x-1-1" % rng.getrandbits(64)), "wb").write(data[:1000])
    planted["tmp"] += 1
    flipped_path = None
    if rnd % 2 == 1:
        # a flipped payload byte in the block every prompt starts with (the
        # one file whose parent key, at offset 32, is 0): the first request
        # after the restart reads it
        firsts = [f for f in files if open(f, "rb").read(40)[32:40] == bytes(8)]
        check(len(firsts) == 1, "round %d: one first block on disk: %d" % (rnd, len(firsts)))
        flipped_path = firsts[0] if firsts else rng.choice(files)
        b = bytearray(open(flipped_path, "rb").read())
        b[len(b) // 2] ^= 0x40
        flipped_bytes = bytes(b)
        open(flipped_path, "r+b").write(flipped_bytes)
        planted["flipped"] += 1

# the last restart: it starts and serves, and exits cleanly
p, port, log_path = start("final", *flags)
check(all(post(port, q) == ref[i] for i, q in enumerate(prompts)), "final restart: every answer equals the reference")
m = metrics(port)
check_flipped("final restart", log_path, m)
check_restored("final restart", m)
p.terminate()
check(p.wait() == 0, "final restart: clean exit")
check(sha256(MODEL) == model_sha, "the model file is unchanged at the end")
print("kill -9: %d, answers before the kills: %d, planted: %s, flipped blocks rejected when read: %d"
      % (kills, answers_before_kills, planted, flipped_caught))
kvtest.finish("crash_restart_test")
EOF
