#!/usr/bin/env bash
# Installs the chart and alert checkers the deploy tests use into .tools/bin (gitignored):
# helm (helm lint / helm template of deploy/helm/azsidecar) and promtool (promtool check rules /
# test rules of the alerting rules). `make setup` runs it.
#
#   deploy/tools/install-tools.sh            # then: tests/integration/deploy/test_helm_chart.py, test_alert_rules.py
#
# promtool: the one on PATH if there is one (Debian's `prometheus` package, which `make setup`
# installs as root), else built from its Go module. helm: built from its Go module with
# `go install` (Go >= 1.24; helm publishes no package this machine kind's registries serve).
# Builds are kept per version in $AZSIDECAR_TOOLS_CACHE (default ~/.cache/azsidecar/tools), so
# a fresh clone links the binary instead of building it again; the first build takes minutes
# on two cores (the Kubernetes client libraries). A helm built this way defaults to
# Kubernetes v1.20 (release builds stamp a current version): pass --kube-version to helm
# template / lint, as tests/integration/deploy/test_helm_chart.py does. Without Go it says so
# and exits 0: the tests that need a missing tool skip, naming it.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"            # helm.sh/helm/v3
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # github.com/prometheus/prometheus (Prometheus 3.16)

root="$(cd "$(dirname "$0")/../.." && pwd)"
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

install_go_tool helm "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" "helm-${HELM_VERSION}"

if command -v promtool >/dev/null 2>&1; then
  rm -f "$bin/promtool"  # PATH's promtool serves
  echo "promtool: $(command -v promtool)"
else
  install_go_tool promtool "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_VERSION}" "promtool-${PROMETHEUS_VERSION}"
fi
