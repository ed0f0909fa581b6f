"""Every repository path and module the docs name exists: docs/*.md and README.md.

What counts as a name, so that S3 keys, URLs and example paths (`/etc/...`, `wal/<zone>/...`,
`modules/iam` under deploy/terraform) are left alone:
- a word in backticks, or a link target, that starts with a top-level entry of the
  repository (`proxy/server.py`, `tests/unit/router/`, `.ci/run`, `pyproject.toml`); a
  `::test_name` after a test file must be a function of that file, a `*` must match a file;
  `core/duplicates.TailSearch` is a module and a name it defines;
- a file path in prose or a code block that starts with a top-level directory and ends in
  a file type (`python bench/campaign.py`, "tests/unit/router/test_plan.py");
- a relative link (`[x](deploy.md#anchor)`, `img/x.png`), from the page's directory;
- a file name in backticks alone (`writer.py`, `_http11.py`): some file of the repository
  has that name;
- a dotted name in backticks that starts with a package (`leader_notify.agent.agent`,
  `wal_s3.format.parse_object`) or a private module (`_io.spark_session`): the modules
  exist and define the first name after them. A configuration key (`proxy.listen_port`,
  `router.prices.s3_put_per_1000`) is a name too.
Reads files only.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import typing
from pathlib import Path

from azsidecar.config import Config

REPO = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
NOT_IN_REPO = {".git", ".venv", ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "build", "__pycache__"}
NOT_A_PATH = re.compile(r"[<>{}$=|]|\.\.\.")  # templates (`wal/<zone>/`), options, elisions
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
TICKED = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FILE_NAME = re.compile(r"_?[\w-]+\.(py|md)")  # `writer.py`, `benchmarks.md`: a file of the repository
DOTTED = re.compile(r"_?[a-z][a-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?:\(\))?")


def _ignored() -> set[str]:
    """Top-level names .gitignore leaves out (`/out/`, `/demo-out/`), besides NOT_IN_REPO."""
    lines = (REPO / ".gitignore").read_text().splitlines()
    return {line.strip("/") for line in lines if line and not line.startswith("#") and "*" not in line}


TOP = {p.name for p in REPO.iterdir()} - NOT_IN_REPO - _ignored() - {p.name for p in REPO.glob("*.egg-info")}
PACKAGES = {name for name in TOP if (REPO / name / "__init__.py").is_file()}
_TOPS = "|".join(re.escape(top) for top in sorted(TOP))
IN_PROSE = re.compile(rf"(?<![\w/.`-])((?:{_TOPS})/[\w./*-]*\.(?:py|md|tf|json|yaml|toml|service|sh)(?:::\w+)?)\b")


@functools.cache
def _repo_files() -> dict[str, list[Path]]:
    """File name -> the repository's files of that name."""
    found: dict[str, list[Path]] = {}
    for top in TOP:
        for path in [REPO / top] if (REPO / top).is_file() else (REPO / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                found.setdefault(path.name, []).append(path)
    return found


@functools.cache
def _defined(module: Path) -> frozenset[str]:
    """Names a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return frozenset(names)


def _config_keys(cls: type = Config, prefix: str = "") -> set[str]:
    """`section.key` of every setting (and `section` itself), as docs/configuration.md lists them."""
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        keys.add(prefix + f.name)
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            keys |= _config_keys(hint, f"{prefix}{f.name}.")
    return keys


CONFIG_KEYS = _config_keys()


def _module_names(start: Path, parts: list[str]) -> str | None:
    """Follow `parts` from a package directory: modules, then one name the last defines.
    None if it resolves, else what is missing."""
    here = start
    for i, part in enumerate(parts):
        if here.is_dir() and (here / part).is_dir():
            here = here / part
        elif here.is_dir() and (here / f"{part}.py").is_file():
            here = here / f"{part}.py"
        else:
            module = here / "__init__.py" if here.is_dir() else here
            if module.is_file() and part in _defined(module):
                return None
            return f"{here.relative_to(REPO)} has no module or name {'.'.join(parts[i:])!r}"
    return None


def check_path(word: str) -> str | None:
    """None if `word` (a repository path, maybe with ::test or .Name) names something that exists."""
    word, _, test = word.partition("::")
    if any(c in word for c in "*?"):
        return None if list(REPO.glob(word)) else "no file matches"
    path = REPO / word
    if path.exists():
        if test:
            name = test.split("[")[0]
            if not re.search(rf"^\s*(async )?def {re.escape(name)}\(", path.read_text(), re.M):
                return f"{word} has no test {name}"
        return None
    module, _, name = word.rpartition(".")
    if module and (REPO / f"{module}.py").is_file():  # core/duplicates.TailSearch
        return None if name in _defined(REPO / f"{module}.py") else f"{module}.py defines no {name}"
    return "no such file or directory"


def check_dotted(word: str) -> str | None:
    """None if a dotted module name (or configuration key) resolves."""
    word = word.removesuffix("()")
    if word in CONFIG_KEYS:
        return None
    first, *rest = word.split(".")
    if first in PACKAGES:
        return _module_names(REPO / first, rest)
    modules = _repo_files().get(f"{first}.py", [])
    if not modules:
        return f"no module {first}.py in the repository"
    if any(rest[0] in _defined(m) for m in modules):
        return None
    return f"{first}.py defines no {rest[0]}"


def _is_repo_path(word: str) -> bool:
    return not NOT_A_PATH.search(word) and (word in TOP or word.split("/")[0] in TOP and "/" in word)


def references(page: Path) -> list[tuple[str, str | None]]:
    """(what the page names, None or what is wrong with it)."""
    found = [(word, check_path(word)) for word in IN_PROSE.findall(page.read_text())]
    text = FENCE.sub("", page.read_text())
    for span in TICKED.findall(text):
        for word in span.split():
            word = word.rstrip(".,;:)")
            if _is_repo_path(word):
                found.append((word, check_path(word)))
            elif FILE_NAME.fullmatch(word):
                found.append((word, None if word in _repo_files() else "no file of that name"))
            elif word.startswith("../"):
                found.append((word, "outside the repository"))
        if " " not in span and DOTTED.fullmatch(span) and not FILE_NAME.fullmatch(span):
            first = span.split(".")[0]
            if first in PACKAGES or first.startswith("_"):
                found.append((span, check_dotted(span)))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # URLs, mail, anchors on the same page
        path = (page.parent / target.split("#")[0]).resolve()
        inside = path.is_relative_to(REPO)
        found.append((target, None if inside and path.exists() else
                      "outside the repository" if not inside else "no such file or directory"))
    return found


def test_every_path_and_module_the_docs_name_exists():
    broken = [f"{page.relative_to(REPO)}: {word}: {problem}"
              for page in PAGES for word, problem in references(page) if problem]
    assert not broken, "\n".join(broken)


def test_the_scan_sees_paths_modules_keys_and_links():
    """The checks above must not pass by finding nothing (or by accepting anything)."""
    seen = {word for page in PAGES for word, _ in references(page)}
    assert {"deploy/local/zones.py", "leader_notify.protocol", "tests/unit/conftest.py", "proxy.listen_port",
            "writer.py"} <= seen
    assert any(word.endswith(".md") for word in seen)  # a link between pages
    assert IN_PROSE.findall("see tests/unit/router/test_plan.py, or https://x/proxy/server.py") == [
        "tests/unit/router/test_plan.py"]
    assert check_path("proxy/server.py") is None and check_path("proxy/duplicates.py")
    assert check_path("core/duplicates.TailSearch") is None and check_path("core/duplicates.Nothing")
    assert check_path("tests/unit/test_doc_paths.py::test_the_scan_sees_paths_modules_keys_and_links") is None
    assert check_path("tests/unit/test_doc_paths.py::test_nothing")
    assert check_dotted("leader_notify.agent.agent") is None and check_dotted("leader_notify.agents")
    assert check_dotted("wal_s3.format.parse_object") is None and check_dotted("wal_s3.format.parse_nothing")
    assert check_dotted("_run.running_agent")  # no such private module
    assert check_dotted("proxy.listen_port") is None  # a configuration key
    assert not _is_repo_path("/etc/azsidecar/") and not _is_repo_path("wal/<zone>/<writer_id>")
