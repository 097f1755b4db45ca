#!/usr/bin/env python3
"""hostile_probe.py — issue 26's transport findings, measured against a kvloom
binary: each attack beside a legitimate client, with the legitimate client's
status and latency printed (docs/reliability.md "Many users on one server").

  python3 bench/hostile_probe.py BIN MODEL

Starts BIN serve on a free port for each probe (stories260K is enough), runs:
  auth-bodies  4 unauthenticated 1 MiB bodies announced on GET /health and
               held half-sent (--api-key, --max-body 1M, --max-body-total 2M),
               then an authenticated 300 KB POST /tokenize: its status
  slots        --max-connections 64: 64 kept-alive connections that made one
               GET /health each and idle, then a new client's GET /health:
               its status and seconds (--timeout 60)
  last-byte    a 1 MB body sent whole but for its last byte (defaults): the
               seconds until the server answers 408
  masks        (finding 1; only when named: python3 bench/hostile_probe.py BIN
               MODEL masks; a large vocabulary shows it, e.g. qwen3-tiny.gguf)
               16 chat requests whose schema has the pattern
               ^([^ ]{1,40} ?){1,60}$ (8 tokens each at temperature 1, seeds
               0..15; at the default --grammar-mask-budget each fails after
               its first masks), and meanwhile an unrelated 16-token chat,
               three times: its seconds, with masks inside the step
               (--grammar-mask-sync) and on the mask worker (the default),
               servers interleaved over ROUNDS (env, 3) rounds; and alone
Numbers only; no pass/fail (the tests assert)."""
import os
import json
import socket
import statistics
import subprocess
import threading
import urllib.request
import sys
import tempfile
import time


def start(binary, model, flags):
    ready = tempfile.mktemp(prefix="probe_port_")
    log = open(tempfile.mktemp(prefix="probe_log_"), "w")
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "--ready-file", ready, "-t", "1",
                          "--kv-mem", "8M"] + flags, stderr=log, stdout=log)
    for _ in range(300):
        if os.path.exists(ready) and open(ready).read().strip():
            return p, int(open(ready).read())
        time.sleep(0.05)
    p.kill()
    raise SystemExit("server did not start")


def stop(p):
    p.terminate()
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()


def request(port, raw, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(raw)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(body) >= int(cl[0].split(b":")[1]):
                    break
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return int(out.split(b" ")[1]) if out.startswith(b"HTTP/1.") else 0


def auth_bodies(binary, model):
    p, port = start(binary, model, ["--api-key", "k", "--max-body", "1M", "--max-body-total", "2M"])
    held = []
    for _ in range(4):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1048576\r\n\r\n")
        try:
            s.sendall(b" " * 600000)
        except OSError:
            pass
        held.append(s)
    time.sleep(0.5)
    body = b'{"content":"hi"}' + b" " * 300000
    t0 = time.time()
    st = request(port, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer k\r\n"
                 b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    print("auth-bodies: authenticated POST beside 4 unauthenticated half-sent 1 MiB bodies: %d in %.2f s"
          % (st, time.time() - t0))
    for s in held:
        s.close()
    stop(p)


def slots(binary, model):
    p, port = start(binary, model, ["--max-connections", "64"])
    held = []
    for _ in range(64):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        s.recv(4096)
        held.append(s)
    t0 = time.time()
    try:
        st = request(port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", timeout=15)
    except OSError:
        st = 0
    print("slots: new client beside 64 idle kept-alive connections (--max-connections 64): %d in %.2f s"
          % (st, time.time() - t0))
    for s in held:
        s.close()
    stop(p)


def last_byte(binary, model):
    p, port = start(binary, model, [])
    s = socket.create_connection(("127.0.0.1", port), timeout=200)
    n = 1000000
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % n + b" " * (n - 1))
    t0 = time.time()
    out = s.recv(4096)
    print("last-byte: a 1 MB body stalled before its last byte: answered %s after %.1f s"
          % (out.split(b"\r\n")[0].decode(errors="replace") or "nothing", time.time() - t0))
    s.close()
    stop(p)


def chat(port, body, timeout=600):
    rq = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(rq, timeout=timeout) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    return code, time.time() - t0


def masks(binary, model):
    heavy = {"messages": [{"role": "user", "content": "Write a short list of words about the sea, the sky, "
                           "ships, gulls and the harbour at dawn, one after another."}],
             "max_tokens": 8, "temperature": 1,
             "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {
                 "type": "object", "properties": {"t": {"type": "string", "pattern": "^([^ ]{1,40} ?){1,60}$"}},
                 "required": ["t"]}}}}
    light = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "temperature": 0,
             "ignore_eos": True}
    res = {}
    for rnd in range(int(os.environ.get("ROUNDS", "3"))):
        for name, flags in (("step", ["--grammar-mask-sync"]), ("worker", [])):
            p, port = start(binary, model, flags + ["--kv-mem", "256M"])
            chat(port, light)  # warm
            alone = [chat(port, light)[1] for _ in range(3)]
            codes = []
            th = [threading.Thread(target=lambda i=i: codes.append(chat(port, dict(heavy, seed=i))[0]))
                  for i in range(16)]
            for t in th:
                t.start()
            time.sleep(0.5)
            beside = [chat(port, light) for _ in range(3)]
            for t in th:
                t.join()
            stop(p)
            res.setdefault(name, []).append((statistics.median(alone), beside[0][1]))
            print("masks round %d %-6s: the chat alone %.3f s, beside 16 heavy-pattern requests %s s (its codes %s; "
                  "theirs %s)" % (rnd, name, statistics.median(alone), " ".join("%.3f" % b[1] for b in beside),
                                  [b[0] for b in beside], sorted(set(codes))), flush=True)
    for name, v in res.items():
        print("masks %-6s: median over rounds: alone %.3f s, the first chat beside (during the attack) %.3f s" %
              (name, statistics.median(a for a, _ in v), statistics.median(b for _, b in v)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    probes = {"auth-bodies": auth_bodies, "slots": slots, "last-byte": last_byte, "masks": masks}
    for name in sys.argv[3:] or ("auth-bodies", "slots", "last-byte"):
        probes[name](sys.argv[1], sys.argv[2])
