#!/usr/bin/python3
"""cluster_sim.py: a trace-driven simulator of R kvloom replicas behind a
router, for the routing policies deploy/haproxy offers and their baselines
(docs/scale-out.md).

  cluster_sim.py sweep   [--replicas 8,64,1024] [--cost smollm2] ...
      per R and policy: the session rate each policy sustains with TTFT p99
      under the SLO, its cluster cache hit and TTFT p50/p99 there, and the
      single-server cache-hit ideal (one cache of R x the KV, same trace)
  cluster_sim.py agentbench --cost FILE --agents A --turns T ... --policy P
      the agentbench workload (closed loop, one shared prefix) on R replicas,
      to set beside a real run through HAProxy (calibration)
  cluster_sim.py calibrate URL --out FILE
      measures the cost model of the kvloom server at URL (prefill time by
      uncached and cached tokens, decode step time by batch) and writes it

Policies: rr (round robin), least (least backlog), hash (consistent hashing
of the session key), bounded (consistent hashing with bounded load, HAProxy's
hash-balance-factor 150), dualmap (two rings; the candidate holding the
session's cache unless its predicted TTFT breaks the SLO; a new session to
a replica its prefix (tenant) already went to while that one's predicted
TTFT is under --spill x SLO, else to its less loaded candidate, which joins
the prefix's replicas; a hotspot to the least loaded of all: kvloom.lua),
dualmap0 (the first version: new sessions to the less loaded candidate).

Model. Sessions arrive as a Poisson process; each belongs to a tenant drawn
from a Zipf law (the tenant's system prompt is shared by its sessions), reads
a private document in its first turn, then runs T turns separated by tool
pauses; a turn's prompt is the whole context so far. A replica is a
work-conserving FCFS server: a request's prefill costs
  a + u/pp * (1 + k * (c + u/2) / 2048)   (u uncached, c cached tokens)
and its G output tokens cost G * step(b) / b, step(b) = d0 + d1 * (b - 1),
b the requests in flight on that replica (capped at 64). TTFT = queueing +
prefill. A replica's prefix cache holds the tenant prefixes and the session
contexts it served, least recently used evicted past its KV capacity; a hit
needs the tenant prefix and counts the session's context too when the
session's last turn ran there.
"""
import argparse
import bisect
import heapq
import json
import math
import sys
import time
from collections import OrderedDict

import numpy as np

# Cost models. smollm2: SmolLM2-135M Q8_0 on this machine, 2 threads
# (docs/perf.md, measured when the machine was quiet: pp512 1256.8 tok/s;
# tg64 194.2 tok/s at depth 0 and 133.6 at depth 2048, hence k; tg32 at depth
# 2048 135 t/s alone and 544 t/s for 8 sequences, about 1 ms per extra
# sequence, hence d1). Replace with `calibrate` output for another model.
COSTS = {
    "smollm2": {"a": 0.004, "pp": 1256.8, "k": 0.45, "d0": 1 / 194.2, "d1": 0.0009},
}


def mix64(x):
    x &= 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 33)


class Ring:
    """Consistent hashing: 160 points per replica."""

    def __init__(self, n, seed, vnodes=160):
        pts = sorted((mix64(seed * 1000003 + r * 7919 + v * 104729 + 1), r) for r in range(n) for v in range(vnodes))
        self.h = [p[0] for p in pts]
        self.r = [p[1] for p in pts]

    def walk(self, key):
        i = bisect.bisect_left(self.h, key)
        n = len(self.h)
        for k in range(n):
            yield self.r[(i + k) % n]


class Replica:
    __slots__ = ("free", "cache", "used", "cap", "done", "last")

    def __init__(self, cap):
        self.free = 0.0          # when its queued work ends
        self.cache = OrderedDict()  # item -> tokens (LRU order)
        self.used = 0
        self.cap = cap
        self.done = []           # heap of finish times of requests in flight

    def inflight(self, now):
        d = self.done
        while d and d[0] <= now:
            heapq.heappop(d)
        return len(d)

    def touch(self, item, tokens):
        old = self.cache.pop(item, None)
        if old is not None:
            self.used -= old
        self.cache[item] = tokens
        self.used += tokens
        while self.used > self.cap and self.cache:
            _, t = self.cache.popitem(last=False)
            self.used -= t


def prefill_s(cost, u, c):
    return cost["a"] + u / cost["pp"] * (1 + cost["k"] * (c + u / 2) / 2048)


