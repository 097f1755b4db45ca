#!/usr/bin/env python3
"""conn_flood.py — what idle and dribbling sockets cost a running `kvloom serve`.

Opens --idle silent sockets and --dribble sockets that send one byte of a
request's headers every second, spread over the source addresses
127.0.0.2 .. 127.0.0.(1 + --addrs), waits until the server holds them all
(its /proc/PID/fd count) for --window seconds, sampling the server's thread
count and RSS (/proc/PID/status) and the sockets it holds, and prints them
before and at their peak, with the status and time of a GET /health and of
a short POST /v1/completions sent from 127.0.0.1 half-way. The sockets are closed at the end (or by the server: past
--header-timeout it answers 408 and closes them).

  bench/conn_flood.py --port 8080 --pid $(pgrep -n kvloom) --idle 1000 --dribble 100

Linux only (/proc). Used for docs/server.md "Limits and security".
"""
import argparse
import os
import socket
import sys
import threading
import time


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Threads", "VmRSS"):
                out[k] = v.strip()
    return out


def n_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def request(port, raw, timeout=60):
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=("127.0.0.1", 0))
    try:
        s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        return f"error {e}", time.time() - t0
    finally:
        s.close()
    status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.") else "no answer"
    return status, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--dribble", type=int, default=100)
    ap.add_argument("--addrs", type=int, default=8, help="source addresses 127.0.0.2 .. 127.0.0.(1+N)")
    ap.add_argument("--window", type=float, default=8.0, help="seconds to sample (below --header-timeout)")
    a = ap.parse_args()

    before = proc_status(a.pid)
    fds0 = n_fds(a.pid)
    socks = []
    t0 = time.time()
    for i in range(a.idle + a.dribble):
        src = f"127.0.0.{2 + i % a.addrs}"
        s = socket.socket()
        s.bind((src, 0))
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", a.port))
        except BlockingIOError:
            pass
        except OSError as e:
            print(f"connect {i}: {e}", file=sys.stderr)
        socks.append(s)
    drib = socks[a.idle:]
    stop = threading.Event()
    line = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 200

    def dribble():
        i = 0
        while not stop.is_set():
            for s in drib:
                try:
                    s.send(line[i % len(line):i % len(line) + 1])
                except OSError:
                    pass
            i += 1
            stop.wait(1.0)

    th = threading.Thread(target=dribble)
    th.start()
    # sample for --window seconds (below the server's --header-timeout, which
    # ends the flood); the two requests go out half-way
    peak = {"Threads": 0, "VmRSS": 0, "fds": 0}
    result = {}

    def probe():
        result["health"] = request(a.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        body = b'{"prompt":"Once upon a time","max_tokens":8,"temperature":0}'
        result["completion"] = request(
            a.port, b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    pr = threading.Thread(target=probe)
    started = False
    while time.time() - t0 < a.window:
        st = proc_status(a.pid)
        peak["Threads"] = max(peak["Threads"], int(st["Threads"]))
        peak["VmRSS"] = max(peak["VmRSS"], int(st["VmRSS"].split()[0]))
        peak["fds"] = max(peak["fds"], n_fds(a.pid) - fds0)
        if not started and time.time() - t0 >= a.window / 2:
            pr.start()
            started = True
        time.sleep(0.1)
    pr.join()
    stop.set()
    th.join()
    h, c = result["health"], result["completion"]
    print(f"sockets: {a.idle} idle + {a.dribble} dribbling from {a.addrs} addresses, sampled for {a.window:.0f} s")
    print(f"before:  Threads {before['Threads']}, VmRSS {before['VmRSS']}")
    print(f"peak:    Threads {peak['Threads']}, VmRSS {peak['VmRSS']} kB, sockets held {peak['fds']}")
    print(f"/health: {h[0]} in {h[1]:.3f} s; completion: {c[0]} in {c[1]:.3f} s (sent at {a.window / 2:.0f} s)")
    for s in socks:
        s.close()


if __name__ == "__main__":
    sys.exit(main())
