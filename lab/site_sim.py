#!/usr/bin/env python3
"""The site around an inference server, for the lab and the GPU harness (never the product): what a
real site does to a backend whatever the cycle is doing.

  - a load balancer's health checker: GET <health path> on every server every `--health-every` s (also
    while the server is drained, paused, released, stopping or starting: a health checker never stops);
  - stray clients: a small completion ("2+2=", 1 token) straight to the server's port every
    `--request-every` s, in every phase (a client that bypasses the router, a retry, a cron job);
  - a metrics scraper: GET /metrics every `--scrape-every` s.

Each exchange is one JSON line in `--log` (t, kind, url, status or error, ms, and a completion's text),
so a test can say what the site saw. Every exchange has a timeout (`--timeout`); clients run in their
own threads, so a request held by a paused server does not stop the health checks. Ends on SIGTERM or
after `--duration` s. Standard library only: it runs on the lab hosts and on the GPU machine.

    python3 site_sim.py --url http://127.0.0.1:8080 --url http://127.0.0.1:30001 --log /tmp/site.jsonl
    python3 site_sim.py --summary /tmp/site.jsonl
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

STOP = threading.Event()
WRITE = threading.Lock()
PENDING: dict[int, dict[str, Any]] = {}  # exchanges under way: written as "unfinished" when the site stops
UNDER_WAY = threading.Lock()


def exchange(url: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    """One HTTP exchange: status and body, or the kind of error (refused, timeout, other)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    t0 = time.monotonic()
    out: dict[str, Any] = {}
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            out.update(status=resp.status, body=resp.read(65536).decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        out.update(status=exc.code, body=exc.read(4096).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        text = str(reason)
        out["error"] = "refused" if "refused" in text.lower() else "timeout" if "timed out" in text.lower() else "other"
        out["detail"] = text[:120]
    out["ms"] = round((time.monotonic() - t0) * 1000, 1)
    return out


def record(log: str, row: dict[str, Any]) -> None:
    line = json.dumps(row) + "\n"
    with WRITE, open(log, "a", encoding="utf-8") as fh:
        fh.write(line)


def client(kind: str, url: str, every: float, timeout: float, log: str) -> None:
    """One actor: its exchange every `every` s (each in its own thread: a held request holds only itself)."""
    body = {"prompt": "2+2=", "max_tokens": 1, "temperature": 0} if kind == "request" else None

    def once() -> None:
        started = time.time()
        key = threading.get_ident()
        with UNDER_WAY:
            PENDING[key] = {"t": round(started, 3), "kind": kind, "url": url, "error": "unfinished"}
        got = exchange(url, body, timeout)
        with UNDER_WAY:
            PENDING.pop(key, None)
        row = {"t": round(started, 3), "kind": kind, "url": url, **{k: v for k, v in got.items() if k != "body"}}
        if kind == "request" and got.get("status") == 200:
            try:
                row["text"] = json.loads(got["body"])["choices"][0]["text"]
            except (ValueError, KeyError, IndexError, TypeError):
                row["text"] = None
        record(log, row)

    while not STOP.is_set():
        threading.Thread(target=once, daemon=True).start()
        STOP.wait(every)


def summary(log: str) -> dict[str, Any]:
    """What the site saw: per kind, the count of each outcome (HTTP status or error kind)."""
    seen: dict[str, Counter] = {}
    texts: Counter = Counter()
    try:
        with open(log, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        rows = []
    for row in rows:
        seen.setdefault(row["kind"], Counter())[str(row.get("status") or row.get("error"))] += 1
        if row.get("text") is not None:
            texts[row["text"].strip()] += 1
    return {"total": len(rows), **{k: dict(v) for k, v in sorted(seen.items())}, "answers": dict(texts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", action="append", default=[], help="a server's base URL (repeatable)")
    ap.add_argument("--health-path", default="/health")
    ap.add_argument("--completion-path", default="/v1/completions")
    ap.add_argument("--health-every", type=float, default=2.0)
    ap.add_argument("--request-every", type=float, default=3.0)
    ap.add_argument("--scrape-every", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--duration", type=float, default=3600.0)
    ap.add_argument("--log", default="/tmp/site.jsonl")
    ap.add_argument("--summary", metavar="LOG", help="print what the site saw in LOG, and exit")
    args = ap.parse_args()
    if args.summary:
        print(json.dumps(summary(args.summary)))
        return
    if not args.url:
        ap.error("--url is required")
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    actors = []
    for url in args.url:
        base = url.rstrip("/")
        for kind, path, every in (("health", args.health_path, args.health_every),
                                  ("request", args.completion_path, args.request_every),
                                  ("scrape", "/metrics", args.scrape_every)):
            actors.append(threading.Thread(target=client, args=(kind, base + path, every, args.timeout, args.log), daemon=True))
    for actor in actors:
        actor.start()
    STOP.wait(args.duration)
    STOP.set()
    with UNDER_WAY:  # what a paused server still holds, or a hung one never answered: counted, not lost
        unfinished = list(PENDING.values())
        PENDING.clear()
    for row in unfinished:
        record(args.log, row)
    sys.exit(0)


if __name__ == "__main__":
    main()