def decode_s(cost, g, b):
    b = max(1, min(b, 64))
    return g * (cost["d0"] + cost["d1"] * (b - 1)) / b


class Cluster:
    def __init__(self, n, cap, policy, cost, slo, spill=0.5):
        self.n, self.policy, self.cost, self.slo = n, policy, cost, slo
        self.reps = [Replica(cap) for _ in range(n)]
        self.rr = 0
        self.rings = (Ring(n, 1), Ring(n, 2))
        self.where = {}          # session -> replica of its last turn
        self.free = np.zeros(n)  # when each replica's queued work ends (for argmin)
        self.finish = []         # finish times of all requests in flight (heap)
        self.homes = {}          # tenant -> replicas its prefix was sent to (dualmap)
        self.spill = spill       # dualmap: a new session leaves its prefix's replicas past spill * SLO

    def cached_on(self, r, tenant, sess, ptok):
        rep = self.reps[r]
        if ("t", tenant) not in rep.cache:
            return 0
        c = ptok
        s = rep.cache.get(("s", sess))
        return c + (s or 0)

    def pred(self, r, now, tenant, sess, ptok, prompt):
        c = self.cached_on(r, tenant, sess, ptok)
        return max(0.0, self.reps[r].free - now) + prefill_s(self.cost, prompt - c, c)

    def route(self, now, sess, tenant, ptok, prompt):
        p, n = self.policy, self.n
        if p == "rr":
            self.rr = (self.rr + 1) % n
            return self.rr
        if p == "least":
            return int(np.argmin(self.free))
        key = mix64(sess * 2654435761 + 12345)
        if p == "hash":
            return next(self.rings[0].walk(key))
        if p == "bounded":
            # HAProxy: a server may take a request while its load (requests in
            # flight) stays <= ceil(factor * (total + 1) / n)
            while self.finish and self.finish[0] <= now:
                heapq.heappop(self.finish)
            total = len(self.finish)
            bound = math.ceil(1.5 * (total + 1) / n)
            for r in self.rings[0].walk(key):
                if self.reps[r].inflight(now) + 1 <= bound:
                    return r
            return next(self.rings[0].walk(key))
        if p in ("dualmap", "dualmap0"):
            c1 = next(self.rings[0].walk(key))
            c2 = next(r for r in self.rings[1].walk(mix64(key ^ 0x5BD1E995)) if r != c1) if n > 1 else c1
            last = self.where.get(sess)
            P = lambda r: self.pred(r, now, tenant, sess, ptok, prompt)  # noqa: E731
            if p == "dualmap" and last is None:
                return self.place_new(now, tenant, c1, c2, P)
            if last in (c1, c2):
                # the cache-affine one, unless its queue breaks the SLO and
                # the other candidate's does not
                other = c2 if last == c1 else c1
                pick = other if P(last) > self.slo and P(other) <= self.slo else last
            elif p == "dualmap":
                pick = last  # moved before: its cache is where it went
            else:
                pick = c1 if P(c1) <= P(c2) else c2  # a new session: the less loaded
            if P(pick) > self.slo:
                g = int(np.argmin(self.free))  # a hotspot: the least loaded of all, if it helps
                if P(g) <= self.slo:
                    pick = g
            return pick
        raise ValueError(p)

    def prefix_home(self, tenant):
        """The replica among those the prefix was sent to with the least
        predicted TTFT (None when it was sent nowhere yet)."""
        hs = self.homes.get(tenant)
        if not hs:
            return None
        a = np.fromiter(hs, int, len(hs))
        return int(a[np.argmin(self.free[a])])

    def place_new(self, now, tenant, c1, c2, P):
        """A new session goes where its prefix (the tenant's system prompt)
        already is: the least loaded of the replicas the prefix was sent to,
        while that one meets the spill target; else the less loaded of its
        own two candidates, which joins the prefix's replicas (so a tenant's
        set grows with its load, and a light tenant keeps one replica);
        else the least loaded of all."""
        hs = self.homes.setdefault(tenant, [])
        target = self.spill * self.slo
        h = self.prefix_home(tenant)
        if h is not None and P(h) <= target:
            return h
        pick = c1 if P(c1) <= P(c2) else c2
        if P(pick) > self.slo:
            g = int(np.argmin(self.free))
            if P(g) < P(pick):
                pick = g
        if h is not None and P(h) <= P(pick):
            return h
        if pick not in hs:
            hs.append(pick)
        return pick

    def serve(self, now, sess, tenant, ptok, prompt, gen):
        """Routes and runs one request; returns (ttft, finish time, cached tokens)."""
        r = self.route(now, sess, tenant, ptok, prompt)
        rep = self.reps[r]
        c = self.cached_on(r, tenant, sess, ptok)
        start = max(now, rep.free)
        pf = prefill_s(self.cost, prompt - c, c)
        b = rep.inflight(now) + 1
        fin = start + pf + decode_s(self.cost, gen, b)
        rep.free = fin
        self.free[r] = fin
        heapq.heappush(rep.done, fin)
        heapq.heappush(self.finish, fin)
        rep.touch(("t", tenant), ptok)
        rep.touch(("s", sess), prompt - ptok + gen)
        self.where[sess] = r
        return start + pf - now, fin, c


