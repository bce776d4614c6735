#!/usr/bin/env python3
"""TEST DOUBLE of a load balancer's admin API: not a router, the part of one the cycle's hooks talk to.

It runs in its own lab container (lab/lab.py router); each lab host's bc_lb_remove / bc_lb_restore hooks
call it over the lab's network, as a site's hooks call its router's admin API:

    POST /hosts/<host>/out     take the host out of the pool (200 {"host", "state"})
    POST /hosts/<host>/in      put it back
    GET  /hosts/<host>/out     the hooks' read-back (`check`): 200 when the host is out, else 409
    GET  /hosts/<host>/in      200 when the host is in, else 409
    GET  /state                every transition and the once-a-second samples (below), and who is out now
    POST /reset                every host back in, the history cleared (between two rolls)

What the fleet test asserts comes from here, not from the controller: every transition with its time,
the most hosts out at once (exact, from the transitions), and a sample of the hosts out taken every
second by the router's own clock. A host it never heard of is in.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = re.compile(r"^/hosts/([A-Za-z0-9_.-]{1,64})/(in|out)$")


class Pool:
    """The router's pool: who is out, every transition, a sample each second."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.out: set[str] = set()
            self.events: list[dict[str, object]] = []
            self.samples: list[list[object]] = []
            self.max_out = 0
            self.max_out_hosts: list[str] = []

    def set(self, host: str, state: str) -> dict[str, object]:
        with self.lock:
            was = "out" if host in self.out else "in"
            (self.out.add if state == "out" else self.out.discard)(host)
            self.events.append({"t": time.time(), "host": host, "state": state, "was": was, "out": len(self.out)})
            if len(self.out) > self.max_out:
                self.max_out, self.max_out_hosts = len(self.out), sorted(self.out)
            return {"host": host, "state": state, "was": was}

    def is_out(self, host: str) -> bool:
        with self.lock:
            return host in self.out

    def sample(self) -> None:
        with self.lock:
            self.samples.append([round(time.time(), 3), sorted(self.out)])

    def state(self) -> dict[str, object]:
        with self.lock:
            return {"out": sorted(self.out), "max_out": self.max_out, "max_out_hosts": self.max_out_hosts,
                    "events": list(self.events), "samples": list(self.samples)}


POOL = Pool()


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: object) -> None:
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # http.server calls it by this name
        if self.path == "/state":
            self._send(200, POOL.state())
            return
        match = PATH.match(self.path)
        if not match:
            self._send(404, {"error": "no such path: " + self.path})
            return
        host, asked = match.groups()
        now = "out" if POOL.is_out(host) else "in"
        self._send(200 if now == asked else 409, {"host": host, "state": now})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path == "/reset":
            POOL.reset()
            self._send(200, {"reset": True})
            return
        match = PATH.match(self.path)
        if not match:
            self._send(404, {"error": "no such path: " + self.path})
            return
        self._send(200, POOL.set(*match.groups()))

    def log_message(self, format: str, *args: object) -> None:  # http.server's signature
        pass


def sampler(every_s: float) -> None:
    while True:
        POOL.sample()
        time.sleep(every_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--sample-every", type=float, default=1.0)
    args = parser.parse_args(argv)
    threading.Thread(target=sampler, args=(args.sample_every,), daemon=True).start()
    ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()  # the lab's own network


if __name__ == "__main__":
    main()
