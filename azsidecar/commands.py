"""The subcommands' arguments: what `azsidecar --help` shows, and which module runs each.

Only argparse lives here, so `azsidecar --help` and a mistyped flag stay instant: the
module that runs a subcommand (`RUNNERS`) is imported once it is chosen, and it imports
the components it wires (trio, aiokafka, boto3, pyspark) at its top.

A flag's value is checked where it is parsed: a flag that sets a config key is checked by
the config (the same message as the TOML key gets, exit code 2); any other flag has an
argparse `type` below, so a bad value is a usage error (exit code 2), never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from spark_audit.cli import add_job_arguments

if TYPE_CHECKING:
    # What add_subparsers returns (argparse has no public name for it): generic in typeshed
    # only, so named for the checker alone.
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]  # noqa: SLF001

_N = TypeVar("_N", int, float)

# deploy.local.kafka_jars.SUPPORTED_VERSIONS, named here so `azsidecar --help` imports no
# local-environment code (a test keeps the two equal).
SUPPORTED_KAFKA_VERSIONS = ("4.4.0", "3.9.1")

HMAC_ENV = "AZSIDECAR_NOTIFY_HMAC_KEYS"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # azsidecar.config.Config.log_level accepts the same

# subcommand -> "module:function" taking the parsed arguments and returning the exit code
RUNNERS = {
    "proxy": "azsidecar.run_proxy:main",
    "proxy-user": "azsidecar.run_proxy:user_main",
    "agent": "azsidecar.run_agent:main",
    "gc": "azsidecar.run_gc:main",
    "recover": "azsidecar.run_recover:main",
    "audit": "azsidecar.run_audit:main",
    "demo": "azsidecar.demo:main",
    "plan": "azsidecar.run_plan:main",
    "status": "azsidecar.run_status:main",
    "config": "azsidecar.run_config:main",
}


def log_level(text: str) -> str:
    """--log-level: one of LOG_LEVELS, any case (as the config's log_level)."""
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_LEVELS)}")
    return text.upper()


def port(text: str) -> int:
    """A TCP port, 0..65535."""
    value = _number(text, int, "an integer")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0..65535)")
    return value


def at_least(minimum: int) -> Callable[[str], int]:
    """An integer >= `minimum`."""
    def check(text: str) -> int:
        value = _number(text, int, "an integer")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value
    return check


def positive(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float, "a number")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


def not_negative(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float, "a number")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
    return value


