"""Where secrets come from, the same for every subcommand.

A secret is read from a file that only its owner can read (refused otherwise, with the
path and the mode), or from the environment; never from the TOML file (`load_config`
refuses it there, naming the setting). Where both a file and the environment are given,
the file wins. The runners call these with `os.environ`; library code reads no
environment. Secrets never appear in a repr (their fields are `repr=False`), a log line or
a metric.

| secret | file (setting or flag) | environment |
|---|---|---|
| notification HMAC keys | `notify.hmac_key_file`, `--hmac-key-file` (one per line) | `AZSIDECAR_NOTIFY_HMAC_KEYS` (comma-separated) |
| upstream SASL password | `upstream.sasl_password_file` (first line) | `AZSIDECAR_UPSTREAM_SASL_PASSWORD` |
| listener TLS key, SASL users | `proxy.tls_key_file`, `proxy.sasl_users_file` | - |
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from azsidecar.commands import HMAC_ENV
from azsidecar.config import Config
from core.configload import ConfigError
from core.tls import UPSTREAM_PASSWORD_ENV, check_private, upstream_sasl_password


def secret_sources(config: Config, environ: Mapping[str, str]) -> dict[str, str | None]:
    """Dotted key of each secret -> where it would be read from (its file setting, else the
    variable, when set), or None; reads neither (`azsidecar config show`)."""
    hmac_file, sasl_file = config.notify.hmac_key_file, config.upstream.sasl_password_file
    return {
        "notify.hmac_keys": ("from notify.hmac_key_file" if hmac_file
                             else f"${HMAC_ENV}" if environ.get(HMAC_ENV, "").strip() else None),
        "upstream.sasl_password": ("from upstream.sasl_password_file" if sasl_file
                                   else f"${UPSTREAM_PASSWORD_ENV}" if environ.get(UPSTREAM_PASSWORD_ENV) else None),
    }


def resolve_secrets(config: Config, environ: Mapping[str, str], hmac_key_file: str | None = None) -> Config:
    """`config` with the notification keys and the upstream SASL password filled in.

    `hmac_key_file` (the --hmac-key-file flag) wins over `notify.hmac_key_file`, and a file
    over the environment. Raises ConfigError if a file is unreadable, empty or not private,
    or SASL is on and no password is found.
    """
    keys = read_hmac_keys(hmac_key_file or config.notify.hmac_key_file, environ)
    notify = dataclasses.replace(config.notify, hmac_keys=keys)  # validates key lengths
    return apply_secrets(dataclasses.replace(config, notify=notify), environ)


def apply_secrets(config: Config, environ: Mapping[str, str]) -> Config:
    """`config` with the upstream SASL password filled in from its file or `environ`.

    Raises ConfigError if the password was put in the config file (secrets never live
    there), or SASL is on and no password can be found.
    """
    if config.upstream.sasl_password:
        raise ConfigError("upstream.sasl_password: secrets are not read from the config file; "
                          "use upstream.sasl_password_file or $AZSIDECAR_UPSTREAM_SASL_PASSWORD")
    password = upstream_sasl_password(config.upstream, environ)
    return dataclasses.replace(config, upstream=dataclasses.replace(config.upstream, sasl_password=password))


def read_hmac_keys(key_file: str | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Notification HMAC keys from `key_file` (one per line, owner-readable only) or
    $AZSIDECAR_NOTIFY_HMAC_KEYS (comma-separated). Raises ConfigError if the file is
    unreadable, empty or readable by group or others."""
    if key_file:
        check_private(key_file, "notify.hmac_key_file")
        try:
            with open(key_file, encoding="utf-8") as f:
                keys = tuple(line.strip() for line in f if line.strip())
        except OSError as exc:
            raise ConfigError(f"notify.hmac_key_file: cannot read {key_file}: {exc.strerror}") from exc
        if not keys:
            raise ConfigError(f"notify.hmac_key_file: {key_file} holds no key")
        return keys
    return tuple(k.strip() for k in environ.get(HMAC_ENV, "").split(",") if k.strip())
