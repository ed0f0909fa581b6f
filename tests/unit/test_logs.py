"""Text logs escape control characters from client-supplied fields; JSON lines stay JSON."""

from __future__ import annotations

import io
import json
import logging
import re
import sys

import pytest

from azsidecar.logs import JsonLineFormatter, TextFormatter, escape_text, setup_logging


@pytest.mark.parametrize(("text", "escaped"), [
    ("plain client-1", "plain client-1"),
    ("a\nb", "a\\nb"),
    ("a\r\nFAKE 2026 ERROR x: forged", "a\\r\\nFAKE 2026 ERROR x: forged"),
    ("tab\there", "tab\\there"),
    ("\x1b[31mred", "\\x1b[31mred"),  # terminal escape sequences
    ("nul\x00", "nul\\x00"),
    ("del\x7f c1\x85", "del\\x7f c1\\x85"),
    ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
    ("unicode ok: zürich 東京", "unicode ok: zürich 東京"),
])
def test_escape_text(text, escaped):
    assert escape_text(text) == escaped


def _record(msg: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("proxy.server", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_text_format_keeps_a_forged_line_on_one_line():
    line = TextFormatter("%(levelname)s %(name)s: %(message)s").format(
        _record("closing connection: %s (client_id=%s)", "bad", "x\n2026-01-01 ERROR proxy.server: forged"))
    assert line == "WARNING proxy.server: closing connection: bad (client_id=x\\n2026-01-01 ERROR proxy.server: forged)"
    assert "\n" not in line


def test_text_format_leaves_our_own_traceback_readable():
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed for %s", "a\nb", exc_info=sys.exc_info())
    text = TextFormatter("%(message)s").format(record)
    first, *rest = text.split("\n")
    assert first == "failed for a\\nb"
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"


def test_json_format_is_one_line_with_the_raw_value():
    line = JsonLineFormatter().format(_record("client_id=%s", "x\ny"))
    assert "\n" not in line
    assert json.loads(line)["msg"] == "client_id=x\ny"


def test_the_handler_follows_sys_stderr_so_a_closed_one_is_never_written(monkeypatch):
    # A command run in-process (tests capture stderr, then close it) set up logging on the
    # stderr of its time; later records went to the closed stream ("Logging error").
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        first = io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        setup_logging("text", "INFO")
        first.close()
        second = io.StringIO()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("azsidecar.test").warning("after the first stderr closed")
        written = second.getvalue()
        assert "Logging error" not in written
        assert written.endswith("WARNING azsidecar.test: after the first stderr closed\n"), written
    finally:
        root.handlers[:], level = saved[0], saved[1]
        root.setLevel(level)


def _json_lines_of(monkeypatch, component, zone, emit) -> list[dict]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        out = io.StringIO()
        monkeypatch.setattr(sys, "stderr", out)
        setup_logging("json", "INFO", component=component, zone=zone)
        emit(logging.getLogger("leader_notify.agent.appender"))
        return [json.loads(line) for line in out.getvalue().splitlines()]
    finally:
        root.handlers[:], level = saved[0], saved[1]
        root.setLevel(level)


def test_a_json_line_carries_the_process_zone_and_component(monkeypatch):
    lines = _json_lines_of(monkeypatch, "agent", "use1-az2", lambda log: log.warning("agent started"))
    assert len(lines) == 1
    line = lines[0]
    assert (line["zone"], line["component"], line["msg"], line["level"]) == ("use1-az2", "agent", "agent started",
                                                                             "WARNING")
    assert "topic" not in line and "partition" not in line  # not known to this call


def test_a_json_line_carries_topic_and_partition_when_the_call_knows_them(monkeypatch):
    lines = _json_lines_of(monkeypatch, "agent", "use1-az2", lambda log: log.info(
        "append %s-%d: error %d", "orders", 7, 6, extra={"topic": "orders", "partition": 7}))
    assert [(x["msg"], x["zone"], x["component"], x["topic"], x["partition"]) for x in lines] == [
        ("append orders-7: error 6", "use1-az2", "agent", "orders", 7)]


def test_a_json_line_says_null_for_a_zone_not_known_yet(monkeypatch):
    # The proxy logs before asking instance metadata for its zone; the keys are there all the same.
    lines = _json_lines_of(monkeypatch, "proxy", None, lambda log: log.info("asking instance metadata"))
    assert (lines[0]["zone"], lines[0]["component"]) == (None, "proxy")


def test_every_runner_sets_its_component_where_it_sets_up_logging():
    # The composition root names the component once per process; library code never does.
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "azsidecar"
    for runner, component in (("run_proxy.py", "proxy"), ("run_agent.py", "agent"), ("run_gc.py", "gc"),
                              ("run_recover.py", "recover")):
        calls = re.findall(r"setup_logging\(([^)]*)\)", (root / runner).read_text(), re.S)
        assert calls, runner
        assert all(f'component="{component}"' in call and "zone=" in call for call in calls), (runner, calls)
