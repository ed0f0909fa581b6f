"""checkov finds no failed check in deploy/ (Terraform and the Kubernetes manifests); every
skip is inline (a `#checkov:skip` comment or a `checkov.io/skip` annotation), has a reason
and is listed in docs/deploy.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.deploy._hcl import ROOT, TERRAFORM, tf_files

CHECKOV_TIMEOUT_S = 240  # ~15 s alone on this machine; generous for a loaded 2-core box
DOCS = ROOT / "docs" / "deploy.md"
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
SKIP_RE = re.compile(r"#checkov:skip=(CKV2?_AWS_\d+):(.*)$", re.MULTILINE)
ANNOTATION_SKIP_RE = re.compile(r"^(CKV2?_K8S_\d+)=(.*)$")
DOC_SKIP_RE = re.compile(r"\|\s*`(CKV2?_(?:AWS|K8S)_\d+)`\s*\|")


def _checkov() -> Path:
    exe = Path(sys.executable).parent / "checkov"
    if not exe.exists():
        pytest.fail(f"checkov is a test dependency (pyproject [test]) but {exe} is missing")
    return exe


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("checkov")
    env = {**os.environ, "LOG_LEVEL": "ERROR"}
    proc = subprocess.run(
        [str(_checkov()), "-d", str(DEPLOY), "--framework", "terraform", "kubernetes", "--skip-download",
         "--compact", "-o", "json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=CHECKOV_TIMEOUT_S, check=False)
    # Exit code 1 means failed checks; the JSON says which. Anything else is a crash.
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    by_type = {r["check_type"]: r for r in reports}
    assert set(by_type) == {"terraform", "kubernetes"}, list(by_type)
    return by_type


def _inline_skips() -> list[tuple[Path, str, str]]:
    out = []
    for path in tf_files():
        for check_id, reason in SKIP_RE.findall(path.read_text()):
            out.append((path, check_id, reason.strip()))
    for path in sorted(KUBERNETES.glob("*.yaml")):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                for key, value in ((doc or {}).get("metadata", {}).get("annotations") or {}).items():
                    if key.startswith("checkov.io/skip"):
                        m = ANNOTATION_SKIP_RE.match(value)
                        assert m, f"{path}: {key}: {value!r} is not ID=reason"
                        out.append((path, m.group(1), m.group(2).strip()))
    return out


def test_no_failed_checks_and_no_parsing_errors(scan):
    for check_type, report in scan.items():
        summary = report["summary"]
        failed = [(c["check_id"], c["resource"], c["file_path"]) for c in report["results"].get("failed_checks", [])]
        assert failed == [], check_type
        assert summary["failed"] == 0 and summary["parsing_errors"] == 0, check_type
    # The files were really scanned, modules included.
    assert scan["terraform"]["summary"]["passed"] >= 200 and scan["terraform"]["summary"]["resource_count"] >= 50
    assert scan["kubernetes"]["summary"]["resource_count"] >= 5


def test_every_skip_is_inline_with_a_reason_and_documented(scan):
    skips = _inline_skips()
    assert skips, "expected the documented skips"
    for path, check_id, reason in skips:
        assert len(reason) >= 20, f"{path}: {check_id} needs a real reason"
    skipped_ids = {c["check_id"] for report in scan.values() for c in report["results"].get("skipped_checks", [])}
    assert skipped_ids == {check_id for _, check_id, _ in skips}
    documented = set(DOC_SKIP_RE.findall(DOCS.read_text()))
    assert skipped_ids == documented
    assert not (TERRAFORM / ".checkov.yaml").exists() and not (TERRAFORM / ".checkov.yml").exists()
