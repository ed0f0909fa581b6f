"""The configuration reference in docs/configuration.md, generated from the config dataclasses.

Strategy: each key is described once, in the code, next to its field: the `#:` comment
lines right above the field (Sphinx's attribute-comment convention, for a description
longer than a line) and the field's trailing comment, joined. Plain `#` lines above a field
are notes for developers and stay out. The reference is the part of docs/configuration.md
between the GENERATED markers; the prose around it is written by hand.
`azsidecar config docs` prints the reference, `--write FILE` replaces that part of FILE,
`--check FILE` exits 1 if it differs (tests/unit/azsidecar/test_config_docs.py does the same).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import sys
import textwrap
import tokenize
import typing
from pathlib import Path

from azsidecar.commands import add_config_docs_arguments
from azsidecar.config import Config

BEGIN = "<!-- generated:config-reference begin (azsidecar config docs --write docs/configuration.md) -->"
END = "<!-- generated:config-reference end -->"
REGENERATE = "azsidecar config docs --write docs/configuration.md"  # or: python -m azsidecar.config_docs --write ...


class MarkersMissing(ValueError):
    """The document has no (or a broken) pair of GENERATED markers."""


@functools.cache  # the source does not change while the process runs
def descriptions(cls: type) -> dict[str, str]:
    """Field name -> its description: the `#:` lines right above it and its trailing comment."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}  # line -> the comment token on it
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string
    lines = source.splitlines()
    out = {}
    body = typing.cast(ast.ClassDef, ast.parse(source).body[0]).body
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#:"):
            above.insert(0, lines[line - 1].strip()[2:].strip())
            line -= 1
        trailing = [comments[n].lstrip("#").lstrip(":").strip() for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                    if n in comments and not lines[n - 1].strip().startswith("#")]
        out[node.target.id] = " ".join(part for part in (*above, *trailing) if part)
    return out


def _type_name(hint: typing.Any) -> str:
    return (hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")).replace(" | ", " or ")


def _toml(value: object) -> str:
    """A default as it is written in the TOML file (None, which TOML cannot say, as None)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _default(f: dataclasses.Field[typing.Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return _toml(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _toml(f.default_factory())
    return ""


def _markdown_cell(text: str) -> str:
    """`text` in a table cell: `|` escaped, and `<` outside code spans (`<bucket>` is not an HTML tag)."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def _sections(cls: type, prefix: str, level: int) -> list[tuple[str, type, int]]:
    """(key prefix, dataclass, heading level) of `cls` and, depth first, of its nested sections."""
    out = [(prefix, cls, level)]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _sections(hints[f.name], f"{prefix}{f.name}.", min(level + 1, 3))
    return out


def undescribed() -> list[str]:
    """Keys with no description in the code (there should be none)."""
    missing = []
    for prefix, cls, _ in _sections(Config, "", 1):
        hints, described = typing.get_type_hints(cls), descriptions(cls)
        missing += [prefix + f.name for f in dataclasses.fields(cls)
                    if not dataclasses.is_dataclass(hints[f.name]) and not described.get(f.name)]
    return missing


def render() -> str:
    """The reference: one table per section, every key with its type, default and description."""
    lines = []
    for prefix, cls, level in _sections(Config, "", 1):
        if not prefix:
            lines += ["### Top level", ""]
        elif level == 2:
            lines += [f"### [{prefix[:-1]}]  (`{cls.__module__}.{cls.__name__}`)", ""]
        else:
            lines += [f"#### [{prefix[:-1]}]", ""]
        hints, described = typing.get_type_hints(cls), descriptions(cls)
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                continue
            meaning = _markdown_cell(described.get(f.name, ""))
            lines.append(f"| `{prefix}{f.name}` | {_type_name(hints[f.name])} | `{_default(f)}` | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def generated_part(document: str) -> str:
    """What is between the markers of `document`. Raises MarkersMissing."""
    head, begin, rest = document.partition(BEGIN + "\n")
    inner, end, _ = rest.partition(END)
    if not begin or not end:
        raise MarkersMissing(f"no {BEGIN!r} ... {END!r} pair")
    return inner


def with_reference(document: str, reference: str) -> str:
    """`document` with the part between its markers replaced by `reference`. Raises MarkersMissing."""
    inner = generated_part(document)
    head = document.partition(BEGIN + "\n")[0]
    tail = document.partition(BEGIN + "\n")[2][len(inner):]
    return f"{head}{BEGIN}\n{reference}{tail}"


def main(argv: list[str] | None = None) -> int:
    """`python -m azsidecar.config_docs [--write FILE | --check FILE]`, as `azsidecar config docs`."""
    parser = argparse.ArgumentParser(prog="python -m azsidecar.config_docs", description=main.__doc__)
    add_config_docs_arguments(parser)
    return run(parser.parse_args(argv), sys.stdout, sys.stderr)


def run(args: argparse.Namespace, out: typing.TextIO, err: typing.TextIO) -> int:
    """Print the reference to `out`, or rewrite (--write) or check (--check) a document's copy.
    Exit code: 0 done or current; 1 not current, or a key without description; 2 no such
    file, or no markers in it."""
    reference = render()
    missing = undescribed()
    if missing:
        err.write(f"azsidecar config docs: keys without a description in the code: {', '.join(missing)}\n")
        return 1
    path = args.write or args.check
    if path is None:
        out.write(reference)
        return 0
    try:
        document = Path(path).read_text()
        current = generated_part(document)
    except (OSError, MarkersMissing) as exc:
        err.write(f"azsidecar config docs: {path}: {exc}\n")
        return 2
    if args.check:
        if current != reference:
            err.write(f"azsidecar config docs: {path} is not current; run: {REGENERATE}\n")
            return 1
        return 0
    Path(path).write_text(with_reference(document, reference))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