def hostname(text: str) -> str:
    """A host name or address: not empty, no spaces, slashes or control characters."""
    if not text or any(c.isspace() or c in "/?#@" or ord(c) < 32 for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or address")
    return text


def name(text: str) -> str:
    """A non-empty name without control characters (user names)."""
    if not text.strip() or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{text!r}: a non-empty name without control characters")
    return text


def _number(text: str, kind: Callable[[str], _N], what: str) -> _N:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags every long-running subcommand shares."""
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--zone", help="this host's availability zone id, e.g. use1-az1")
    add_log_arguments(parser)


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-format", choices=("text", "json"), default=None,
                        help="stderr log format (default text)")
    parser.add_argument("--log-level", type=log_level, default=None, help="DEBUG, INFO, WARNING or ERROR")


def register_all(sub: Subparsers) -> None:
    _proxy(sub)
    _proxy_user(sub)
    _agent(sub)
    _gc(sub)
    _recover(sub)
    _audit(sub)
    _demo(sub)
    _plan(sub)
    _status(sub)
    _config(sub)


def _proxy(sub: Subparsers) -> None:
    p = sub.add_parser("proxy", help="run the sidecar proxy (Kafka listener for local producers)",
                       description="Serve unmodified Kafka producers on localhost and route their "
                                   "batches to the upstream cluster, through S3 across zones.")
    add_common_arguments(p)
    p.add_argument("--listen", metavar="HOST:PORT", help="client listener (default 127.0.0.1:9092)")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="upstream Kafka cluster")
    p.add_argument("--proxy-id", help="this sidecar's id in WAL keys and audit records")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port (0 = off)")
    p.add_argument("--hmac-key-file", metavar="FILE",
                   help=f"notification HMAC keys, one per line, mode 600 (else notify.hmac_key_file, ${HMAC_ENV})")


def _proxy_user(sub: Subparsers) -> None:
    u = sub.add_parser("proxy-user", help="print a users-file entry for the proxy's SASL listener",
                       description="Read a password from stdin and print the SCRAM keys (salted, never "
                                   "the password) to append to proxy.sasl_users_file.")
    u.add_argument("username", type=name)
    u.add_argument("--mechanism", action="append", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="repeatable; default both (PLAIN logins check against the stored keys)")
    u.add_argument("--iterations", type=int, default=8192, help="PBKDF2 iterations, 4096..16384 (default 8192)")


def _agent(sub: Subparsers) -> None:
    p = sub.add_parser("agent", help="run the zone agent (S3 -> partition leader appends)",
                       description="Serve notifications from proxies in other zones: read this zone's "
                                   "share of each WAL object from S3 and append the raw batches.")
    add_common_arguments(p)
    p.add_argument("--listen", metavar="HOST:PORT", help="notification listener (default 127.0.0.1:9400)")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="this zone's Kafka cluster")
    p.add_argument("--hmac-key-file", metavar="FILE", help=f"HMAC keys, one per line (else ${HMAC_ENV})")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port (0 = off)")


def _gc(sub: Subparsers) -> None:
    p = sub.add_parser("gc", help="delete applied WAL objects and old orphans",
                       description="Delete WAL objects every zone has applied; report orphans and "
                                   "delete them after --max-orphan-age-s, except those holding "
                                   "unapplied entries of router.ack_modes 'wal' topics (held).")
    p.add_argument("--config", metavar="FILE", help="TOML configuration file ([wal] section)")
    p.add_argument("--bucket", help="WAL bucket (overrides wal.bucket)")
    p.add_argument("--region", help="the WAL bucket's AWS region (overrides wal.region)")
    p.add_argument("--endpoint-url", help="S3 endpoint URL (overrides wal.endpoint_url)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one pass, then exit")
    when.add_argument("--interval-s", type=float,
                      help="seconds between passes (overrides wal.gc_interval_s)")
    p.add_argument("--max-orphan-age-s", type=float,
                   help="delete orphans older than this (overrides wal.max_orphan_age_s)")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    p.add_argument("--metrics-port", type=int,
                   help="when looping, serve Prometheus /metrics on this port (overrides wal.gc_metrics_port; 0 = off)")
    add_log_arguments(p)


RECOVER_DESCRIPTION = (
    "Deliver acknowledged (ack_mode wal) WAL entries that no agent applied. A proxy does this itself when it "
    "restarts; run this when that proxy will not come back, or for objects `azsidecar gc` reports as HELD. "
    "It re-sends, in order, every unapplied zone share of the writer's objects (all epochs) that holds an "
    "entry of a topic with router.ack_modes 'wal', then prints what it did. Exit code 0 when everything was "
    "delivered, 1 when something is still unapplied.")


def _recover(sub: Subparsers) -> None:
    p = sub.add_parser("recover", help="deliver acknowledged WAL entries no agent applied",
                       description=RECOVER_DESCRIPTION)
    p.add_argument("--config", metavar="FILE", help="the proxy's TOML configuration ([wal], [notify], [router])")
    p.add_argument("--writer-id", help="whose objects (default: proxy.proxy_id of the configuration)")
    p.add_argument("--zone", help="the writer's zone (default: zone of the configuration)")
    p.add_argument("--hmac-key-file", metavar="FILE", help=f"HMAC keys, one per line (else ${HMAC_ENV})")
    add_log_arguments(p)


def _audit(sub: Subparsers) -> None:
    p = sub.add_parser("audit", help="Spark jobs over the audit records: savings, cache, latency, report")
    add_job_arguments(p)
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--log-level", type=log_level, default=None, help="DEBUG, INFO, WARNING or ERROR")


def _demo(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="run the local three-zone system: baseline vs sidecar, audited",
                       description="The local three-zone system end to end, baseline against sidecar.")
    p.add_argument("--mb", type=positive, default=200.0, help="payload per run in MB (default 200)")
    p.add_argument("--record-bytes", type=at_least(32), default=1000, help="record value size, >= 32 (default 1000)")
    p.add_argument("--policy", choices=("wal", "cost", "direct"), default="wal",
                   help="router policy of the sidecar run (default wal: every cross-zone batch via S3)")
    p.add_argument("--mode", choices=("auto", "netns", "loopback"), default="auto",
                   help="netns (root: metered bridge) or loopback (unmetered); auto picks netns when root")
    p.add_argument("--offloads", choices=("on", "off"), default="on",
                   help="segmentation/receive offloads of the metered links (netns): off carries 1,500-byte "
                        "packets with their own headers and ACKs, as a real network does (needs ethtool)")
    p.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                   help="kafka (default): a three-node Apache Kafka cluster, one node per zone with its rack, "
                        "leaders placed by the brokers; tansu: one Tansu broker per zone, lighter")
    p.add_argument("--kafka-version", choices=SUPPORTED_KAFKA_VERSIONS, default=SUPPORTED_KAFKA_VERSIONS[0],
                   help="Apache Kafka version of the local cluster (default %(default)s)")
    p.add_argument("--out", default="demo-out", help="directory for logs, audit records and the report")
    p.add_argument("--skip-audit", action="store_true", help="do not run the Spark audit")
    fleet = p.add_argument_group("fleet (--fleet): many small producers and a few heavy ones, "
                                 "per-host sidecars vs one gateway per zone (router policy: --policy)")
    fleet.add_argument("--fleet", action="store_true", help="run the fleet demo instead (deploy/local/fleet.py)")
    fleet.add_argument("--small-per-zone", type=at_least(0), default=3, help="small producers per zone (default 3)")
    fleet.add_argument("--small-kbps", type=positive, default=200.0, help="KB/s of each small producer (default 200)")
    fleet.add_argument("--heavy", type=at_least(0), default=2, help="heavy producers (default 2)")
    fleet.add_argument("--heavy-mbps", type=positive, default=1.0, help="MB/s of each heavy producer (default 1)")
    fleet.add_argument("--duration-s", type=positive, default=15.0, help="seconds each run produces (default 15)")


def _plan(sub: Subparsers) -> None:
    p = sub.add_parser("plan", help="predict the monthly bill: direct vs per-host sidecars vs zone gateways",
                       description="Read a traffic profile (bytes per second per producer host and leader zone) "
                                   "and prices; print the predicted monthly transfer bill, S3 request bill and net "
                                   "savings of direct produce, one sidecar per host and one gateway per zone, and "
                                   "each host's break-even rate (model: planner/plan.py, docs/planner.md).")
    # required, but checked by run_plan: argparse would demand it of `plan leaders` too
    source = p.add_mutually_exclusive_group()
    source.add_argument("--profile", metavar="CSV",
                        help="columns host,zone,leader_zone,bytes_per_s[,batches_per_s][,requests_per_s], "
                             "one row per host and leader zone")
    source.add_argument("--from-audit", metavar="DIR", help="a run's audit records (gzip JSON lines under DIR)")
    p.add_argument("--compare", action="store_true",
                   help="the audited figures of a run (--from-audit, or --audited with --profile) beside the "
                        "prediction for the run's window")
    p.add_argument("--audited", metavar="DIR",
                   help="with --profile --compare: the audit records of the run the profile describes")
    p.add_argument("--compare-mode", choices=("sidecar", "gateway"), default="sidecar",
                   help="which predicted mode --compare sets against the audit (default sidecar: one writer "
                        "per proxy id, the run's own mode with --from-audit)")
    p.add_argument("--wal-latency-ms", type=float, default=None,
                   help="closed-loop producers: rows without requests_per_s send --in-flight requests per this "
                        "latency through the WAL path (linger + PUT + notification + append); default: each "
                        "batch arrives on its own")
    p.add_argument("--in-flight", type=int, default=1,
                   help="requests a producer keeps outstanding per leader zone with --wal-latency-ms (default 1)")
    p.add_argument("--prices", metavar="FILE", help="prices TOML, as `azsidecar audit --prices` (default list prices)")
    p.add_argument("--policy", choices=("cost", "wal"), default="cost", help="router policy (default cost)")
    p.add_argument("--linger-ms", type=int, default=250, help="wal.linger_ms (default 250)")
    p.add_argument("--max-bytes", type=int, default=8 * 1024 * 1024, help="wal.max_bytes (default 8 MiB)")
    p.add_argument("--checkpoint-interval-ms", type=int, default=1000, help="agent.checkpoint_interval_ms (default 1000)")
    p.add_argument("--agents-per-zone", type=int, default=1, help="agents per zone (default 1)")
    p.add_argument("--writers-per-zone", type=int, default=1,
                   help="gateway instances x proxy.workers per zone, each its own WAL writer (default 1)")
    p.add_argument("--batch-bytes", type=at_least(1), default=16384,
                   help="mean partition batch size for CSV rows without batches_per_s (default 16384)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    forms = p.add_subparsers(dest="plan_command", metavar="leaders", required=False,
                             title="other plans (`azsidecar plan leaders --help`)")
    _plan_leaders(forms)


def _plan_leaders(forms: Subparsers) -> None:
    p = forms.add_parser("leaders", help="move partition leaders to the zone their produce bytes come from",
                         description="Read a window's produce audit records (produce_batch or produce_summary: bytes per partition and producer "
                                     "zone) and the cluster's placement (Admin API); print which leaders to move to "
                                     "another in-sync replica and what that saves; write the reassignment file "
                                     "kafka-reassign-partitions reads and the plan file --apply --plan carries out "
                                     "exactly. Dry run unless --apply (docs/leader-placement.md).")
    p.set_defaults(runner="azsidecar.run_plan_leaders:main")
    p.add_argument("--from-audit", metavar="DIR",
                   help="audit records (gzip JSON lines under DIR); required unless --apply --plan")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                   help="the Kafka cluster (overrides upstream.bootstrap_servers of --config)")
    p.add_argument("--config", metavar="FILE",
                   help="the proxy's TOML configuration: its [upstream] TLS and SASL settings are used")
    p.add_argument("--topic", action="append", metavar="NAME", help="plan only this topic (repeatable; default: "
                                                                    "every topic in the audit)")
    p.add_argument("--apply", action="store_true", help="carry the moves out (default: dry run, change nothing)")
    p.add_argument("--plan", metavar="FILE", help="with --apply: carry out exactly this saved plan (a dry run's "
                                                  "--plan-out), refusing partitions the cluster no longer shows as "
                                                  "the plan saw them; the audit is not planned on")
    p.add_argument("--plan-out", metavar="FILE", default="leader-plan.json",
                   help="where to write the plan: each move with the leader and replica order it saw "
                        "(default %(default)s)")
    p.add_argument("--audit-out", metavar="DIR|s3://BUCKET/PREFIX",
                   help="where --apply writes a leader_move audit record per verified move (default: the "
                        "--from-audit DIR, which the next run reads to report placements undone)")
    p.add_argument("--batch-size", type=at_least(1), default=5, help="partitions moved together (default 5)")
    p.add_argument("--throttle-s", type=not_negative, default=10.0, help="pause between batches (default 10)")
    p.add_argument("--timeout-s", type=positive, default=120.0,
                   help="longest wait for a batch's reassignment, and for its election (default 120)")
    p.add_argument("--max-moves", type=at_least(0), default=50, help="moves per run (default 50)")
    p.add_argument("--min-saving-bytes", type=at_least(1), default=1_000_000,
                   help="a move must save at least this many cross-zone bytes over the audited window (default 1000000)")
    p.add_argument("--min-saving-usd", type=not_negative, default=0.0,
                   help="a move must save at least this many USD over the audited window (default 0)")
    p.add_argument("--skew", type=at_least(0), default=1,
                   help="a broker may lead at most ceil(partitions / brokers) + SKEW of the planned topics' "
                        "partitions (default 1)")
    p.add_argument("--prices", metavar="FILE", help="prices TOML, as `azsidecar audit --prices` (default list prices)")
    p.add_argument("--storage-class", choices=("standard", "express"), default="standard",
                   help="the WAL's S3 storage class, for the audited WAL route's cost (default standard)")
    p.add_argument("--out", metavar="FILE", default="leader-reassignment.json",
                   help="where to write the reassignment JSON (default %(default)s)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def _status(sub: Subparsers) -> None:
    p = sub.add_parser("status", help="ask a running proxy or agent whether it is live or ready (probes, scripts)",
                       description="GET /livez or /readyz on a status port (proxy.metrics_port, agent.metrics_port); "
                                   "prints the answer; exit code 0 when live/ready, 1 otherwise.")
    p.add_argument("--host", type=hostname, default="127.0.0.1", help="where the status port listens (default 127.0.0.1)")
    p.add_argument("--port", type=port, required=True, help="the status port")
    p.add_argument("--check", choices=("live", "ready"), default="ready", help="which endpoint (default ready)")
    p.add_argument("--wait-s", type=not_negative, default=0.0,
                   help="keep asking once a second until the answer is yes or this many seconds passed (default: once)")


def _config(sub: Subparsers) -> None:
    p = sub.add_parser("config", help="check a config file, or print the effective config with each value's origin",
                       description="Load the config as `azsidecar proxy` and `agent` do (the file, then the "
                                   "AZSIDECAR__SECTION__KEY environment variables) without starting anything or "
                                   "reading a secret.")
    actions = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    for action, text in (("validate", "print one line: OK, or the first error (exit code 2)"),
                         ("show", "print the effective config as TOML; after each value, where it came from "
                                  "(default, file or the variable); secrets redacted")):
        a = actions.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        a.add_argument("--config", metavar="FILE", help="TOML configuration file (default: none, the defaults)")
    text = ("print the configuration reference (every key, its type, default and meaning) generated from the "
            "code; --write rewrites it in a document, --check says whether the document's copy is current")
    add_config_docs_arguments(actions.add_parser("docs", help=text, description=text[0].upper() + text[1:] + "."))


def add_config_docs_arguments(parser: argparse.ArgumentParser) -> None:
    """`azsidecar config docs` (and `python -m azsidecar.config_docs`)."""
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--write", metavar="FILE",
                     help="replace the generated part of FILE (docs/configuration.md), between its markers")
    how.add_argument("--check", metavar="FILE",
                     help="exit 1 if the generated part of FILE differs from the code's descriptions")
