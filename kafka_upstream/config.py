"""Settings of the upstream Kafka cluster the proxy fronts (its brokers, timeouts, TLS and SASL)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

from core.configload import COMMA_SEPARATED, require
from core.msk_iam import REGION_RE

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # served and spoken upstream (proxy/sasl.py)
# Upstream also OAUTHBEARER with MSK IAM tokens (core/msk_iam.py): the sidecar's IAM role is its identity.
UPSTREAM_SASL_MECHANISMS = (*SASL_MECHANISMS, "OAUTHBEARER")


@dataclass(frozen=True)
class UpstreamConfig:
    bootstrap_servers: Annotated[tuple[str, ...], COMMA_SEPARATED] = ()  # a list, or Kafka's comma-separated form "b-1:9092,b-2:9092"; required by the commands that talk to Kafka (proxy, agent, plan leaders): no default cluster
    client_id: str = "azsidecar"  # the client.id of the proxy's and the agent's own requests to the brokers
    metadata_ttl_s: float = 30.0  # how long a cached upstream Metadata view is trusted
    request_timeout_s: float = 30.0  # one request to a broker, sent to answered; then the connection is given up
    connect_timeout_s: float = 5.0  # TCP, TLS and the first ApiVersions of one address; then the next address
    metadata_timeout_s: float = 5.0  # one Metadata request to one broker; then the next broker is asked
    #: At start, while no bootstrap address answers (the zone's brokers down, unreachable or still
    #: starting, as after a zone outage; ApiVersions on a plaintext listener, a TCP connection on
    #: TLS), keep trying for this long, alive and not ready,
    #: instead of exiting; `inf` (the default) waits as Kafka's own clients do, 0 exits at once.
    #: A broker that answers and then refuses (TLS, SASL) stops the start at once.
    startup_wait_s: float = math.inf
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"  # to the brokers and agents' appends (MSK: SSL or SASL_SSL)
    tls_ca_file: str = ""  # PEM CA bundle that signed the brokers' certificates; "" = the system's CAs
    tls_check_hostname: bool = True  # verify the broker's certificate names the host we dialled
    sasl_mechanism: str = ""  # with SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (the sidecar's own identity) or OAUTHBEARER (MSK IAM)
    sasl_username: str = ""  # the sidecar's SASL user at the brokers (not with OAUTHBEARER: the IAM role is the identity)
    aws_msk_iam_region: str = ""  # with OAUTHBEARER: the MSK cluster's region; tokens are signed with the AWS credential chain
    aws_msk_iam_role_arn: str = ""  # with OAUTHBEARER: a role to assume for the tokens; "" = the credentials as found
    sasl_password_file: str = ""  # file whose first line is the SASL password; else $AZSIDECAR_UPSTREAM_SASL_PASSWORD
    sasl_password: str = field(default="", repr=False)  # not a file setting (refused there): the CLI fills it from sasl_password_file or the environment

    def __post_init__(self) -> None:
        sasl = self.security_protocol.startswith("SASL_")
        require(sasl == bool(self.sasl_mechanism),
                "upstream.sasl_mechanism: required with security_protocol SASL_*, not allowed otherwise")
        require(not self.sasl_mechanism or self.sasl_mechanism in UPSTREAM_SASL_MECHANISMS,
                f"upstream.sasl_mechanism: {self.sasl_mechanism!r} is not one of {', '.join(UPSTREAM_SASL_MECHANISMS)}")
        if self.msk_iam:
            # A bearer token is replayable for its 15 minutes: never in clear (MSK serves IAM on TLS only, port 9098).
            require(self.security_protocol == "SASL_SSL",
                    "upstream.sasl_mechanism OAUTHBEARER (MSK IAM): requires security_protocol SASL_SSL")
            require(bool(REGION_RE.match(self.aws_msk_iam_region)),
                    f"upstream.aws_msk_iam_region: {self.aws_msk_iam_region!r} is not an AWS region "
                    "(e.g. us-east-1); required with sasl_mechanism OAUTHBEARER")
            require(not self.aws_msk_iam_role_arn or self.aws_msk_iam_role_arn.startswith("arn:aws"),
                    f"upstream.aws_msk_iam_role_arn: {self.aws_msk_iam_role_arn!r} is not a role ARN")
            require(not self.sasl_username and not self.sasl_password_file,
                    "upstream.sasl_username and upstream.sasl_password_file: not used with OAUTHBEARER (MSK IAM)")
        else:
            require(not self.aws_msk_iam_region and not self.aws_msk_iam_role_arn,
                    "upstream.aws_msk_iam_region and upstream.aws_msk_iam_role_arn: only with sasl_mechanism OAUTHBEARER")
            require(not sasl or bool(self.sasl_username), "upstream.sasl_username: required with security_protocol SASL_*")
        for hp in self.bootstrap_servers:
            host, sep, port = hp.rpartition(":")
            require(bool(sep) and bool(host) and port.isdigit(), f"upstream.bootstrap_servers: {hp!r} is not host:port")
        require(self.metadata_ttl_s > 0, "upstream.metadata_ttl_s: must be > 0")
        require(self.request_timeout_s > 0, "upstream.request_timeout_s: must be > 0")
        require(self.connect_timeout_s > 0, "upstream.connect_timeout_s: must be > 0")
        require(self.metadata_timeout_s > 0, "upstream.metadata_timeout_s: must be > 0")
        require(self.startup_wait_s >= 0, "upstream.startup_wait_s: must be >= 0 (inf: wait indefinitely)")

    @property
    def msk_iam(self) -> bool:
        """OAUTHBEARER with MSK IAM tokens (the only token source the sidecar speaks)."""
        return self.sasl_mechanism == "OAUTHBEARER"

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")
