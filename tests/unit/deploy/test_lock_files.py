"""The lock files pin versions pyproject.toml allows.

`make demo` and `make setup` install with requirements-dev.lock as constraints and the image
from requirements.lock (Makefile, Dockerfile): a pin outside a range of pyproject.toml makes
that install fail ("No solution found"), so a dependency changed in pyproject.toml without
`deploy/tools/lock.sh` is caught here rather than on a fresh machine.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)


def pins(lock: str) -> dict[str, list[Version]]:
    """Package -> its pinned versions (one per environment marker: numpy has two)."""
    out: dict[str, list[Version]] = {}
    for name, version in PIN_RE.findall(lock):
        out.setdefault(canonicalize_name(name), []).append(Version(version))
    return out


def requirements(project: dict, extras: tuple[str, ...]) -> list[Requirement]:
    """The dependencies, with those of `extras` and of the extras they name (azsidecar[demo])."""
    found = [Requirement(r) for r in project["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == canonicalize_name(project["name"]):
                todo.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def out_of_range(lock: str, wanted: list[Requirement]) -> list[str]:
    pinned = pins(lock)
    problems = []
    for requirement in wanted:
        versions = pinned.get(canonicalize_name(requirement.name))
        if not versions:
            problems.append(f"{requirement.name}: not in the lock")
        problems += [f"{requirement.name}=={v} outside {requirement.specifier}" for v in versions or []
                     if not requirement.specifier.contains(v, prereleases=True)]
    return problems


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize(("lock", "extras"), [("requirements.lock", ()), ("requirements-dev.lock", ("test",))])
def test_every_pin_is_in_the_range_pyproject_allows(lock, extras):
    assert out_of_range((ROOT / lock).read_text(), requirements(PROJECT, extras)) == [], \
        "regenerate the lock files: deploy/tools/lock.sh"


def test_a_pin_outside_a_range_or_a_missing_package_is_reported():
    lock = "boto3==1.35.49 \\\n    --hash=sha256:ab\nnumpy==2.4.6 ; python_full_version < '3.12' \\\n"
    wanted = [Requirement("boto3>=1.36"), Requirement("numpy>=2"), Requirement("trio>=0.25")]
    assert out_of_range(lock, wanted) == ["boto3==1.35.49 outside >=1.36", "trio: not in the lock"]


def test_the_test_extra_reaches_the_demos_packages_through_azsidecar_demo():
    names = {canonicalize_name(r.name) for r in requirements(PROJECT, ("test",))}
    assert {"pyspark", "moto", "confluent-kafka", "pytest", "boto3"} <= names
    assert "azsidecar" not in names
