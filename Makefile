# Two entry points: `make demo` and `make test`. Both set up what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check setup system-packages clean bench

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

# kcat is a Debian package; install it when we can (root) and it is missing.
system-packages:
	@if ! command -v kcat >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing kcat (Debian package)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; \
	  else echo "kcat missing and not root: kcat tests will fail; install kcat"; fi; \
	fi

setup: $(STAMP) system-packages

# Static checks first (seconds): lint, the layer contracts, strict types on the core.
check: setup
	$(BIN)/ruff check --quiet .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

test: check
	$(BIN)/python -m pytest -q tests

demo: setup
	$(BIN)/azsidecar demo

bench: setup
	@echo "see docs/benchmarks.md for the individual bench/ commands"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
