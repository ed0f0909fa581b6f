"""The producers' progress file (bench/workload.py), which the campaigns poll while it changes."""

from __future__ import annotations

import json

from bench.workload import write_progress


def test_progress_is_replaced_whole_never_rewritten_in_place(tmp_path):
    path = tmp_path / "p.progress"
    write_progress(path, {"acked": 10, "sent": 12})
    first = path.stat().st_ino
    with path.open() as reader:  # a poller that opened the file just before the next write
        write_progress(path, {"acked": 4570, "sent": 4600})
        # the old file stays whole for that reader; a rewrite in place would have truncated it
        assert json.loads(reader.read()) == {"acked": 10, "sent": 12}
    assert path.stat().st_ino != first
    assert json.loads(path.read_text()) == {"acked": 4570, "sent": 4600}
    assert [p.name for p in tmp_path.iterdir()] == ["p.progress"]  # no partial file left
