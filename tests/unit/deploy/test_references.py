"""A stand-in for `terraform validate` (no terraform binary here): every var., local.,
module., data. and resource reference in deploy/terraform names something declared, and
every module call passes only declared variables and all required ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.deploy._hcl import EXAMPLE, MODULES, attr, parse, resources, variables

DIRS = sorted([p for p in MODULES.iterdir() if p.is_dir()]) + [EXAMPLE]
META_ARGUMENTS = {"source", "for_each", "providers", "depends_on", "__start_line__", "__end_line__"}


def _code(directory: Path) -> str:
    """All .tf text of a directory without comments (a '#' starts one outside strings we use)."""
    text = "\n".join(p.read_text() for p in sorted(directory.glob("*.tf")))
    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in text.splitlines())


def _locals(directory: Path) -> set[str]:
    names = set()
    for path in directory.glob("*.tf"):
        for block in parse(path).get("locals", []):
            names |= {k for k in block if not k.startswith("__")}
    return names


def _outputs(directory: Path) -> set[str]:
    names = set()
    for path in directory.glob("*.tf"):
        for entry in parse(path).get("output", []):
            names |= set(entry)
    return names


def _module_calls(directory: Path) -> dict[str, dict]:
    calls = {}
    for path in directory.glob("*.tf"):
        for entry in parse(path).get("module", []):
            calls.update(entry)
    return calls


@pytest.mark.parametrize("directory", DIRS, ids=lambda p: p.name)
def test_every_reference_names_something_declared(directory):
    code = _code(directory)
    declared_vars = set(variables(directory))
    used_vars = set(re.findall(r"\bvar\.(\w+)", code))
    assert used_vars - declared_vars == set(), "undeclared variables"
    assert declared_vars - used_vars == set(), "variables never used"
    assert set(re.findall(r"\blocal\.(\w+)", code)) - _locals(directory) == set(), "undefined locals"

    declared_resources = {f"{t}.{n}" for t, n in resources(directory)}
    used_resources = {f"{t}.{n}" for t, n in re.findall(r"(?<![\w.])(aws_\w+)\.(\w+)", code)}
    assert used_resources - declared_resources == set(), "undeclared resources"
    declared_data = {f"{t}.{n}" for t, n in resources(directory, "data")}
    used_data = {f"{t}.{n}" for t, n in re.findall(r"\bdata\.(\w+)\.(\w+)", code)}
    assert used_data - declared_data == set(), "undeclared data sources"

    calls = _module_calls(directory)
    for name, output in re.findall(r"\bmodule\.(\w+)(?:\[[^\]]+\])?\.(\w+)", code):
        assert name in calls, f"module {name} not called here"
        source = (directory / attr(calls[name], "source")).resolve()
        assert output in _outputs(source), f"module {name} has no output {output}"


@pytest.mark.parametrize("directory", DIRS, ids=lambda p: p.name)
def test_module_calls_pass_declared_and_required_variables(directory):
    for name, body in _module_calls(directory).items():
        source = (directory / attr(body, "source")).resolve()
        module_vars = variables(source)
        passed = set(body) - META_ARGUMENTS
        assert passed - set(module_vars) == set(), f"module {name}: unknown arguments"
        required = {v for v, b in module_vars.items() if "default" not in b}
        assert required - passed == set(), f"module {name}: missing required arguments"


def test_the_reference_scan_sees_references():
    # Guard against a regex that silently matches nothing.
    code = _code(EXAMPLE)
    assert "aws_msk_cluster.this" in {f"{t}.{n}" for t, n in re.findall(r"(?<![\w.])(aws_\w+)\.(\w+)", code)}
    assert ("agents", "agent_endpoints") in re.findall(r"\bmodule\.(\w+)(?:\[[^\]]+\])?\.(\w+)", code)
