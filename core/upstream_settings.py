"""What the processes that talk to the upstream cluster with a Kafka library of their own
(the agent's aiokafka appender, the leader applier's kafka-python admin client) read of the
upstream settings. `kafka_upstream.config.UpstreamConfig` is the one implementation; this
protocol lets those layers name its type without importing the proxy's upstream client."""

from __future__ import annotations

from typing import Protocol


class UpstreamSettings(Protocol):
    @property
    def bootstrap_servers(self) -> tuple[str, ...]: ...

    @property
    def request_timeout_s(self) -> float: ...

    @property
    def security_protocol(self) -> str: ...

    @property
    def tls(self) -> bool: ...

    @property
    def tls_ca_file(self) -> str: ...

    @property
    def tls_check_hostname(self) -> bool: ...

    @property
    def msk_iam(self) -> bool: ...

    @property
    def aws_msk_iam_region(self) -> str: ...

    @property
    def aws_msk_iam_role_arn(self) -> str: ...

    @property
    def sasl_mechanism(self) -> str: ...

    @property
    def sasl_username(self) -> str: ...

    @property
    def sasl_password(self) -> str: ...

    @property
    def sasl_password_file(self) -> str: ...
