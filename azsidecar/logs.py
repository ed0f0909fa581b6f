"""Logging to stderr: human-readable text by default, JSON lines with --log-format json.

Every JSON line carries the process's `zone` and `component` (proxy, agent, gc, recover,
or the subcommand): a filter on the one handler stamps them on each record, set by the
runner (the composition root) through `setup_logging`, so library code never passes them.
A log call that knows the topic and partition it is about says so with
`extra={"topic": topic, "partition": partition}`; the JSON line then has both too.

Text format escapes control characters in the message: log arguments include what clients
send (client_id, SASL mechanism names, topic names), and a newline in one of them would
otherwise forge a whole log line. JSON lines are safe by construction (json.dumps escapes).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import TextIO

# C0 and C1 controls, DEL, and the Unicode line/paragraph separators some viewers break on.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    return f"\\x{ord(ch):02x}" if ord(ch) <= 0xFF else f"\\u{ord(ch):04x}"


def escape_text(text: str) -> str:
    """`text` with every control character written as a visible escape (\\n, \\x1b, \\u2028)."""
    return _UNSAFE.sub(_escape_char, text)


class TextFormatter(logging.Formatter):
    """The text format; the message is escaped, a traceback (our own text) is not."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape_text(record.message)
        return super().formatMessage(record)


# Record attributes a JSON line carries: the process's (ProcessContext, always, null when
# unknown) and a log call's own (`extra={"topic": ..., "partition": ...}`, when it knows them).
CONTEXT_KEYS = ("zone", "component")
OPTIONAL_KEYS = ("topic", "partition")


class ProcessContext(logging.Filter):
    """Stamps the process's zone and component on every record the handler emits (a record
    that already has one, from `extra`, keeps its own)."""

    def __init__(self, component: str | None, zone: str | None) -> None:
        super().__init__()
        self.component = component
        self.zone = zone

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "component"):
            record.component = self.component
        if not hasattr(record, "zone"):
            record.zone = self.zone
        return True


class JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            out[key] = getattr(record, key, None)
        for key in OPTIONAL_KEYS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        for key, value in getattr(record, "fields", {}).items():
            out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to `sys.stderr` as it is when a record is emitted, not when set up: a command
    run inside another program (the test suite captures and later closes its stderr) must
    not leave a handler on a closed stream behind."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:  # logging's attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:  # StreamHandler.__init__ assigns it
        pass


def setup_logging(log_format: str = "text", level: str = "INFO", *, component: str | None = None,
                  zone: str | None = None) -> None:
    """One stderr handler on the root logger, replacing any before: a runner calls this again
    once it knows more (the proxy's zone from instance metadata)."""
    handler = StderrHandler()
    handler.addFilter(ProcessContext(component, zone))
    if log_format == "json":
        handler.setFormatter(JsonLineFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if level.upper() != "DEBUG":
        # botocore says "Found credentials in ..." at INFO once per client: noise at start-up.
        logging.getLogger("botocore.credentials").setLevel(logging.WARNING)
