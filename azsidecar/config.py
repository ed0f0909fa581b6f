"""The one validated configuration object, built at start-up and passed down.

Each package owns the dataclass of its section; this module composes them. Sources, in
order of precedence: command-line flags, then `AZSIDECAR__SECTION__KEY` environment
variables (azsidecar/config_layers.py has the naming rule), then a TOML file, then the
defaults. The environment is read only by the runners of `azsidecar/`, which pass it here
(secrets through `azsidecar/secrets.py`), never by library code.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from azsidecar.commands import HMAC_ENV, LOG_LEVELS
from azsidecar.config_layers import FLAGS, dotted_assignments, env_assignments, env_name, merge, origin_of_key, origins
from core.az_ids import zone_problem
from core.configload import ConfigError, build, require
from kafka_upstream.config import UpstreamConfig
from leader_notify.config import AgentConfig, NotifyConfig
from proxy.config import AuthzConfig, ProxyConfig, QuotaConfig
from router.config import RouterConfig
from spark_audit.config import AuditConfig
from wal_s3.config import WalConfig

__all__ = ["Config", "ConfigError", "load_config", "load_config_with_origins", "require_bootstrap_servers",
           "require_wal_location"]


@dataclass(frozen=True)
class Config:
    zone: str | None = None  # this process's AZ id (use1-az1); None = ask instance metadata. An AZ name (us-east-1a) is refused here and wherever a zone is named (`notify.agents`, `router.zone_brokers` keys; `router.broker_zones`, `router.partition_zones` values)
    imds_endpoint: str = "http://169.254.169.254"  # EC2 instance metadata, asked only when zone is unset
    log_format: str = "text"  # stderr log lines: "text" or "json"
    log_level: str = "INFO"  # DEBUG, INFO, WARNING or ERROR, any case
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    wal: WalConfig = field(default_factory=WalConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    authz: AuthzConfig = field(default_factory=AuthzConfig)
    quotas: QuotaConfig = field(default_factory=QuotaConfig)

    def __post_init__(self) -> None:
        if self.authz.effective_source(self.proxy) != "none":
            # Pass-through forwards consumer and admin APIs with the sidecar's identity,
            # unchecked: with authorization on the proxy serves only what it checks.
            require(self.proxy.broker_listeners is not True,
                    "proxy.broker_listeners: not with authorization (authz.source other than \"none\"): APIs "
                    "passed through to the brokers would carry the sidecar's rights, unchecked")
            if self.proxy.broker_listeners is None:
                object.__setattr__(self, "proxy", replace(self.proxy, broker_listeners=False))
        require(self.log_format in ("text", "json"), "log_format: 'text' or 'json'")
        require(self.log_level.upper() in LOG_LEVELS, "log_level: DEBUG|INFO|WARNING|ERROR")
        for key, zone in self.zone_settings():
            problem = zone_problem(zone)
            require(problem is None, f"{key}: {zone!r} {problem}")
        if self.notify.agents and not self.router.shadow:
            problem = wal_location_problem(self.wal)
            require(problem is None, f"{problem}; it is needed here because notify.agents names agents (the WAL route is on)")

    def zone_settings(self) -> list[tuple[str, str]]:
        """(key, zone) of every setting that names a zone: compared with each other and
        with the brokers' racks, so all of them are AZ ids."""
        return [*([("zone", self.zone)] if self.zone else []),
                *((f"notify.agents.{z}", z) for z in self.notify.agents),
                *((f"router.zone_brokers.{z}", z) for z in self.router.zone_brokers),
                *((f"router.broker_zones.{b}", z) for b, z in self.router.broker_zones.items()),
                *((f"router.partition_zones.{p}", z) for p, z in self.router.partition_zones.items())]


# Where records go has no default: a fixed bucket name may belong to another AWS account, and
# a region or a cluster taken by default would send records somewhere nobody chose. Each
# message names the key and the variable that sets it.
NO_BUCKET = ("must be set: there is no default bucket, since a fixed name may belong to another AWS "
             "account; name a bucket your account owns (and set wal.expected_bucket_owner to your account id)")
