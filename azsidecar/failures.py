"""How a process fails to start: ConfigError (exit 2, the configuration is wrong) or
StartupFailure (exit 1, the environment is: credentials, bucket, brokers)."""

from __future__ import annotations

from core.errors import SidecarError

EXIT_CONFIG = 2
EXIT_ENVIRONMENT = 1


class StartupFailure(SidecarError):
    """The environment stops start-up (credentials, bucket, brokers): exit code 1, one line."""
