#!/usr/bin/env python3
"""soak_clients.py — the client side of bench/soak.sh (standard library only).

Two modes:

  soak_clients.py load --url URL --seconds S [--api-key K] [--max-body BYTES]
                       [--json OUT] [--seed N]
      For S seconds, several threads send, each in a loop:
        good_stream   chat completion, stream:true, read to [DONE]
        good_plain    completion (not streamed), tokenize, GET /health, /v1/models
        bad_json      malformed JSON bodies                         -> 400
        bad_type      wrong types / values for request fields       -> 400
        bad_big       a body one byte over --max-body               -> 413
                      (the server may close before reading it all:
                      a reset is accepted, a 2xx/5xx is not)
        bad_auth      a wrong or missing API key (with --api-key)   -> 401
        bad_route     unknown routes, wrong methods                 -> 404/405
        disc_stream   a streamed request closed after a few bytes
        disc_headers  a connection closed in the middle of its headers
        disc_body     a connection closed in the middle of its body
      A well-formed request that does not get its answer (status, shape,
      [DONE]) is an error; a hostile request answered with anything but its
      expected 4xx is an error too (a 5xx, a 200, no answer). Disconnects
      have no expected answer; they are counted. Prints a JSON summary
      (and writes it to --json); exits 1 if any error was seen.

  soak_clients.py flood --url URL --seconds S --api-key K [--threads N] [--json OUT]
      A hostile tenant (issue 26): N threads (16) send completions of 64
      tokens back to back with their own key. Each must get a 200 or a 429
      (its per-client queue limit, with Retry-After); anything else is an
      error. Counted: ok, limited (429).

  soak_clients.py noread --url URL --seconds S --api-key K [--streams N] [--json OUT]
      A tenant that never reads: N streams (8) of 2,000 tokens kept open
      without reading a byte, each dropped after --hold seconds (15: past
      the server's --stall-timeout 10, which ends it) and replaced.

  soak_clients.py bodies|slots|lastbyte|masks --url URL --seconds S --api-key K
                  [--conns N] [--json OUT]
      The attacks of bench/hostile_probe.py as a tenant that keeps at it
      (issue 26's benchmark, bench/tenant_bench.sh), each connection
      replaced when the server ends it:
        bodies    N (4) connections announce 1 MiB bodies on GET /health
                  without a key and hold them half sent (finding 3)
        slots     N (64, the bench server's --max-connections) kept-alive
                  connections that made one GET /health each and idle
                  (finding 4)
        lastbyte  N (4) POST /tokenize with 1 MB bodies sent but for their
                  last byte, with the tenant's key (finding 8)
        masks     N (4) threads send chats whose schema has the pattern
                  ^([^ ]{1,40} ?){1,60}$ back to back (finding 1): a 200, or
                  a 400 naming --grammar-mask-budget, is expected
      Counted: connections opened / ended by the server, or answers.

  soak_clients.py agentbench --api-key K[,K2,...] -- AGENTBENCH_ARGS...
      Runs ../shared/bench/agentbench.py with 'Authorization: Bearer K' added
      to its requests (agentbench has no key option), so that the soak can
      run the server with --api-key and still send agent traffic. With
      several keys (comma-separated) agent i sends with key i mod their
      number (agentbench's probe request, from its main thread, the first):
      each agent a client of its own for the server's fair sharing — the
      requests, their order and timing are agentbench's, only the header
      differs (bench/tenant_bench.sh AGENT_CLIENTS).
"""
import argparse
import http.client
import json
import os
import random
import runpy
import signal
import socket
import sys
import threading
import time
import urllib.parse


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.n = {}
        self.errors = {}
        self.samples = []

    def ok(self, cls):
        with self.mu:
            self.n[cls] = self.n.get(cls, 0) + 1

    def err(self, cls, what):
        with self.mu:
            self.n[cls] = self.n.get(cls, 0) + 1
            self.errors[cls] = self.errors.get(cls, 0) + 1
            if len(self.samples) < 20:
                self.samples.append(f"{cls}: {what}"[:300])