def pct(xs, p):
    return float(np.percentile(xs, p)) if len(xs) else float("nan")


# ---- workloads ----

def agent_trace(rng, rate, duration, n_tenants, zipf_s, turns, prefix_tok, doc_tok, user_tok, gen, pause):
    """Session starts and their per-turn shapes; Poisson arrivals."""
    n = rng.poisson(rate * duration)
    starts = np.sort(rng.uniform(0, duration, n))
    w = 1.0 / np.arange(1, n_tenants + 1) ** zipf_s
    tenants = rng.choice(n_tenants, size=n, p=w / w.sum())
    sess = []
    for i in range(n):
        t = int(tenants[i])
        sess.append({
            "start": float(starts[i]), "tenant": t, "ptok": prefix_tok[t], "doc": int(rng.integers(doc_tok[0], doc_tok[1] + 1)),
            "users": rng.integers(user_tok[0], user_tok[1] + 1, turns).tolist(),
            "pauses": rng.uniform(pause[0], pause[1], turns).tolist(), "gen": gen})
    return sess


def run(cluster, sessions, turns, t_measure):
    """Closed loop per session: turn t+1 arrives its pause after turn t ends."""
    ev = [(s["start"], i, 0, 0) for i, s in enumerate(sessions)]  # time, session, turn, context so far
    heapq.heapify(ev)
    ttft, pt, ct = [], 0, 0
    while ev:
        now, i, t, ctx = heapq.heappop(ev)
        s = sessions[i]
        prompt = s["ptok"] + (s["doc"] if t == 0 else 0) + ctx + s["users"][t]
        tt, fin, c = cluster.serve(now, i, s["tenant"], s["ptok"], prompt, s["gen"])
        if now >= t_measure[0] and now < t_measure[1]:
            ttft.append(tt)
            pt += prompt
            ct += c
        if t + 1 < turns:
            heapq.heappush(ev, (fin + s["pauses"][t], i, t + 1, prompt - s["ptok"] + s["gen"]))
    return np.array(ttft), (ct / pt if pt else float("nan"))


def ideal_hit(sessions, turns, cap):
    """One cache of the cluster's whole KV, the same requests in time order,
    no queueing (the single-server ideal)."""
    rep = Replica(cap)
    ev = [(s["start"], i, 0, 0) for i, s in enumerate(sessions)]
    heapq.heapify(ev)
    pt = ct = 0
    while ev:
        now, i, t, ctx = heapq.heappop(ev)
        s = sessions[i]
        prompt = s["ptok"] + (s["doc"] if t == 0 else 0) + ctx + s["users"][t]
        c = 0
        if ("t", s["tenant"]) in rep.cache:
            c = s["ptok"] + (rep.cache.get(("s", i)) or 0)
        pt += prompt
        ct += c
        rep.touch(("t", s["tenant"]), s["ptok"])
        rep.touch(("s", i), prompt - s["ptok"] + s["gen"])
        if t + 1 < turns:
            heapq.heappush(ev, (now + 0.5 + s["pauses"][t], i, t + 1, prompt - s["ptok"] + s["gen"]))
    return ct / pt if pt else float("nan")


