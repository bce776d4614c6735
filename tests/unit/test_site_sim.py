"""The lab's site simulator (lab/site_sim.py) against a real local HTTP server: every actor keeps going
while one of its requests is held (a paused server), and the summary says what each saw."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASE = threading.Event()


class Server(BaseHTTPRequestHandler):
    def log_message(self, *_a: object) -> None:
        pass

    def answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.answer(503 if self.path == "/health" else 200, b"up 1\n")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        RELEASE.wait(30)  # paused: every completion is held until released
        self.answer(200, json.dumps({"choices": [{"text": "4"}]}).encode())


def test_requests_still_held_when_the_site_stops_are_counted_unfinished(tmp_path):
    RELEASE.clear()  # paused for good
    server = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log = tmp_path / "site.jsonl"
    sim = subprocess.Popen([sys.executable, str(ROOT / "lab/site_sim.py"), "--url", "http://127.0.0.1:%d" % server.server_port,
                            "--request-every", "0.2", "--health-every", "5", "--scrape-every", "5", "--timeout", "60",
                            "--log", str(log)])
    try:
        time.sleep(1.5)
    finally:
        sim.terminate()
        sim.wait(timeout=30)
        RELEASE.set()
        server.shutdown()
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    held = [r for r in rows if r["kind"] == "request"]
    assert len(held) >= 3 and all(r["error"] == "unfinished" for r in held), held


def test_health_checks_and_scrapes_go_on_while_requests_are_held(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log = tmp_path / "site.jsonl"
    sim = subprocess.Popen([sys.executable, str(ROOT / "lab/site_sim.py"), "--url", "http://127.0.0.1:%d" % server.server_port,
                            "--url", "http://127.0.0.1:9", "--health-every", "0.2", "--request-every", "0.3",
                            "--scrape-every", "0.4", "--timeout", "20", "--log", str(log)])
    RELEASE.clear()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count('"kind": "health"') < 10):
            time.sleep(0.1)
        RELEASE.set()  # generation continues: the held completions are answered
        time.sleep(1)
    finally:
        sim.terminate()
        sim.wait(timeout=30)
        server.shutdown()
    seen = json.loads(subprocess.run([sys.executable, str(ROOT / "lab/site_sim.py"), "--summary", str(log)],
                                     capture_output=True, text=True, check=True, timeout=30).stdout)
    assert seen["health"]["503"] >= 5 and seen["health"]["refused"] >= 5  # the dead port too, never stopping
    assert seen["scrape"]["200"] >= 1 and seen["request"]["200"] >= 1 and seen["answers"] == {"4": seen["request"]["200"]}
    assert sim.returncode == 0
