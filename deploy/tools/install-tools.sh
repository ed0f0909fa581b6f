#!/usr/bin/env bash
# Installs the chart and alert checkers the deploy tests use into .tools/bin (gitignored):
# helm (helm lint / helm template of deploy/helm/azsidecar) and promtool (promtool check rules /
# test rules of the alerting rules), both built from their Go modules with `go install`
# (Go >= 1.24). Idempotent: a tool already at the pinned version is kept.
#
#   deploy/tools/install-tools.sh            # then: tests/integration/deploy/test_helm_chart.py, test_alert_rules.py
#
# Building takes a few minutes per tool on two cores (the Kubernetes client libraries). A helm
# built this way defaults to Kubernetes v1.20 (release builds stamp a current version): pass
# --kube-version to helm template / lint, as tests/integration/deploy/test_helm_chart.py does.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"            # helm.sh/helm/v3
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # github.com/prometheus/prometheus (Prometheus 3.16)

root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$root/.tools/bin"
mkdir -p "$bin"

have() {  # have TOOL VERSION-TEXT: the tool is there and reports that version
  [[ -x "$bin/$1" ]] && "$bin/$1" version 2>/dev/null | grep -q -- "$2"
}

if have helm "${HELM_VERSION}"; then
  echo "helm ${HELM_VERSION}: $bin/helm (installed)"
else
  GOBIN="$bin" go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
  echo "helm ${HELM_VERSION}: $bin/helm"
fi

if [[ -x "$bin/promtool" ]]; then
  echo "promtool: $bin/promtool (installed)"
else
  GOBIN="$bin" go install "github.com/prometheus/prometheus/cmd/promtool@${PROMETHEUS_VERSION}"
  echo "promtool ${PROMETHEUS_VERSION}: $bin/promtool"
fi
