#!/usr/bin/env bash
# Regenerates the lock files from pyproject.toml, with every artefact's sha256 (pip installs
# them with --require-hashes), for Python 3.11 on every platform (one universal resolution:
# the image is built for amd64 and arm64):
#
#   requirements.lock       the runtime dependencies (the container image installs these)
#   requirements-dev.lock   .[test]: the demo (local, spark) and the tests
#
# Run after changing dependencies in pyproject.toml, and to take newer releases
# (`--upgrade` is passed on: deploy/tools/lock.sh --upgrade). Needs uv
# (pip install uv); pip-tools' pip-compile --generate-hashes makes equivalent files.
set -euo pipefail
cd "$(dirname "$0")/../.."
UV="${UV:-uv}"
common=(--universal --python-version 3.11 --generate-hashes --custom-compile-command "deploy/tools/lock.sh" "$@")
"$UV" pip compile pyproject.toml "${common[@]}" -o requirements.lock
"$UV" pip compile pyproject.toml --extra test "${common[@]}" -o requirements-dev.lock
