"""kvtest.py — what the Python parts of the script tests (kvdisk_test.sh,
crash_restart_test.sh, kvdisk_full_test.sh, deploy_test.sh) share: starting
`kvloom serve` on a free port (its port read from --ready-file), killing
every server started here when the script exits, the deterministic word
prompts, the counters, and /metrics.

The scripts import it with sys.path set to their own folder (env TESTS).
"""
import atexit
import os
import subprocess
import time

procs = []


def kill_all():
    for q in procs:
        if q.poll() is None:
            q.kill()
            q.wait()


atexit.register(kill_all)


def start(bin_path, model, tmp, name, *flags):
    """Starts `kvloom serve` (1 thread, port 0) with flags; returns
    (process, port, log path). Exits the script, printing the server's log,
    when it does not come up within 30 s."""
    port_file = os.path.join(tmp, name + ".port")
    log_path = os.path.join(tmp, name + ".log")
    log = open(log_path, "w")
    p = subprocess.Popen([bin_path, "serve", "-m", model, "--port", "0", "--ready-file", port_file, "-t", "1", *flags],
                         stdout=log, stderr=log)
    procs.append(p)
    for _ in range(300):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return p, int(open(port_file).read()), log_path
        if p.poll() is not None:
            break
        time.sleep(0.1)
    print(open(log_path).read())
    raise SystemExit("server %s did not start" % name)


WORDS = ["the", "cat", "dog", "sun", "tree", "happy", "little", "girl", "boy", "ball", "park", "big", "red",
         "blue", "played", "saw", "went", "home", "mom", "friend", "toy", "box", "bird", "sky", "fun", "day"]


def text(seed, n):
    """n words drawn from WORDS by a 64-bit LCG seeded with seed, and a period."""
    x = seed * 2654435761 + 1
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(x >> 33) % len(WORDS)])
    return " ".join(out) + "."


passed = failed = 0


def check(cond, what):
    """Counts a check; prints what failed."""
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, flush=True)


def finish(name):
    """Prints the summary line tests/run.sh reads and exits with the verdict."""
    print("%s: %d passed, %d failed" % (name, passed, failed))
    raise SystemExit(1 if failed else 0)


def metrics(port):
    """The server's /metrics as {series: value}."""
    import urllib.request
    txt = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for line in txt.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def metric(port, name):
    """The value of the first series of `name` (with or without labels) in
    the server's /metrics, or None."""
    for k, v in metrics(port).items():
        if k == name or k.startswith(name + "{"):
            return v
    return None
