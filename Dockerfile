# syntax=docker/dockerfile:1
# azsidecar container image: the `azsidecar` command (proxy, agent, gc, recover, ...).
#
# Stage 1 builds the azsidecar wheel and a wheel for every dependency (a compiler is
# there for any dependency without a binary wheel for this platform). Stage 2 installs
# those wheels, offline, into a clean image of the same pinned base: no compiler, no
# pip cache, no source tree; it runs as an unprivileged user (uid 10001, as the
# Kubernetes example's securityContext expects) with `azsidecar` as its entry point.
#
#   docker build -t azsidecar:0.1.0 .            (docs/deploy.md: build, scan and push)
#   docker run --rm azsidecar:0.1.0 --version
#
# The image has no pyspark: `azsidecar audit` runs on a Spark cluster (docs/deploy.md).

# The base image by digest (the multi-platform index of python:3.11.13-slim-bookworm): a tag is
# rebuilt upstream and would change under the same name. To move to a newer base:
#   docker buildx imagetools inspect python:3.11.X-slim-bookworm   (the "Digest:" line)
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY core ./core
COPY azsidecar ./azsidecar
COPY proxy ./proxy
COPY router ./router
COPY wal_s3 ./wal_s3
COPY leader_notify ./leader_notify
COPY kafka_protocol ./kafka_protocol
COPY kafka_upstream ./kafka_upstream
COPY planner ./planner
COPY spark_audit ./spark_audit
COPY leader_placement ./leader_placement
COPY deploy ./deploy
# The project's wheel first (no dependencies), then wheels of exactly the locked versions of
# what it depends on, each checked against its hash (requirements.lock: deploy/tools/lock.sh).
RUN pip wheel --no-deps --wheel-dir /wheels . \
    && pip wheel --require-hashes --no-deps --wheel-dir /wheels -r requirements.lock

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="azsidecar" \
      org.opencontainers.image.description="AZ-aware Kafka producer proxy: cross-zone payload goes through S3" \
      org.opencontainers.image.licenses="Apache-2.0"
# The status port (/livez, /readyz, /metrics) is on by default in this image, on 9464 for the
# proxy and the agent (loopback for the proxy unless proxy.metrics_host says otherwise; the
# agent's follows agent.listen_host), so the HEALTHCHECK below has something to ask. These are
# configuration variables: they win over the config file, so move the port with them (and
# METRICS_PORT, which the HEALTHCHECK reads), or set them to 0 to turn the port off.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AZSIDECAR__PROXY__METRICS_PORT=9464 \
    AZSIDECAR__AGENT__METRICS_PORT=9464 \
    METRICS_PORT=9464
RUN groupadd --system --gid 10001 azsidecar \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin azsidecar
# Offline from the wheels of stage 1 only: what was built and scanned is what runs.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels azsidecar \
    && azsidecar --version
USER 10001:10001
WORKDIR /tmp
# Healthy = the liveness endpoint on the status port answers 200 (the event loop turns).
# Liveness, not readiness: a proxy without its WAL path or upstream is not helped by a
# restart; orchestrators that route traffic ask /readyz themselves (deploy/helm).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('METRICS_PORT', '9464'), timeout=4)"]
ENTRYPOINT ["azsidecar"]
CMD ["--help"]
