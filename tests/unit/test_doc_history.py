"""The docs speak to users: no trace of how the project was built.

docs/*.md and README.md may not name the project's internal notes (`../shared`,
`shared/ARCHITECTURE`), a work session, or a tracker issue ("issue 37", "issue #37", "#37").
What they may name, explicitly:
- upstream pull requests, as `<upstream> PR #N` with the project named (UPSTREAM);
- a session of a named technology: a paragraph that says "session" also names whose it is
  (SESSION_OWNERS: a Spark session, an S3 Express CreateSession session, a SASL or IAM login's
  session, a KRaft broker's session, pytest's test session, the notification handshake's).
Reads files only.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]

INTERNAL_PATHS = ("../shared", "shared/ARCHITECTURE")
# Upstream projects whose pull requests a page may cite by number.
UPSTREAM = ("confluentinc/librdkafka", "dpkp/kafka-python", "apache/kafka", "librdkafka", "kafka-python")
UPSTREAM_PR = re.compile(r"(?:" + "|".join(re.escape(u) for u in UPSTREAM) + r")\s+PR\s+#\d+")
TRACKER_NUMBER = re.compile(r"\bissues?\s+#?\d+|#\d+\b", re.I)
# "session" as a word of its own: not CreateSession, SparkSession, session_lifetime_ms,
# broker.session.timeout.ms or x-amz-s3session-token, which name a technology themselves.
SESSION_WORD = re.compile(r"(?<![\w.`-])sessions?(?![\w`-]|\.\w)", re.I)
SESSION_OWNERS = re.compile(r"Spark|CreateSession|S3 Express|\bExpress\b|SASL|\bIAM\b|token|KRaft|broker|pytest|"
                            r"test session|handshake|challenge|listener", re.I)
PARAGRAPH = re.compile(r"\n\s*\n")


def problems(text: str) -> list[str]:
    """What in `text` (a page) tells of the project's history rather than of the product."""
    found = [f"names {p!r}" for p in INTERNAL_PATHS if p in text]
    flat = " ".join(text.split())  # a citation may break across lines
    found += [f"a tracker number: {m.group(0)!r}" for m in TRACKER_NUMBER.finditer(UPSTREAM_PR.sub("", flat))]
    for paragraph in PARAGRAPH.split(text):
        if SESSION_WORD.search(paragraph) and not SESSION_OWNERS.search(paragraph):
            found.append(f"a session of no named technology: {' '.join(paragraph.split())[:120]!r}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_tells_nothing_of_how_the_project_was_built(page):
    assert problems(page.read_text()) == []


@pytest.mark.parametrize(("text", "expected"), [
    ("See ../shared/STYLE.md.", ["names '../shared'"]),
    ("As in shared/ARCHITECTURE.md.", ["names 'shared/ARCHITECTURE'"]),
    ("Fixed in issue 37.", ["a tracker number: 'issue 37'"]),
    ("Fixed in issue #37.", ["a tracker number: 'issue #37'"]),
    ("See Issues 12 and 13.", ["a tracker number: 'Issues 12'"]),
    ("Done (#41).", ["a tracker number: '#41'"]),
    ("Measured in the previous session.", ["a session of no named technology: 'Measured in the previous session.'"]),
    ("A later session\nrewrote it.", ["a session of no named technology: 'A later session rewrote it.'"]),
    ("our own PR #12", ["a tracker number: '#12'"]),  # an unnamed project's PR is not upstream
])
def test_history_is_found(text, expected):
    assert problems(text) == expected


@pytest.mark.parametrize("text", [
    "Upstream: confluentinc/librdkafka PR #4989 (open).",
    "dpkp/kafka-python\nPR #2841 (merged 2026-04) lifts this.",  # broken across lines
    "records the next waits for its answer (librdkafka PR #4989, open);",
    "one `local[*]` Spark session started once",
    "a CreateSession session, renewed in its last minute",
    "KRaft fences the node after the broker session timeout",
    "`broker.session.timeout.ms`, `session_lifetime_ms`, SparkSession, x-amz-s3session-token",
    "## 3. Routing\n\n[pilot](routing.md#pilot-and-measure-first)",
])
def test_upstream_references_and_named_sessions_pass(text):
    assert problems(text) == []
