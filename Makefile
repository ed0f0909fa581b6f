# Entry points: `make demo`, `make test` and `make unit` (the fast tier). Each sets up what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test unit check setup demo-setup system-packages demo-system-packages kafka-jars bytecode clean bench tools

# Python packages are installed with uv (from PyPI, into the venv): parallel downloads and
# builds, several times faster than pip on a fresh machine, where pyspark's 400 MB dominate.
$(BIN)/uv:
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv

# Bytecode is compiled at install (uv's --compile-bytecode, then compileall for whatever it
# left: a no-op install compiles nothing) and for the project's own packages (`bytecode`):
# with PYTHONDONTWRITEBYTECODE=1 in the environment (as on this machine kind) nothing else
# writes it, and every Python process recompiled what it imported. A proxy's imports took
# 2.2-3.0 CPU-s in a fresh venv against 1.15 with compiled bytecode (2026-11-29); the suite
# starts hundreds of processes. A file that does not compile could never be imported either.
COMPILE_SITE_PACKAGES = $(BIN)/python -m compileall -q -j 0 \
	$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') >/dev/null || true
# uv's cache keeps old revisions of what it built: pyspark has no wheel on PyPI, so uv builds
# it (~1.4 GB with its sources), and a CI machine that runs many fresh clones had piled up
# 55 GB of stale revisions until its disk was full (2026-11-29). `prune` drops what no current
# entry reaches in ~1 s and keeps the current build, so the next clone still reuses it.
PRUNE_UV_CACHE = $(BIN)/uv cache prune -q >/dev/null 2>&1 || true
# The demo's packages: the product, Spark for the audit, moto and Tansu, confluent-kafka.
$(DEMO_STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[demo]'
	@$(COMPILE_SITE_PACKAGES)
	@$(PRUNE_UV_CACHE)
	@touch $(DEMO_STAMP)

# Everything the suite needs besides (linters, checkov, the other clients and codecs).
$(TEST_STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[test]'
	@$(COMPILE_SITE_PACKAGES)
	@$(PRUNE_UV_CACHE)
	@touch $(TEST_STAMP) $(DEMO_STAMP)

# kcat, ethtool (the demo's links with offloads off), chromium + poppler-utils (the
# report's print check), Java and Maven (Apache Kafka), promtool (the alerting rules'
# checks; Debian's prometheus package) are Debian packages; install the missing ones when
# we can (root). The demo needs only ethtool, Java and Maven.
SYSTEM_PACKAGES := kcat:kcat ethtool:ethtool chromium:chromium pdftoppm:poppler-utils java:openjdk-17-jre-headless mvn:maven \
	promtool:prometheus
DEMO_SYSTEM_PACKAGES := ethtool:ethtool java:openjdk-17-jre-headless mvn:maven
define install_missing
	@missing=""; for pair in $(1); do \
	  command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (Debian packages)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing and not root:$$missing; what needs them will skip or fail"; fi; \
	fi
endef
system-packages:
	$(call install_missing,$(SYSTEM_PACKAGES))
demo-system-packages:
	$(call install_missing,$(DEMO_SYSTEM_PACKAGES))

# Apache Kafka's jars (the local cluster, its tools and the Java clients) from Maven Central,
# cached per version in ~/.cache/azsidecar (deploy/local/kafka_jars.py), with a class-data
# sharing archive per version (the suite starts ~40 broker JVMs: each starts on ~40 % less
# CPU). The demo needs the newest only; the suite also runs the wire tests on 3.9.
kafka-jars: $(TEST_STAMP)
	$(BIN)/python -W "ignore:::runpy" -m deploy.local.kafka_jars fetch

# The project's own modules (skips what is up to date; an edited file is recompiled by the
# next run of this, and until then Python compiles it in memory as before).
PROJECT_PACKAGES := core azsidecar proxy router wal_s3 leader_notify spark_audit deploy leader_placement \
	kafka_protocol kafka_upstream planner bench tests
bytecode: $(DEMO_STAMP)
	@$(BIN)/python -m compileall -q -j 0 $(PROJECT_PACKAGES) >/dev/null || true

setup: $(TEST_STAMP) system-packages kafka-jars bytecode

# helm for the chart tests (tests/integration/deploy/test_helm_chart.py), built from its Go
# module and kept per version in ~/.cache/azsidecar/tools (deploy/tools/install-tools.sh). Not
# part of setup: no registry this machine kind reaches serves a helm binary, and the first
# build took 45-50 min on two loaded cores (2026-11-28); without it those tests skip, naming it.
tools: system-packages
	deploy/tools/install-tools.sh

# The demo starts Kafka once: the class-data archive (one more start) would not pay for itself.
demo-setup: $(DEMO_STAMP) demo-system-packages bytecode
	$(BIN)/python -W "ignore:::runpy" -m deploy.local.kafka_jars fetch --newest --no-class-archive

# Static checks first (seconds): lint, the layer contracts, strict types on the core.
check: setup
	$(BIN)/ruff check --quiet .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# The unit tier (tests/unit): pure tests, no sockets, subprocesses or JVM (its conftest refuses
# them); stops on the first failure. Run it after every edit. `time make unit`, 2026-11-29,
# 990 tests in one process: 33-36 s of CPU with bytecode cached (39-43 s with
# PYTHONDONTWRITEBYTECODE=1); wall clock 43 s to 2 min on a 2-core host that was also running
# Kafka brokers (load 3-14).
unit: setup
	$(BIN)/python -m pytest -q -x -p no:cacheprovider tests/unit

# `make test`: the static checks, then the unit tier (stopping on its first failure), then the
# rest on TEST_WORKERS parallel workers (pytest-xdist groups, tests/conftest.py): the
# three-zone systems run one after another on one worker (they mostly wait on paced
# producers and timeouts), the tests on each Apache Kafka version share one worker and its
# cluster, and every other test file is a unit of its own.
TEST_WORKERS ?= 3
test: check
	$(MAKE) --no-print-directory unit
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/unit --durations=30 tests

demo: demo-setup
	$(BIN)/azsidecar demo

bench: setup
	@echo "see docs/benchmarks.md for the individual bench/ commands"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
