"""The proxy's zone from IMDSv2, against a small metadata server on loopback."""

from __future__ import annotations

import http.server
import threading

import pytest

from router.placement import ZoneUnknown, resolve_zone, zone_from_imds


class _Imds(http.server.BaseHTTPRequestHandler):
    token = "tok-123"

    def do_PUT(self):  # noqa: N802 - http.server's naming
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            self._answer(200, self.token)
        else:
            self._answer(400, "")

    def do_GET(self):  # noqa: N802
        if self.headers.get("X-aws-ec2-metadata-token") != self.token:
            self._answer(401, "")  # IMDSv2: no token, no answer
        elif self.path == "/latest/meta-data/placement/availability-zone-id":
            self._answer(200, "use1-az4\n")
        else:
            self._answer(404, "")

    def _answer(self, code: int, body: str) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def imds():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_zone_id_comes_from_imdsv2_with_a_token(imds):
    assert zone_from_imds(imds) == "use1-az4"


def test_configured_zone_wins_without_asking(imds):
    assert resolve_zone("use1-az1", "http://127.0.0.1:9") == "use1-az1"


def test_no_zone_and_no_metadata_is_a_clear_refusal():
    with pytest.raises(ZoneUnknown, match="pass --zone"):
        resolve_zone(None, "http://127.0.0.1:9")
