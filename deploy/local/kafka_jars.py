"""Apache Kafka's jars from Maven Central, cached per version, for the local cluster.

Strategy: no tarball and no image. `deploy/local/kafka/pom.xml` lists the broker
(`kafka_2.13`), the tools and Java clients (`kafka-tools`) and a log4j2 binding for
SLF4J 1.7; Maven copies their runtime closure into `<cache>/kafka-<version>/lib`, and a
`java -cp '<lib>/*' <main class>` runs any of them. A directory is used only once a
marker file says the copy finished, so an interrupted download is fetched again, never
half used. Maven's own repository (~/.m2) makes a second version or a fresh cache cheap.

`make setup` runs `python -m deploy.local.kafka_jars fetch`; the cluster library calls
`classpath()`, which fetches on first use.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

# The newest 4.x that resolves, and the 3.x line still common on MSK.
KAFKA_VERSION = "4.4.0"
KAFKA_3_VERSION = "3.9.1"
SUPPORTED_VERSIONS = (KAFKA_VERSION, KAFKA_3_VERSION)
POM = Path(__file__).with_name("kafka") / "pom.xml"
LOG4J2_CONFIG = Path(__file__).with_name("kafka") / "log4j2.properties"
COPY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
FETCH_TIMEOUT_S = 900.0  # a cold ~/.m2 downloads ~60 MB per version
COMPLETE_MARKER = ".complete"
CACHE_ENV = "AZSIDECAR_CACHE_DIR"  # where the jars go; default ~/.cache/azsidecar


class KafkaJarsError(RuntimeError):
    """Maven is missing or could not fetch the jars (the message has Maven's output)."""


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "azsidecar"


def lib_dir(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / f"kafka-{version}" / "lib"


def fetched(version: str = KAFKA_VERSION) -> bool:
    return (lib_dir(version) / COMPLETE_MARKER).exists()


def fetch(version: str = KAFKA_VERSION, timeout_s: float = FETCH_TIMEOUT_S) -> Path:
    """The version's lib directory, fetched with Maven first if not cached.

    Raises KafkaJarsError when mvn is missing, fails or times out.
    """
    target = lib_dir(version)
    if fetched(version):
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaJarsError("Apache Kafka's jars come from Maven Central: install Maven (Debian package `maven`) "
                             "and Java 17")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="lib-", dir=target.parent))
    argv = [mvn, "-B", "-q", "-f", str(POM), COPY_PLUGIN, "-DincludeScope=runtime",
            f"-Dkafka.version={version}", f"-DoutputDirectory={staging}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise KafkaJarsError(f"mvn did not fetch Apache Kafka {version} within {timeout_s:.0f} s") from exc
    if done.returncode != 0 or not any(staging.glob(f"kafka_2.13-{version}.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise KafkaJarsError(f"mvn could not fetch Apache Kafka {version} (exit {done.returncode}):\n{tail}")
    (staging / COMPLETE_MARKER).write_text(version)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def classpath(version: str = KAFKA_VERSION) -> str:
    """`java -cp` value for the version's jars (fetching them if needed). Raises KafkaJarsError."""
    return str(fetch(version) / "*")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local.kafka_jars",
                                     description="Fetch Apache Kafka's jars from Maven Central into the cache.")
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="fetch (if not cached) and print the lib directory")
    get.add_argument("--version", action="append", choices=SUPPORTED_VERSIONS,
                     help=f"repeatable; default {KAFKA_VERSION} and {KAFKA_3_VERSION}")
    get.add_argument("--newest", action="store_true", help=f"only {KAFKA_VERSION} (what `make demo` runs)")
    get.add_argument("--no-class-archive", dest="class_archive", action="store_false",
                     help="skip the class-data sharing archive (one-node cluster start and stop, ~15 s) "
                          "that makes every later broker and tool JVM start on less CPU")
    args = parser.parse_args(argv)
    versions = args.version or ((KAFKA_VERSION,) if args.newest else SUPPORTED_VERSIONS)
    for version in versions:
        cached = fetched(version)
        try:
            path = fetch(version)
        except KafkaJarsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"Apache Kafka {version}: {path}{' (cached)' if cached else ''}")
        if args.class_archive:
            # Imported here: the cluster library imports this module.
            from deploy.local.kafka_cluster import KafkaClusterError, build_class_archive, class_archive  # noqa: PLC0415

            had = class_archive(version).exists()
            try:
                archive = build_class_archive(version)
            except KafkaClusterError as exc:  # a speed-up only: say so and go on
                print(f"warning: no class-data archive for Kafka {version}: {exc}", file=sys.stderr)
                continue
            if archive is not None:
                print(f"Apache Kafka {version} class-data archive: {archive}{' (cached)' if had else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