class Client:
    def __init__(self, url, api_key, max_body, seed):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        self.key = api_key
        self.max_body = max_body
        self.rng = random.Random(seed)

    def headers(self, extra=None):
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        if extra:
            h.update(extra)
        return h

    def call(self, method, path, body=None, headers=None, timeout=120):
        """(status, body bytes); raises on a connection error."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers if headers is not None else self.headers())
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def raw(self, data, read=False, timeout=10):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            s.sendall(data)
            if read:
                return s.recv(4096)
        finally:
            s.close()
        return b""

    # ---- well-formed ----

    def good_stream(self, st):
        body = json.dumps({"messages": [{"role": "user", "content": "Tell me a story about %s." %
                                         self.rng.choice(["a cat", "the sea", "a red ball", "Lily"])}],
                           "max_tokens": self.rng.randint(4, 32), "stream": True,
                           "stream_options": {"include_usage": True}})
        c = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            c.request("POST", "/v1/chat/completions", body=body, headers=self.headers())
            r = c.getresponse()
            if r.status != 200:
                return st.err("good_stream", f"HTTP {r.status}: {r.read(300)!r}")
            done = usage = False
            for line in r:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                d = line[5:].strip()
                if d == b"[DONE]":
                    done = True
                    break
                o = json.loads(d)
                if "error" in o:
                    return st.err("good_stream", f"error event {d[:200]!r}")
                if o.get("usage"):
                    usage = True
            if not done or not usage:
                return st.err("good_stream", f"stream ended without {'usage' if done else '[DONE]'}")
            st.ok("good_stream")
        except Exception as e:  # noqa: BLE001
            st.err("good_stream", f"{type(e).__name__}: {e}")
        finally:
            c.close()

    def good_plain(self, st):
        which = self.rng.randrange(4)
        try:
            if which == 0:
                s, b = self.call("POST", "/v1/completions",
                                 json.dumps({"prompt": "Once upon a time", "max_tokens": self.rng.randint(1, 24),
                                             "temperature": self.rng.choice([0, 0.8]), "logprobs": 2}))
                ok = s == 200 and json.loads(b)["choices"][0]["finish_reason"] in ("stop", "length")
            elif which == 1:
                s, b = self.call("POST", "/tokenize", json.dumps({"content": "Lily saw a big dog."}))
                ok = s == 200 and len(json.loads(b)["tokens"]) > 0
            elif which == 2:
                s, b = self.call("GET", "/health")
                ok = s == 200
            else:
                s, b = self.call("GET", "/v1/models")
                ok = s == 200 and json.loads(b)["data"]
            if ok:
                st.ok("good_plain")
            else:
                st.err("good_plain", f"#{which} HTTP {s}: {b[:200]!r}")
        except Exception as e:  # noqa: BLE001
            st.err("good_plain", f"#{which} {type(e).__name__}: {e}")

    # ---- hostile ----

    BAD_JSON = [b"{", b"{\"prompt\": \"x\",}", b"not json", b"[1,2", b"{\"prompt\": \"\\ud800\"",
                b"\xff\xfe{}", b"{\"messages\": [}", b"", b"{\"a\":" * 50]
    BAD_TYPE = [{"prompt": 5}, {"prompt": "x", "max_tokens": "ten"}, {"prompt": "x", "temperature": "hot"},
                {"prompt": "x", "stream": "yes"}, {"prompt": "x", "stop": 7}, {"prompt": "x", "n": 99},
                {"prompt": "x", "max_tokens": -1}, {"prompt": "x", "top_p": 9},
                {"prompt": "x", "logprobs": 1000}, {"prompt": [["nested"]]}]
    BAD_TYPE_CHAT = [{"messages": "hi"}, {"messages": []}, {"messages": [{"role": 5, "content": "x"}]},
                     {"messages": [{"role": "user", "content": "x"}], "tools": [1]},
                     {"messages": [{"role": "user"}], "max_tokens": 1.5}]

    def expect(self, st, cls, want, fn):
        try:
            s, b = fn()
            if s in want:
                st.ok(cls)
            else:
                st.err(cls, f"HTTP {s} (want {want}): {b[:200]!r}")
        except (ConnectionError, BrokenPipeError) as e:
            if cls == "bad_big":
                st.ok(cls)  # refused before the whole body was sent: allowed
            else:
                st.err(cls, f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001
            st.err(cls, f"{type(e).__name__}: {e}")

    def bad(self, st):
        k = self.rng.randrange(6 if self.key else 5)
        if k == 0:
            body = self.rng.choice(self.BAD_JSON)
            self.expect(st, "bad_json", (400,), lambda: self.call("POST", "/v1/completions", body))
        elif k == 1:
            o = self.rng.choice(self.BAD_TYPE)
            self.expect(st, "bad_type", (400,), lambda: self.call("POST", "/v1/completions", json.dumps(o)))
        elif k == 2:
            o = self.rng.choice(self.BAD_TYPE_CHAT)
            self.expect(st, "bad_type", (400,), lambda: self.call("POST", "/v1/chat/completions", json.dumps(o)))
        elif k == 3:
            body = b"{\"prompt\": \"" + b"a" * (self.max_body + 1 - 14) + b"\"}"
            self.expect(st, "bad_big", (413,), lambda: self.call("POST", "/v1/completions", body))
        elif k == 4:
            m, p, want = self.rng.choice([("GET", "/v2/nothing", (404,)), ("POST", "/v1/nothing", (404,)),
                                          ("GET", "/v1/completions", (405,)), ("DELETE", "/health", (405,)),
                                          ("GET", "/v1/models/no-such-model", (404,))])
            self.expect(st, "bad_route", want, lambda: self.call(m, p, b"{}" if m == "POST" else None))
        else:
            h = self.rng.choice([{"Content-Type": "application/json"},
                                 {"Content-Type": "application/json", "Authorization": "Bearer wrong"},
                                 {"Content-Type": "application/json", "Authorization": "Basic " + self.key}])
            self.expect(st, "bad_auth", (401,),
                        lambda: self.call("POST", "/v1/completions", b"{\"prompt\":\"x\"}", headers=h))

    # ---- disconnects ----

    def disconnect(self, st):
        k = self.rng.randrange(3)
        auth = b"Authorization: Bearer " + self.key.encode() + b"\r\n" if self.key else b""
        try:
            if k == 0:
                body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "stream": True}).encode()
                req = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                       auth + b"Content-Length: %d\r\n\r\n" % len(body) + body)
                s = socket.create_connection((self.host, self.port), timeout=120)
                try:
                    s.sendall(req)
                    got = 0
                    want = self.rng.randint(1, 3000)
                    while got < want:
                        d = s.recv(min(4096, want - got))
                        if not d:
                            break
                        got += len(d)
                finally:
                    s.close()
                st.ok("disc_stream")
            elif k == 1:
                req = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"
                self.raw(req[:self.rng.randint(5, len(req))])
                st.ok("disc_headers")
            else:
                req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                       auth + b"Content-Length: 5000\r\n\r\n{\"messages\": [{\"role\": \"user\", \"content\": \"")
                self.raw(req + b"x" * self.rng.randint(0, 400))
                st.ok("disc_body")
        except OSError as e:  # the server must accept, read and answer
            st.err(("disc_stream", "disc_headers", "disc_body")[k], f"{type(e).__name__}: {e}")


def load(a):
    st = Stats()
    end = time.monotonic() + a.seconds
    plan = [("good_stream", 2), ("good_plain", 1), ("bad", 1), ("disconnect", 1)]

    def worker(name, i):
        cl = Client(a.url, a.api_key, a.max_body, a.seed * 1000 + i)
        fn = getattr(cl, name)
        while time.monotonic() < end:
            fn(st)
            time.sleep(cl.rng.uniform(0.05, 0.5))

    ts = []
    i = 0
    for name, n in plan:
        for _ in range(n):
            i += 1
            t = threading.Thread(target=worker, args=(name, i), daemon=True)
            t.start()
            ts.append(t)
    for t in ts:
        t.join()
    out = {"seconds": a.seconds, "requests": dict(sorted(st.n.items())), "errors": dict(sorted(st.errors.items())),
           "n_requests": sum(st.n.values()), "n_errors": sum(st.errors.values()), "error_samples": st.samples}
    s = json.dumps(out, indent=1)
    print(s)
    if a.json:
        with open(a.json, "w") as f:
            f.write(s + "\n")
    return 1 if out["n_errors"] else 0


def write_summary(a, out):
    s = json.dumps(out, indent=1)
    print(s)
    if a.json:
        with open(a.json, "w") as f:
            f.write(s + "\n")
    return 1 if out.get("n_errors") else 0


STOP = threading.Event()  # SIGTERM (tenant_bench ends an attack): stop, write the summary


def tally(st, what, call, expected):
    """One request of a hostile tenant: a 200 is what_ok; a (status, text in
    the body) of `expected` is what_<its label> (a 429 also waits 50 ms);
    anything else, or no answer, an error."""
    try:
        s, b = call()
    except Exception as e:  # noqa: BLE001
        st.err(what, f"{type(e).__name__}: {e}")
        return
    if s == 200:
        st.ok(what + "_ok")
        return
    for (status, needle), label in expected.items():
        if s == status and needle in b:
            st.ok(what + "_" + label)
            if s == 429:
                time.sleep(0.05)
            return
    st.err(what, f"HTTP {s}: {b[:200]!r}")


def tenant_summary(a, st):
    return write_summary(a, {"seconds": a.seconds, "requests": dict(sorted(st.n.items())),
                             "n_requests": sum(st.n.values()), "n_errors": sum(st.errors.values()),
                             "error_samples": st.samples})


def run_threads(a, st, worker, n):
    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return tenant_summary(a, st)


def flood(a):
    st = Stats()
    end = time.monotonic() + a.seconds

    def worker(i):
        cl = Client(a.url, a.api_key, 8 << 20, a.seed * 1000 + i)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True})
        while time.monotonic() < end and not STOP.is_set():
            tally(st, "flood", lambda: cl.call("POST", "/v1/completions", body), {(429, b"client-max-queued"): "limited"})

    return run_threads(a, st, worker, a.threads)


def noread(a):
    st = Stats()
    end = time.monotonic() + a.seconds
    u = urllib.parse.urlparse(a.url)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": True, "stream": True,
                       "logprobs": 5}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
           b"Authorization: Bearer " + a.api_key.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
           b"\r\n\r\n" + body)
    socks = []  # (socket, opened at)
    while time.monotonic() < end and not STOP.is_set():
        while len(socks) < a.streams:
            try:
                s = socket.create_connection((u.hostname, u.port), timeout=10)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.sendall(req)
                socks.append((s, time.monotonic()))
                st.ok("noread_opened")
            except OSError as e:
                st.err("noread", f"{type(e).__name__}: {e}")
                break
        time.sleep(1)
        # never read: after a.hold seconds (past the server's --stall-timeout,
        # which cancels the request and closes the stream) a socket is dropped
        # and replaced; the server's side is counted in
        # kvloom_requests_stalled_total
        keep = []
        for s, t in socks:
            if time.monotonic() - t > a.hold:
                s.close()
                st.ok("noread_dropped")
            else:
                keep.append((s, t))
        socks = keep
    socks = [s for s, _ in socks]
    for s in socks:
        s.close()
    return tenant_summary(a, st)


def held_conns(a, make, what):
    """Keeps a.conns connections from make() open for a.seconds, replacing
    each one the server ends (read returns EOF or an answer)."""
    st = Stats()
    end = time.monotonic() + a.seconds
    u = urllib.parse.urlparse(a.url)
    socks = []
    while time.monotonic() < end and not STOP.is_set():
        while len(socks) < a.conns:
            try:
                s = socket.create_connection((u.hostname, u.port), timeout=10)
                make(s)
                s.setblocking(False)
                socks.append(s)
                st.ok(what + "_opened")
            except OSError as e:
                st.ok(what + "_refused")  # the server may refuse an attacker: not the agents' error
                time.sleep(0.2)
                break
        time.sleep(0.5)
        keep = []
        for s in socks:
            try:
                b = s.recv(65536)
                ended = True  # an answer (400, 408 ...) or EOF: the server ended it
            except BlockingIOError:
                b, ended = b"", False
            except OSError:
                ended = True
            if ended:
                st.ok(what + "_ended")
                s.close()
            else:
                keep.append(s)
        socks = keep
    for s in socks:
        s.close()
    return tenant_summary(a, st)


def attack(a):
    if a.mode == "bodies":
        def make(s):
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1048576\r\n\r\n" + b"x" * (512 << 10))
        return held_conns(a, make, "bodies")
    if a.mode == "slots":
        def make(s):
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.recv(4096)  # its answer; then the connection idles, kept alive
        return held_conns(a, make, "slots")
    if a.mode == "lastbyte":
        def make(s):
            n = 1000000
            s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + a.api_key.encode() + b"\r\nContent-Length: " + str(n).encode() +
                      b"\r\n\r\n" + (b'{"content":"' + b"a" * (n - 15) + b'"}')[:n - 1])
        return held_conns(a, make, "lastbyte")
    # masks
    st = Stats()
    end = time.monotonic() + a.seconds
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^([^ ]{1,40} ?){1,60}$"}},
              "required": ["s"]}

    def worker(i):
        cl = Client(a.url, a.api_key, 8 << 20, a.seed * 1000 + i)
        seed = i
        while time.monotonic() < end and not STOP.is_set():
            body = json.dumps({"messages": [{"role": "user", "content": "Write a line."}], "max_tokens": 8,
                               "temperature": 1, "seed": seed,
                               "response_format": {"type": "json_schema",
                                                   "json_schema": {"name": "x", "strict": True, "schema": schema}}})
            seed += a.conns
            tally(st, "masks", lambda: cl.call("POST", "/v1/chat/completions", body),
                  {(400, b"grammar-mask-budget"): "budget", (429, b""): "limited"})

    return run_threads(a, st, worker, a.conns)


def agentbench(a, rest):
    orig = http.client.HTTPConnection.request
    keys = a.api_key.split(",")

    def request(self, method, url, body=None, headers=None, **kw):
        headers = dict(headers or {})
        # agentbench runs agent i in a thread started with args (i,)
        args = getattr(threading.current_thread(), "_args", ())
        agent = args[0] if args and isinstance(args[0], int) else 0
        headers["Authorization"] = "Bearer " + keys[agent % len(keys)]
        return orig(self, method, url, body=body, headers=headers, **kw)

    http.client.HTTPConnection.request = request
    path = a.agentbench or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench",
                                        "agentbench.py")
    sys.argv = [path] + rest
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    lp = sub.add_parser("load")
    lp.add_argument("--url", required=True)
    lp.add_argument("--seconds", type=float, required=True)
    lp.add_argument("--api-key", default="")
    lp.add_argument("--max-body", type=int, default=8 << 20)
    lp.add_argument("--json", default="")
    lp.add_argument("--seed", type=int, default=1)
    for mode, flag, n in (("flood", "--threads", 16), ("noread", "--streams", 8)):
        mp = sub.add_parser(mode)
        mp.add_argument("--url", required=True)
        mp.add_argument("--seconds", type=float, required=True)
        mp.add_argument("--api-key", required=True)
        mp.add_argument(flag, type=int, default=n)
        if mode == "noread":
            mp.add_argument("--hold", type=float, default=15, help="seconds a stream is held unread")
        mp.add_argument("--json", default="")
        mp.add_argument("--seed", type=int, default=1)
    for mode, n in (("bodies", 4), ("slots", 64), ("lastbyte", 4), ("masks", 4)):
        mp = sub.add_parser(mode)
        mp.add_argument("--url", required=True)
        mp.add_argument("--seconds", type=float, required=True)
        mp.add_argument("--api-key", default="")
        mp.add_argument("--conns", type=int, default=n)
        mp.add_argument("--json", default="")
        mp.add_argument("--seed", type=int, default=1)
    bp = sub.add_parser("agentbench")
    bp.add_argument("--api-key", required=True)
    bp.add_argument("--agentbench", default="", help="path of agentbench.py (default ../shared/bench/)")
    argv = sys.argv[1:]
    rest = []
    if "--" in argv:
        rest = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    a = ap.parse_args(argv)
    if a.mode in ("flood", "noread", "bodies", "slots", "lastbyte", "masks"):
        signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    if a.mode == "flood":
        return flood(a)
    if a.mode == "noread":
        return noread(a)
    if a.mode in ("bodies", "slots", "lastbyte", "masks"):
        return attack(a)
    return load(a) if a.mode == "load" else agentbench(a, rest)


if __name__ == "__main__":
    sys.exit(main())