NO_REGION = "must be set: there is no default region; name the region of wal.bucket (e.g. us-east-1)"
NO_BOOTSTRAP = "must be set: there is no default cluster; name its brokers (host:port, e.g. b-1.msk.example:9092)"


def _unset(key: str, why: str, flag: str | None = None) -> str:
    """`key: why`, and where to set it: the file, the variable (AZSIDECAR__SECTION__KEY), the flag."""
    variable = env_name(tuple(key.split(".")))
    where = f"in the config file, as {variable} or with {flag}" if flag else f"in the config file or as {variable}"
    return f"{key}: {why}, {where}"


def wal_location_problem(wal: WalConfig) -> str | None:
    """What is missing to name where WAL objects go (wal.bucket, then wal.region), or None."""
    if not wal.bucket:
        return _unset("wal.bucket", NO_BUCKET)
    if not wal.region:
        return _unset("wal.region", NO_REGION)
    return None


def require_wal_location(config: Config, command: str) -> None:
    """Raises ConfigError if `azsidecar <command>` would use the WAL without wal.bucket or
    wal.region set (the first missing one is named)."""
    problem = wal_location_problem(config.wal)
    if problem is not None:
        flag = "--bucket" if not config.wal.bucket else "--region"
        raise ConfigError(f"{problem} (azsidecar {command} reads or deletes WAL objects; "
                          f"or give {flag} where the command has it)")


def require_bootstrap_servers(config: Config, command: str) -> None:
    """Raises ConfigError if `azsidecar <command>`, which talks to Kafka, has no upstream.bootstrap_servers."""
    if not config.upstream.bootstrap_servers:
        raise ConfigError(f"{_unset('upstream.bootstrap_servers', NO_BOOTSTRAP, '--bootstrap-servers')} "
                          f"(azsidecar {command} talks to the Kafka cluster)")


# Settings that hold a secret itself; the TOML file may name their files, never the values.
SECRET_SETTINGS = {
    ("notify", "hmac_keys"): f"notify.hmac_key_file or ${HMAC_ENV}",
    ("upstream", "sasl_password"): "upstream.sasl_password_file or $AZSIDECAR_UPSTREAM_SASL_PASSWORD",
}


def refuse_secrets_in_file(data: Mapping[str, Any], path: str) -> None:
    """Raises ConfigError if the parsed TOML `data` holds a secret's value."""
    for (section, name), instead in SECRET_SETTINGS.items():
        table = data.get(section)
        if isinstance(table, Mapping) and name in table:
            raise ConfigError(f"{section}.{name} in {path}: secrets are not read from the config file; use {instead}")


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file (if any), apply the `AZSIDECAR__...` variables of `environ` and the
    dotted-key `overrides` (flags), validate the result as one.

    Raises ConfigError with the offending key's path (and the variable, when one set it).
    """
    return load_config_with_origins(path, overrides, environ)[0]


def load_config_with_origins(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                             environ: Mapping[str, str] | None = None) -> tuple[Config, dict[str, str]]:
    """`load_config`, and where each setting's value came from (dotted key -> "default",
    "file", "command line" or the variable's name, config_layers.origins)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path}: not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
        refuse_secrets_in_file(data, str(path))
    from_env = env_assignments(environ or {})
    for a in from_env:
        for (section, name), instead in SECRET_SETTINGS.items():
            if a.path[:2] == (section, name) or (a.path == (section,) and _holds(a.value, name)):
                raise ConfigError(f"{a.origin}: {section}.{name} is a secret, not read from a variable of this "
                                  f"form; use {instead}")
    layered = from_env + dotted_assignments(overrides)
    try:
        config = build(Config, merge(data, layered))
    except ConfigError as exc:
        origin = origin_of_key(str(exc), layered)
        if origin is None or origin == FLAGS:  # a flag's message names its key as it is
            raise
        raise ConfigError(f"{exc} (set by {origin})") from exc
    return config, origins(Config, data, layered)


def _holds(table: Any, name: str) -> bool:
    return isinstance(table, Mapping) and name in table