def sweep(a):
    cost = load_cost(a.cost)
    out = []
    for R in [int(x) for x in a.replicas.split(",")]:
        rng0 = np.random.default_rng(a.seed)
        n_tenants = max(4, R // 2)
        prefix_tok = rng0.integers(a.prefix[0], a.prefix[1] + 1, n_tenants).tolist()
        dur = a.duration
        measure = (dur * 0.4, dur)
        res = {"R": R, "policies": {}}

        def trial(policy, rate):
            rng = np.random.default_rng(a.seed + 1)
            sess = agent_trace(rng, rate * R, dur, n_tenants, a.zipf, a.turns, prefix_tok, a.doc, a.user, a.gen, a.pause)
            cl = Cluster(R, a.kv_tokens, policy, cost, a.slo, a.spill)
            tt, hit = run(cl, sess, a.turns, measure)
            return tt, hit, sess

        for policy in a.policies.split(","):
            t0 = time.time()
            # bisection of the per-replica session rate, in log space
            lo, hi = math.log(a.rate_hi / 64), math.log(a.rate_hi)
            best = None
            for it in range(a.iters):
                mid = lo if it == 0 else (lo + hi) / 2
                tt, hit, _ = trial(policy, math.exp(mid))
                ok = len(tt) > 20 and pct(tt, 99) <= a.slo
                if ok:
                    lo, best = mid, (math.exp(mid), hit, pct(tt, 50), pct(tt, 99), len(tt))
                elif it == 0:
                    break  # not even the lowest rate
                else:
                    hi = mid
            if best is None:
                best = (0.0, float("nan"), float("nan"), float("nan"), 0)
            rate, hit, p50, p99, nreq = best
            req_rate = rate * R * a.turns
            res["policies"][policy] = {"session_rate": rate * R, "req_rate": req_rate, "cache_hit": hit,
                                       "ttft_p50": p50, "ttft_p99": p99, "sim_s": round(time.time() - t0, 1)}
            print("R=%-5d %-8s sustains %8.2f req/s (TTFT p99 %.2f s <= %.1f), cache hit %.3f, TTFT p50 %.3f s  [%.0f s]"
                  % (R, policy, req_rate, p99, a.slo, hit, p50, time.time() - t0), flush=True)
        # the ideal at the best policy's rate
        rate = max(v["session_rate"] for v in res["policies"].values()) / R
        rng = np.random.default_rng(a.seed + 1)
        sess = agent_trace(rng, rate * R, dur, n_tenants, a.zipf, a.turns, prefix_tok, a.doc, a.user, a.gen, a.pause)
        res["ideal_hit"] = ideal_hit(sess, a.turns, a.kv_tokens * R)
        p = res["policies"]
        line = "R=%-5d single-server ideal cache hit %.3f" % (R, res["ideal_hit"])
        if "dualmap" in p and "rr" in p and p["rr"]["req_rate"] > 0:
            line += "; dualmap / rr %.2fx" % (p["dualmap"]["req_rate"] / p["rr"]["req_rate"])
        if "dualmap" in p and "bounded" in p and p["bounded"]["req_rate"] > 0:
            line += ", dualmap / bounded %.2fx" % (p["dualmap"]["req_rate"] / p["bounded"]["req_rate"])
        print(line, flush=True)
        out.append(res)
    if a.json:
        args = {k: v for k, v in vars(a).items() if k != "fn"}
        json.dump({"args": args, "cost": cost, "results": out}, open(a.json, "w"), indent=1)


# ---- the agentbench workload (calibration against real runs) ----

def agentbench(a):
    cost = load_cost(a.cost)
    shape = json.load(open(a.shape))
    rng = np.random.default_rng(a.seed)
    A, T = shape["agents"], shape["turns"]
    sessions = []
    for i in range(A):
        sessions.append({"start": 0.0, "tenant": 0, "ptok": shape["prefix_tokens"], "doc": 0,
                         "users": shape["user_tokens"][i], "pauses": rng.uniform(shape["pause"][0], shape["pause"][1], T).tolist(),
                         "gen": shape["gen"]})
    out = {}
    for policy in a.policies.split(","):
        cl = Cluster(a.replicas, a.kv_tokens, policy, cost, a.slo)
        tt, hit = run(cl, sessions, T, (0, 1e18))
        out[policy] = {"cache_hit": hit, "ttft_p50_ms": 1000 * pct(tt, 50), "ttft_p99_ms": 1000 * pct(tt, 99)}
        print("%-8s cache hit %.4f  TTFT p50 %.1f ms  p99 %.1f ms" % (policy, hit, out[policy]["ttft_p50_ms"],
                                                                        out[policy]["ttft_p99_ms"]))
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


# ---- calibration against a real server ----

def calibrate(a):
    import urllib.request

    def post(path, body):
        req = urllib.request.Request(a.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        return time.perf_counter() - t0, out

    rng = np.random.default_rng(7)

    def text(n):  # about n tokens of a small vocabulary
        return " ".join("w%d" % x for x in rng.integers(0, 50, n // 2))

    def ttft(prompt):
        # one output token: the time is the prefill (and one step)
        best = None
        for _ in range(3):
            dt, out = post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
            best = dt if best is None else min(best, dt)
        return best, out["usage"]["prompt_tokens"]

    rows = []
    for n in (64, 256, 1024):
        p = text(n)
        # uncached: a fresh prefix each time (a random first word)
        dts = []
        for _ in range(3):
            dt, out = post("/v1/completions", {"prompt": "x%d " % rng.integers(1e9) + p, "max_tokens": 1})
            dts.append((dt, out["usage"]["prompt_tokens"], out["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)))
        rows.append(min(dts))
    # fit t = a + u / pp (least squares over uncached rows)
    u = np.array([r[1] - r[2] for r in rows], float)
    t = np.array([r[0] for r in rows])
    A = np.vstack([np.ones_like(u), u]).T
    (a0, b), *_ = np.linalg.lstsq(A, t, rcond=None)
    # decode: time per token alone, and with 8 at once
    def gen_time(n_par):
        import threading
        res = []

        def one():
            dt, out = post("/v1/completions", {"prompt": text(32), "max_tokens": 64, "ignore_eos": True})
            res.append(dt)
        th = [threading.Thread(target=one) for _ in range(n_par)]
        t0 = time.perf_counter()
        for x in th:
            x.start()
        for x in th:
            x.join()
        return (time.perf_counter() - t0) / 64
    s1 = min(gen_time(1) for _ in range(3))
    s8 = min(gen_time(8) for _ in range(3))
    cost = {"a": max(float(a0), 1e-4), "pp": float(1 / max(b, 1e-7)), "k": 0.45, "d0": s1,
            "d1": max((s8 - s1) / 7, 0.0)}
    json.dump(cost, open(a.out, "w"), indent=1)
    print(json.dumps(cost))


def load_cost(name):
    if name in COSTS:
        return COSTS[name]
    return json.load(open(name))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("--replicas", default="8,64,1024")
    s.add_argument("--policies", default="rr,least,hash,bounded,dualmap")
    s.add_argument("--cost", default="smollm2")
    s.add_argument("--slo", type=float, default=5.0, help="TTFT p99 SLO, seconds")
    s.add_argument("--kv-tokens", type=int, default=48000, help="KV capacity of one replica, tokens")
    s.add_argument("--turns", type=int, default=8)
    s.add_argument("--zipf", type=float, default=1.1)
    s.add_argument("--prefix", type=int, nargs=2, default=[600, 1500], help="tenant system prompt tokens, lo hi")
    s.add_argument("--doc", type=int, nargs=2, default=[200, 800], help="private document tokens, lo hi")
    s.add_argument("--user", type=int, nargs=2, default=[30, 150], help="user message + tool result tokens, lo hi")
    s.add_argument("--gen", type=int, default=48)
    s.add_argument("--pause", type=float, nargs=2, default=[1.0, 6.0], help="tool pause seconds, lo hi")
    s.add_argument("--duration", type=float, default=90.0)
    s.add_argument("--rate-hi", type=float, default=1.0, help="upper bound of the search, sessions/s per replica")
    s.add_argument("--iters", type=int, default=11)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--spill", type=float, default=0.5,
                   help="dualmap: a new session leaves its prefix's replicas when their predicted TTFT passes spill x SLO")
    s.add_argument("--json", default="")
    s.set_defaults(fn=sweep)
    b = sub.add_parser("agentbench")
    b.add_argument("--shape", required=True, help="JSON: agents, turns, prefix_tokens, user_tokens[agent][turn], gen, pause")
    b.add_argument("--cost", required=True)
    b.add_argument("--replicas", type=int, default=3)
    b.add_argument("--kv-tokens", type=int, default=26000)
    b.add_argument("--policies", default="rr,hash,dualmap")
    b.add_argument("--slo", type=float, default=1.0)
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--json", default="")
    b.set_defaults(fn=agentbench)
    c = sub.add_parser("calibrate")
    c.add_argument("url")
    c.add_argument("--out", required=True)
    c.set_defaults(fn=calibrate)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
