"""TEST DOUBLE of Grafana's annotation HTTP API (the lab cannot run Grafana): POST /api/annotations
as Grafana's legacy HTTP API documents it (grafana.com/docs/grafana/latest/developer-resources/api-reference/
http-api/api-legacy/annotations/): a Bearer token (a service account token), JSON with `text`
required and `time`/`timeEnd` in epoch milliseconds, `tags` a list of strings, `dashboardUID`
optional; 200 {"message": "Annotation added", "id": N}; 401 {"message": "Unauthorized"} without the
token; 400 {"message": "bad request data"} on a body it cannot take. It records every request it
receives (method, path, headers, body) so a test can check what was sent. Loopback only."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Grafana:
    def __init__(self, token: str) -> None:
        self.token, self.received, self.annotations = token, [], []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                pass

            def reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.received.append({"path": self.path, "headers": dict(self.headers), "body": raw.decode("utf-8", "replace")})
                if self.path != "/api/annotations":
                    return self.reply(404, {"message": "Not found"})
                if self.headers.get("Authorization") != "Bearer " + outer.token:
                    return self.reply(401, {"message": "Unauthorized"})
                try:
                    body = json.loads(raw)
                    assert isinstance(body.get("text"), str) and body["text"]
                    assert all(isinstance(body.get(k, 0), int) for k in ("time", "timeEnd"))
                    assert all(isinstance(t, str) for t in body.get("tags", []))
                except (ValueError, AssertionError):
                    return self.reply(400, {"message": "bad request data"})
                outer.annotations.append(body)
                return self.reply(200, {"message": "Annotation added", "id": len(outer.annotations)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
