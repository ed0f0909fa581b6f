"""docs/configuration.md's reference is what the code describes: generated, current, every
key described; and the generator's rule for a description, on a small dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import io
from pathlib import Path

from azsidecar import config_docs
from azsidecar.config_docs import BEGIN, END, REGENERATE, descriptions, generated_part, render, undescribed

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_the_reference_in_docs_configuration_md_is_current():
    assert generated_part(DOC.read_text()) == render(), (
        f"docs/configuration.md's reference differs from the code's descriptions; regenerate it: {REGENERATE}")


def test_every_key_is_described_in_the_code():
    assert undescribed() == [], "describe these keys next to their field (a trailing comment, or #: lines above)"


def test_the_reference_lists_every_key_of_every_section_once():
    reference = render()
    for key in ("zone", "proxy.listen_port", "upstream.bootstrap_servers", "router.prices.s3_put_per_1000",
                "wal.bucket", "notify.pipeline_depth", "agent.event_loop", "audit.spool_dir", "quotas.produce_bytes_per_s"):
        assert reference.count(f"| `{key}` |") == 1, key
    assert "\n#### [router.prices]\n" in reference and "\n### [authz]  (`proxy.config.AuthzConfig`)\n" in reference
    # defaults as the TOML file writes them
    assert "| `proxy.bypass_same_zone` | bool | `false` |" in reference
    assert '| `router.wal_topics` | tuple[str, ...] | `["*"]` |' in reference
    assert '| `agent.event_loop` | str | `"uvloop"` |' in reference
    assert "| `wal.retry_max_ms` | int | `2000` | the longest backoff between PUT retries |" in reference


@dataclasses.dataclass(frozen=True)
class Example:
    # a note for developers: not part of the description
    plain: int = 1  # a trailing comment
    #: the first line of a longer description,
    #: and its second line
    longer: str = "#not a comment"
    both: float = 2.0  # said here only
    #: above
    above_and_trailing: int = 3  # and trailing
    undescribed: int = 4
    # a note, then a blank line

    spaced: int = 5  #: a trailing doc comment


def test_a_description_is_the_doc_lines_above_and_the_trailing_comment():
    assert descriptions(Example) == {
        "plain": "a trailing comment",
        "longer": "the first line of a longer description, and its second line",
        "both": "said here only",
        "above_and_trailing": "above and trailing",
        "undescribed": "",
        "spaced": "a trailing doc comment",
    }


def _run(tmp_path: Path, text: str, **how: str | None) -> tuple[int, str, str, Path]:
    path = tmp_path / "configuration.md"
    path.write_text(text)
    args = argparse.Namespace(**{"write": None, "check": None, **{k: str(path) for k in how}})
    out, err = io.StringIO(), io.StringIO()
    code = config_docs.run(args, out, err)
    return code, out.getvalue(), err.getvalue(), path


def test_check_fails_on_a_stale_reference_and_names_the_command(tmp_path):
    stale = f"# Title\n\nprose\n\n{BEGIN}\n| `zone` | old |\n{END}\n\nmore prose\n"
    code, _, err, _ = _run(tmp_path, stale, check="")
    assert code == 1
    assert "azsidecar config docs --write docs/configuration.md" in err


def test_write_replaces_only_the_generated_part_and_keeps_the_prose(tmp_path):
    stale = f"# Title\n\nprose\n\n{BEGIN}\n| `zone` | old |\n{END}\n\nmore prose\n"
    code, _, _, path = _run(tmp_path, stale, write="")
    assert code == 0
    assert path.read_text() == f"# Title\n\nprose\n\n{BEGIN}\n{render()}{END}\n\nmore prose\n"
    assert _run(tmp_path, path.read_text(), check="")[0] == 0


def test_a_document_without_markers_is_refused_not_rewritten(tmp_path):
    code, _, err, path = _run(tmp_path, "# just prose\n", write="")
    assert code == 2 and "generated:config-reference" in err
    assert path.read_text() == "# just prose\n"
