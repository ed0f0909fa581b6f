"""Where secrets come from, for every subcommand: the environment or files, never the TOML.

The runners call these with `os.environ`; library code reads no environment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from azsidecar.commands import HMAC_ENV
from azsidecar.config import Config
from core.configload import ConfigError
from core.tls import upstream_sasl_password


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
    """Notification HMAC keys from `key_file` (one per line) or $AZSIDECAR_NOTIFY_HMAC_KEYS
    (comma-separated). Raises ConfigError if the file is unreadable."""
    if key_file:
        try:
            with open(key_file) as f:
                return tuple(line.strip() for line in f if line.strip())
        except OSError as exc:
            raise ConfigError(f"--hmac-key-file: {exc}") from exc
    return tuple(k.strip() for k in environ.get(HMAC_ENV, "").split(",") if k.strip())
