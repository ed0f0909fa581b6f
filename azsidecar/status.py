"""The status port: /metrics (Prometheus), /livez and /readyz (JSON saying why).

A small threaded HTTP server, as prometheus_client's own: it never runs on the event loop,
so a scrape or a probe costs the data path nothing, and /livez still answers (503) when the
loop is wedged. What it serves comes from callables that read the monitor's latest facts.
Unknown paths are 404, so a probe pointed at the wrong path fails loudly.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.metrics_core import Metric

from azsidecar.readiness import Check, ready

ChecksFn = Callable[[], Mapping[str, Check]]


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class StatusServer:
    """Serves the status port until `close()`; `port` is the bound port (0 asks the OS)."""

    def __init__(self, host: str, port: int, live: Callable[[], Check], readiness: ChecksFn,
                 registry: Collector = REGISTRY) -> None:
        status = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(status.registry))
                elif path == "/livez":
                    check = status.live()
                    self._json(200 if check.ok else 503, {"live": check.ok, "detail": check.detail})
                elif path == "/readyz":
                    checks = status.readiness()
                    body = {"ready": ready(checks),
                            "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in checks.items()}}
                    self._json(200 if body["ready"] else 503, body)
                else:
                    self._json(404, {"error": f"no such path {path!r}: /metrics, /livez or /readyz"})

            def _json(self, code: int, body: object) -> None:
                self._send(code, "application/json", json.dumps(body).encode())

            def _send(self, code: int, content_type: str, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                return None  # probes every few seconds: not worth a log line

        self.live = live
        self.readiness = readiness
        self.registry = registry
        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="status-port", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)
