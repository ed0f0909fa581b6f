"""Helpers for the deploy tests: parse every .tf file once, walk blocks, render templates.

The parser is the `hcl2` module of bc-python-hcl2, which checkov depends on (python-hcl2
installs a module of the same name with another output format; it is not installed):
attribute values come wrapped in one-element lists, expressions as
"${...}" strings. `attr()` hides the wrapping.

`render_template()` implements the small subset of Terraform's template language that
deploy/terraform's .tftpl files use, so tests can render them with hand-written inputs
(there is no terraform binary here). It refuses anything outside that subset, so a
template that grows new syntax fails the tests instead of being rendered wrongly.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parents[3]
TERRAFORM = ROOT / "deploy" / "terraform"
MODULES = TERRAFORM / "modules"
EXAMPLE = TERRAFORM / "examples" / "three-az-msk"


def tf_files() -> list[Path]:
    return sorted(TERRAFORM.rglob("*.tf"))


@functools.cache
def parse(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return hcl2.load(f)


def attr(block: dict[str, Any], name: str, default: Any = None) -> Any:
    """An attribute's value without the parser's one-element list wrapping."""
    if name not in block:
        return default
    value = block[name]
    if isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


def blocks(block: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Nested blocks called `name` (always a list of dicts)."""
    value = block.get(name, [])
    return value if isinstance(value, list) else [value]


def variables(directory: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        for entry in parse(path).get("variable", []):
            out.update(entry)
    return out


def resources(directory: Path, kind: str = "resource") -> dict[tuple[str, str], dict[str, Any]]:
    """(type, name) -> body for `resource` or `data` blocks of one directory."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        for entry in parse(path).get(kind, []):
            for rtype, named in entry.items():
                for name, body in named.items():
                    out[(rtype, name)] = body
    return out


def all_blocks_of(kind: str) -> list[tuple[Path, str, str, dict[str, Any]]]:
    """(file, type, name, body) of every `resource`/`data` block in deploy/terraform."""
    out = []
    for path in tf_files():
        for entry in parse(path).get(kind, []):
            for rtype, named in entry.items():
                for name, body in named.items():
                    out.append((path, rtype, name, body))
    return out


def module_calls() -> list[tuple[Path, str, dict[str, Any]]]:
    out = []
    for path in tf_files():
        for entry in parse(path).get("module", []):
            for name, body in entry.items():
                out.append((path, name, body))
    return out


# ------------------------------------------------------------------ templates

_DIRECTIVE = re.compile(r"^%\{ (?P<body>[^}]*?) ~\}$")
_FOR = re.compile(r"^for (?P<k>\w+), (?P<v>\w+) in (?P<src>[\w.]+)$")
_IF_NOT_NULL = re.compile(r"^if (?P<src>[\w.]+) != null$")
_INTERP = re.compile(r"\$\{(?P<expr>[^}]*)\}")
_JSONENCODE = re.compile(r"^jsonencode\((?P<src>[\w.]+)\)$")


def _tf_jsonencode(value: Any) -> str:
    """Terraform's jsonencode: compact separators, and <, >, & escaped as Go's encoder does."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_BARE = re.compile(r"^(?P<src>[\w.]+)$")


class TemplateSubsetError(AssertionError):
    """The template uses syntax this test renderer does not implement."""


def _lookup(scope: dict[str, Any], dotted: str) -> Any:
    node: Any = scope
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"template refers to {dotted!r}, not in the inputs")
        node = node[part]
    return node


def _interpolate(line: str, scope: dict[str, Any]) -> str:
    def one(m: re.Match[str]) -> str:
        expr = m.group("expr")
        if jm := _JSONENCODE.match(expr):
            return _tf_jsonencode(_lookup(scope, jm.group("src")))
        if bm := _BARE.match(expr):
            value = _lookup(scope, bm.group("src"))
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise TemplateSubsetError(f"bare interpolation of a non-scalar: {expr}")
            return str(value)
        raise TemplateSubsetError(f"unsupported interpolation: ${{{expr}}}")

    if "%{" in line:
        raise TemplateSubsetError(f"directive not alone on its line: {line!r}")
    return _INTERP.sub(one, line)


def render_template(text: str, inputs: dict[str, Any]) -> str:
    """Render a .tftpl that uses only: `${jsonencode(x.y)}`, `${x.y}` (scalars), and whole-line
    `%{ if x != null ~}` / `%{ endif ~}` / `%{ for k, v in x ~}` / `%{ endfor ~}` (the `~}`
    strips the directive line's newline, as Terraform does)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []

    def run(start: int, scope: dict[str, Any], emit: bool) -> int:
        i = start
        while i < len(lines):
            stripped = lines[i].rstrip("\n")
            d = _DIRECTIVE.match(stripped)
            if d is None:
                if emit:
                    out.append(_interpolate(lines[i], scope))
                i += 1
                continue
            body = d.group("body")
            if body in ("endif", "endfor"):
                return i
            if m := _IF_NOT_NULL.match(body):
                cond = emit and _lookup(scope, m.group("src")) is not None
                end = run(i + 1, scope, cond)
                if lines[end].strip() != "%{ endif ~}":
                    raise TemplateSubsetError(f"if at line {i + 1} closed by {lines[end]!r}")
                i = end + 1
                continue
            if m := _FOR.match(body):
                source = _lookup(scope, m.group("src")) if emit else {}
                if not isinstance(source, dict):
                    raise TemplateSubsetError(f"for over a non-map at line {i + 1}")
                end = None
                # Terraform iterates maps in lexical key order.
                for key in sorted(source) or [None]:
                    inner = {**scope, m.group("k"): key, m.group("v"): source.get(key)} if key is not None else scope
                    end = run(i + 1, inner, emit and key is not None)
                if lines[end].strip() != "%{ endfor ~}":
                    raise TemplateSubsetError(f"for at line {i + 1} closed by {lines[end]!r}")
                i = end + 1
                continue
            raise TemplateSubsetError(f"unsupported directive: {stripped!r}")
        return i

    end = run(0, inputs, True)
    if end != len(lines):
        raise TemplateSubsetError(f"unmatched end directive at line {end + 1}")
    return "".join(out)
