"""The container image (Dockerfile at the repository root), without Docker.

Docker is not available here, so:
- the Dockerfile is parsed (dockerfile-parse) and held to the image rules: pinned slim
  base, multi-stage, the final stage installs only the wheels of the build stage (no
  compiler, no index), runs as uid 10001, `azsidecar` as entry point, a HEALTHCHECK on the
  readiness endpoint;
- the HEALTHCHECK command itself runs against a real HTTP server on loopback;
- the wheel is built and installed into a fresh venv as the image's stages do, and the
  installed `azsidecar` answers `--version` and every subcommand's `--help`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import tomllib
import venv
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from azsidecar.commands import RUNNERS
from deploy.local.mock_cluster import start_mock_cluster
from deploy.local.processes import stop_process, wait_for_port
from tests.integration.deploy._hcl import ROOT

DOCKERFILE = ROOT / "Dockerfile"
PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?$")
BUILD_TOOLS = re.compile(r"\b(build-essential|gcc|g\+\+|clang|make|cmake|cc|libc6-dev|python3-dev|rustc|cargo)\b")
SUBCOMMANDS = {"proxy", "proxy-user", "agent", "gc", "recover", "audit", "demo", "plan", "status", "config"}
PIP_TIMEOUT_S = 300  # uv, from its cache and the configured indexes
CLI_TIMEOUT_S = 60


def stages() -> list[list[dict]]:
    """The Dockerfile's instructions, split at each FROM (comments dropped)."""
    out: list[list[dict]] = []
    for instruction in DockerfileParser(str(DOCKERFILE)).structure:
        if instruction["instruction"] == "FROM":
            out.append([])
        if instruction["instruction"] != "COMMENT" and out:
            out[-1].append(instruction)
    return out


def values(stage: list[dict], name: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == name]


def healthcheck_argv() -> list[str]:
    (value,) = values(stages()[-1], "HEALTHCHECK")
    options, _, command = value.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options and "--start-period=" in options
    return json.loads(command)


def test_both_stages_start_from_the_pinned_slim_base():
    parser = DockerfileParser(str(DOCKERFILE))
    assert parser.is_multistage and len(stages()) == 2
    assert all(PINNED_BASE.match(image) for image in parser.parent_images), parser.parent_images
    assert values(stages()[0], "FROM")[0].endswith("AS build") and values(stages()[1], "FROM")[0].endswith("AS runtime")


def test_final_stage_has_no_build_tools_and_installs_only_the_built_wheels():
    build, runtime = stages()
    assert any(BUILD_TOOLS.search(run) for run in values(build, "RUN"))  # the rule below can see them
    for run in values(runtime, "RUN"):
        assert not BUILD_TOOLS.search(run), run
        assert "apt-get install" not in run, run
    assert values(runtime, "COPY") == [] and values(runtime, "ADD") == []  # nothing of the source tree
    (install,) = [r for r in values(runtime, "RUN") if "pip install" in r]
    assert "--mount=type=bind,from=build,source=/wheels" in install
    assert "--no-index --find-links /wheels azsidecar" in install and "--no-cache-dir" in install
    (wheels,) = [r for r in values(build, "RUN") if "pip wheel" in r]
    assert "pip wheel --no-deps --wheel-dir /wheels ." in wheels
    # the dependencies: the locked versions, hash-checked
    assert "pip wheel --require-hashes --no-deps --wheel-dir /wheels -r requirements.lock" in wheels


def test_the_base_image_is_pinned_by_digest_and_the_lock_covers_the_dependencies():
    parser = DockerfileParser(str(DOCKERFILE))
    assert all("@sha256:" in image for image in parser.parent_images), parser.parent_images
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {line.split("==")[0].lower() for line in lock.splitlines() if "==" in line and not line.startswith(" ")}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in declared}
    assert names <= pinned, names - pinned
    hashed = [block for block in lock.split("\n") if "==" in block and not block.startswith(" ")]
    assert all(line.rstrip().endswith("\\") for line in hashed)  # every pin is followed by its hashes


def test_build_stage_copies_every_package_the_wheel_contains():
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {v.split()[0] for v in values(stages()[0], "COPY")}
    assert copied == {p.rstrip("*") for p in packages} | {"pyproject.toml"}
    assert "requirements.lock" in values(stages()[0], "COPY")[0]  # with pyproject.toml and README.md
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests", "**/__pycache__"} <= set(ignored)
    assert not {p.rstrip("*") for p in packages} & set(ignored)


def test_runs_as_uid_10001_with_the_azsidecar_entry_point():
    runtime = stages()[-1]
    names = [i["instruction"] for i in runtime]
    assert values(runtime, "USER") == ["10001:10001"]  # numeric: Kubernetes runAsNonRoot can check it
    assert names.index("USER") > max(i for i, n in enumerate(names) if n == "RUN")  # nothing runs as root after
    assert values(runtime, "ENTRYPOINT") == ['["azsidecar"]']
    assert "useradd --system --uid 10001 --gid 10001" in " ".join(values(runtime, "RUN"))
    manifests = " ".join(p.read_text() for p in (ROOT / "deploy" / "kubernetes").glob("*.yaml"))
    assert "runAsUser: 10001" in manifests and "runAsGroup: 10001" in manifests  # the same user


