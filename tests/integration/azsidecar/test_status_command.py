"""`azsidecar status` against a real status server on loopback: exit 0 when yes, 1 when no or
when nothing answers; --wait-s asks again until yes."""

from __future__ import annotations

import argparse

from azsidecar.readiness import Check
from azsidecar.run_status import main
from azsidecar.status import StatusServer
from deploy.local.processes import free_port


def args(port: int, check: str = "ready", wait_s: float = 0.0) -> argparse.Namespace:
    return argparse.Namespace(host="127.0.0.1", port=port, check=check, wait_s=wait_s)


def serve(ready_answers: list[bool]) -> StatusServer:
    """Readiness answers no for each False in `ready_answers`, then yes for good."""
    def checks() -> dict[str, Check]:
        ok = ready_answers.pop(0) if ready_answers else True
        return {"upstream": Check(ok, "answered" if ok else "not probed yet")}
    return StatusServer("127.0.0.1", 0, lambda: Check(True, "event loop turning"), checks)


def test_ready_and_live_exit_zero(capsys):
    server = serve([])
    try:
        assert main(args(server.port)) == 0
        assert '"ready": true' in capsys.readouterr().out
        assert main(args(server.port, "live")) == 0
    finally:
        server.close()


def test_not_ready_exits_one_with_the_reason(capsys):
    server = serve([False])
    try:
        assert main(args(server.port)) == 1
        assert "not probed yet" in capsys.readouterr().err
    finally:
        server.close()


def test_wait_asks_again_until_ready():
    server = serve([False, False])
    try:
        assert main(args(server.port, wait_s=30.0)) == 0
    finally:
        server.close()


def test_nothing_listening_exits_one(capsys):
    assert main(args(free_port())) == 1
    assert "no answer from http://127.0.0.1:" in capsys.readouterr().err
