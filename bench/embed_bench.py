#!/usr/bin/python3
"""embed_bench.py -- embeddings throughput of an OpenAI-compatible server
(kvloom or llama-server --embeddings): POST /v1/embeddings with batches of
inputs of about W words each, for D seconds after one warm-up request;
prints inputs/s and tokens/s (tokens from the answer's usage, else counted
by /tokenize). Standard library only.

    embed_bench.py URL MODEL [--batch 32] [--words 100] [--seconds 20]

And the model-switch latency of a kvloom server serving two models with
--models-max 1 (every switch unloads one and loads the other):

    embed_bench.py URL A --switch B [--rounds 5] [--cold FILE_A,FILE_B]

--cold evicts both files from the page cache (posix_fadvise DONTNEED on the
file only) before each load, for the cold-cache latency.
"""
import argparse
import json
import os
import random
import statistics
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


WORDS = ("the quick brown fox jumps over a lazy dog while seven agents read long documents about memory "
         "retrieval search vectors cache servers and models in many languages").split()


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def throughput(a):
    rng = random.Random(1)
    url = a.url + "/v1/embeddings"
    post(url, {"model": a.model, "input": [text(rng, a.words) for _ in range(a.batch)]})
    n_in = n_tok = 0
    t0 = time.time()
    while time.time() - t0 < a.seconds:
        r = post(url, {"model": a.model, "input": [text(rng, a.words) for _ in range(a.batch)]})
        n_in += len(r["data"])
        n_tok += r.get("usage", {}).get("prompt_tokens", 0)
    dt = time.time() - t0
    print("%s: %d inputs in %.1f s: %.1f inputs/s, %.0f tokens/s (%.1f tokens per input)"
          % (a.model, n_in, dt, n_in / dt, n_tok / dt, n_tok / max(n_in, 1)))


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def switch(a):
    url = a.url + "/v1/embeddings"
    files = a.cold.split(",") if a.cold else []
    lat = {a.model: [], a.switch: []}
    for r in range(a.rounds + 1):
        for m in (a.model, a.switch):
            for f in files:
                evict(f)
            t0 = time.time()
            post(url, {"model": m, "input": "hello"})
            if r > 0:  # round 0 warms the page cache (or is cold anyway)
                lat[m].append(time.time() - t0)
    for m, v in lat.items():
        print("switch to %s (%s page cache): median %.0f ms, min %.0f, max %.0f over %d"
              % (m, "cold" if files else "warm", statistics.median(v) * 1e3, min(v) * 1e3, max(v) * 1e3, len(v)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--switch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cold")
    a = ap.parse_args()
    switch(a) if a.switch else throughput(a)


if __name__ == "__main__":
    main()
