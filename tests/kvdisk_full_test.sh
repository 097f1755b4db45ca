#!/bin/sh
# kvdisk_full_test.sh — the KV disk tier on a full disk (issue 14, fault
# injection): `kvloom serve --kv-disk DIR` with DIR on a 2 MB tmpfs.
#   1. reference answers (temperature 0) from a server without a disk tier;
#   2. the tmpfs is filled to the last byte, then a few KB are given back
#      (less than one block file, so writes fail mid-file with ENOSPC):
#      every request still succeeds with the reference answer, the failed
#      writes are counted (kvloom_kv_disk_write_errors_total) and logged
#      once, not once per block, and no temporary is left behind;
#   3. the space returns: writes succeed again (logged once), answers equal
#      the reference;
#   4. a restart on the same directory serves every prompt as the reference,
#      restores tokens from disk, and finds nothing corrupt (a write cut by
#      ENOSPC never left a file under a block's name);
#   5. a tier without --kv-disk-size that fills the disk itself deletes its
#      own least recently used files: no write fails (issue 26).
# Needs root for mount(8); otherwise (or when tmpfs cannot be mounted) it
# prints why and skips. Env: KVLOOM_BIN, KVLOOM_SHARED (../shared).
. "$(dirname "$0")/lib.sh"
mnt="$tmp/mnt"
mkdir -p "$mnt"
if [ "$(id -u)" != 0 ]; then
    echo "kvdisk_full_test: skipped: mounting a small tmpfs needs root"
    finish
fi
if ! mount -t tmpfs -o size=2m tmpfs "$mnt" 2>"$tmp/mount.err"; then
    echo "kvdisk_full_test: skipped: cannot mount a tmpfs: $(cat "$tmp/mount.err")"
    finish
fi
at_exit 'umount -l "$mnt" 2>/dev/null'
BIN="$BIN" MODEL="$SHARED/models/stories260K.gguf" TMP="$tmp" TESTS="$ROOT/tests" MNT="$mnt" python3 - <<'EOF'
import sys, os
sys.path.insert(0, os.environ["TESTS"])
import atexit, errno, glob, json, os, re, shutil, subprocess, sys, threading, time, urllib.request

BIN, MODEL, TMP, MNT = os.environ["BIN"], os.environ["MODEL"], os.environ["TMP"], os.environ["MNT"]
import kvtest
check = kvtest.check


def start(name, *flags):
    return kvtest.start(BIN, MODEL, TMP, name, *flags)

