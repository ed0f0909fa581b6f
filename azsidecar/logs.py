"""Logging to stderr: human-readable text by default, JSON lines with --log-format json.

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


class JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in getattr(record, "fields", {}).items():
            out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to `sys.stderr` as it is when a record is emitted, not when set up: a command
    run inside another program (the test suite captures and later closes its stderr) must
    not leave a handler on a closed stream behind."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201 - logging's attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # noqa: ANN001 - StreamHandler.__init__ assigns it
        pass


def setup_logging(log_format: str = "text", level: str = "INFO") -> None:
    handler = StderrHandler()
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