def test_healthcheck_asks_the_liveness_endpoint_on_the_status_port_the_image_turns_on():
    argv = healthcheck_argv()
    assert argv[:2] == ["python", "-c"]
    assert "http://127.0.0.1:%s/livez" in argv[2] and "METRICS_PORT" in argv[2]
    envs = DockerfileParser(str(DOCKERFILE)).envs
    # the status port is on by default in the image, where the healthcheck looks for it
    assert envs["METRICS_PORT"] == envs["AZSIDECAR__PROXY__METRICS_PORT"] == envs["AZSIDECAR__AGENT__METRICS_PORT"] \
        == "9464"


def test_a_proxy_with_only_the_images_defaults_is_healthy(tmp_path):
    """The image's environment (status port variables) and a minimal configuration: the
    HEALTHCHECK command passes against the real proxy (it used to probe a port that is off)."""
    envs = DockerfileParser(str(DOCKERFILE)).envs
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    image_env = {k: (str(port) if v == envs["METRICS_PORT"] else v) for k, v in envs.items()}
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(start_mock_cluster(1, log_dir=tmp_path))  # the proxy needs a broker to start
        env = {**os.environ, **image_env, "AZSIDECAR__ZONE": "use1-az1",
               "AZSIDECAR__UPSTREAM__BOOTSTRAP_SERVERS": ",".join(cluster.bootstraps)}
        log = tmp_path / "proxy.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "azsidecar", "proxy", "--listen", "127.0.0.1:0"], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        stack.callback(stop_process, proc)

        wait_for_port("127.0.0.1", port, proc, 60, "azsidecar proxy status port", log)
        done = subprocess.run([sys.executable, *healthcheck_argv()[1:]], env=env, capture_output=True, text=True,
                              timeout=CLI_TIMEOUT_S, check=False)
        assert done.returncode == 0, done.stderr + log.read_text()


class _Readiness(BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).paths.append(self.path)
        self.send_response(self.status if self.path == "/livez" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"live": true}' if self.status == 200 else b'{"live": false}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("status,healthy", [(200, True), (503, False)])
def test_healthcheck_command_passes_only_on_a_200_from_livez(status, healthy):
    handler = type("Handler", (_Readiness,), {"status": status, "paths": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        argv = [sys.executable, *healthcheck_argv()[1:]]
        env = {**os.environ, "METRICS_PORT": str(server.server_address[1])}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(CLI_TIMEOUT_S)
    assert (done.returncode == 0) is healthy, done.stderr
    assert handler.paths == ["/livez"]


def test_healthcheck_command_fails_when_nothing_listens():
    with socket.socket() as s:  # a port that was free a moment ago and is closed now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, *healthcheck_argv()[1:]]
    done = subprocess.run(argv, env={**os.environ, "METRICS_PORT": str(port)}, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, check=False)
    assert done.returncode != 0 and "Connection refused" in done.stderr


def test_the_subcommands_are_the_ones_the_image_test_runs():
    assert set(RUNNERS) == SUBCOMMANDS


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with only the built wheel and its declared dependencies (the image's stage 2)."""
    tmp = tmp_path_factory.mktemp("image")
    wheels = tmp / "wheels"
    # uv (which `make setup` installs the suite with) builds and installs as the image's pip
    # does, from the cache setup filled: pip had no cache on a fresh machine and downloaded
    # every dependency again (84 s of a CI run's setup here).
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.fail(f"uv installs the test environment (Makefile) but {uv} is missing")
    # Stage 1: the project's wheel, built as the Dockerfile builds it (isolated build, pyproject's backend).
    subprocess.run([str(uv), "build", "--quiet", "--wheel", "--out-dir", str(wheels), str(ROOT)],
                   check=True, timeout=PIP_TIMEOUT_S, capture_output=True)
    (wheel,) = wheels.glob("azsidecar-*.whl")
    # Stage 2: a clean interpreter environment, the wheel and what it declares, nothing else.
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    subprocess.run([str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python",
                    str(env_dir / "bin" / "python"), str(wheel)], check=True, timeout=PIP_TIMEOUT_S, capture_output=True)
    return env_dir


def _run(env_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)


@pytest.mark.slow
def test_installed_wheel_answers_version_and_every_subcommands_help(installed, tmp_path):
    exe = str(installed / "bin" / "azsidecar")
    done = _run(installed, exe, "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "azsidecar 0.1.0"), done.stderr
    for command in sorted(SUBCOMMANDS):
        done = _run(installed, exe, command, "--help", cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.startswith(f"usage: azsidecar {command}"), (command, done.stdout[:200])


@pytest.mark.slow
def test_installed_wheel_runs_from_site_packages_and_can_load_the_runners_it_ships(installed, tmp_path):
    python = str(installed / "bin" / "python")
    code = ("import proxy, core.msk_iam, azsidecar.run_proxy, azsidecar.run_agent, azsidecar.run_gc, "
            "azsidecar.run_recover; print(proxy.__file__)")
    done = _run(installed, python, "-c", code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(installed / "lib"))  # the wheel, not this source tree
    done = _run(installed, python, "-c", "import pyspark", cwd=tmp_path)
    assert done.returncode != 0  # the image leaves Spark out: audits run on a Spark cluster