def post(port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["choices"][0]["text"]

metrics = kvtest.metrics

def serve_all(port, what):
    """Every prompt twice, the second pass from 3 threads at once."""
    got, errors = [], []
    for i, q in enumerate(prompts):
        try:
            got.append((i, post(port, q)))
        except Exception as ex:
            errors.append(str(ex))
    def worker(k):
        for i in range(k, len(prompts), 3):
            try:
                got.append((i, post(port, prompts[i])))
            except Exception as ex:
                errors.append(str(ex))
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in ts: t.start()
    for t in ts: t.join()
    check(not errors, "%s: every request succeeds: %s" % (what, errors[:3]))
    bad = [(i, t, ref[i]) for i, t in got if t != ref[i]]
    check(not bad and len(got) == 2 * len(prompts), "%s: every answer equals the reference: %s" % (what, bad[:3]))

def wait_io(port):
    """Until the I/O threads are quiet (the written and error counts settle)."""
    last = None
    for _ in range(100):
        m = metrics(port)
        cur = (m.get("kvloom_kv_disk_written_bytes_total"), m.get("kvloom_kv_disk_write_errors_total"))
        if cur == last:
            return m
        last = cur
        time.sleep(0.2)
    return m

text = kvtest.text
system = "Once upon a time there was a little robot who helped everyone. " + text(4242, 30)
prompts = [system + " " + text(i, 35 + 8 * i) for i in range(8)]

# 1. the reference
p, port, _ = start("ref", "--kv-mem", "16M")
ref = [post(port, q) for q in prompts]
p.terminate(); p.wait()

# 2. a full disk
kvdir = os.path.join(MNT, "kv")
flags = ["--kv-mem", "400K", "--kv-disk", kvdir, "--max-running", "3"]
p, port, log_path = start("full", *flags)
def fill(filler, room):
    """Fills the tmpfs with one file, then gives `room` bytes back."""
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush at close
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as ex:
            check(ex.errno == errno.ENOSPC, "the tmpfs fills up with ENOSPC: %s" % ex)
    os.truncate(filler, max(0, os.path.getsize(filler) - room))

filler = os.path.join(MNT, "filler")
fill(filler, 8192) # room for part of a block file, never a whole one
serve_all(port, "full disk")
m = wait_io(port)
errs = m.get("kvloom_kv_disk_write_errors_total", 0)
check(errs >= 2, "failed writes counted: %s" % errs)
log = open(log_path).read()
n_warn = log.count("writing a block file failed")
check(n_warn == 1, "the outage logged once (%d lines for %d failed writes)" % (n_warn, errs))
check("No space left on device" in log, "the warning names the cause")
check(not glob.glob(os.path.join(kvdir, ".tmp-*")), "no temporary left after failed writes")
written_full = m.get("kvloom_kv_disk_written_bytes_total", 0)

# 3. the space returns
os.unlink(filler)
serve_all(port, "space returned")
m = wait_io(port)
check(m.get("kvloom_kv_disk_written_bytes_total", 0) > written_full,
      "block files written again: %s -> %s bytes" % (written_full, m.get("kvloom_kv_disk_written_bytes_total")))
log = open(log_path).read()
check(log.count("block files are written again") == 1, "the end of the outage logged once")
check(log.count("writing a block file failed") == 1, "still one warning line")
p.terminate()
check(p.wait() == 0, "clean exit")

# 4. restart on the same directory: nothing corrupt, tokens restored
p, port, log_path = start("restart", *flags)
serve_all(port, "after restart")
m = metrics(port)
check(m.get("kvloom_kv_disk_restored_tokens_total", 0) > 0,
      "tokens restored from disk: %s" % m.get("kvloom_kv_disk_restored_tokens_total"))
check(m.get('kvloom_kv_disk_rejected_total{reason="corrupt"}', -1) == 0, "no corrupt block file")
p.terminate()
check(p.wait() == 0, "clean exit after restart")
restored = m.get("kvloom_kv_disk_restored_tokens_total", 0)

# 5. the tier fills the disk itself, without --kv-disk-size: it deletes its
# own least recently used files to make room (before: every write failed
# once the disk was full, and the tier never evicted)
shutil.rmtree(kvdir)
kv2 = os.path.join(MNT, "kv2")
filler = os.path.join(MNT, "filler2")
fill(filler, 400 * 1024)  # room for ~20 block files
p, port, log_path = start("own", "--kv-mem", "400K", "--kv-disk", kv2, "--max-running", "3")
serve_all(port, "a disk the tier fills")
m = wait_io(port)
written = m.get("kvloom_kv_disk_written_bytes_total", 0)
check(written > 600 * 1024, "the tier wrote more than the disk had room for: %s bytes in 400 KB" % written)
check(m.get("kvloom_kv_disk_write_errors_total", -1) == 0,
      "no write failed: %s" % m.get("kvloom_kv_disk_write_errors_total"))
check(m.get("kvloom_kv_disk_bytes", 1e9) <= 400 * 1024, "what stays fits: %s" % m.get("kvloom_kv_disk_bytes"))
p.terminate()
check(p.wait() == 0, "clean exit")
os.unlink(filler)
print("failed writes on the full disk: %d (%d warning line), restored after restart: %d tokens; "
      "a disk the tier filled: %d bytes written in 400 KB, 0 writes failed" % (errs, n_warn, restored, written))
kvtest.finish("kvdisk_full_test")
EOF
