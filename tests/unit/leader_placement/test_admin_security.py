"""How `plan leaders` configures its KafkaAdminClient for the upstream's security
(leader_placement.admin.kafka_python_security), checked through kafka-python's own SASL
mechanisms, without a broker:

- MSK IAM: the OAUTHBEARER message kafka-python sends carries a token that
  aws-msk-iam-sasl-signer-python signed (as core/msk_iam.py has it sign for the proxy) and
  that verifies with botocore's SigV4 signer for the configured region and credentials: from
  the default chain, and from an assumed role (STS answered by botocore's Stubber);
- SCRAM: kafka-python's exchange with the configured user and password is accepted by the
  proxy's own SCRAM server (proxy/sasl.py) for that password, and refused for another; the
  TLS context trusts the configured private CA (a handshake over memory BIOs, no socket).
The same over TLS on a real broker: tests/integration/kafka/test_leader_placement_on_kafka.py.
"""

from __future__ import annotations

import datetime
import ssl

import boto3
import botocore.auth
import pytest
from botocore.credentials import Credentials
from botocore.stub import Stubber
from kafka.admin import KafkaAdminClient
from kafka.net.sasl import get_sasl_mechanism

from core.msk_iam import MskIamTokens, oauthbearer_initial_response
from kafka_upstream.config import UpstreamConfig
from leader_placement.admin import kafka_python_security
from proxy.sasl import AuthenticationFailed, ScramServer, scram_credential
from proxy.sasl import Credentials as ScramUsers
from tests.integration.security._certs import make_certs
from tests.integration.security.msk_iam_double import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    SESSION_TOKEN,
    FixedCredentials,
    token_fields,
    token_is_valid,
)

SIGNED_AT = datetime.datetime(2026, 11, 26, 1, 0, 0)  # botocore's clock is naive UTC
IAM = UpstreamConfig(bootstrap_servers=("b-1.msk.example:9098",), security_protocol="SASL_SSL",
                     sasl_mechanism="OAUTHBEARER", aws_msk_iam_region=REGION)
ROLE_ARN = "arn:aws:iam::123456789012:role/azsidecar-leader-placement"


@pytest.fixture(autouse=True)
def frozen_signing_clock(monkeypatch):
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: SIGNED_AT)


@pytest.fixture
def aws_environment(monkeypatch):
    """The default credential chain finds the environment's keys first; nothing else is asked."""
    for name, value in {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                        "AWS_SESSION_TOKEN": SESSION_TOKEN, "AWS_CONFIG_FILE": "/nonexistent",
                        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)


def first_message(security) -> bytes:
    """What kafka-python's SASL mechanism of this configuration sends first."""
    return get_sasl_mechanism(security["sasl_mechanism"])(**security).auth_bytes()


def test_msk_iam_is_oauthbearer_over_tls_with_a_token_signed_for_the_region_from_the_default_chain(aws_environment):
    security = kafka_python_security(IAM)
    assert set(security) == {"security_protocol", "ssl_context", "sasl_mechanism", "sasl_oauth_token_provider"}
    assert set(security) <= set(KafkaAdminClient.DEFAULT_CONFIG)  # kafka-python takes every key
    assert (security["security_protocol"], security["sasl_mechanism"]) == ("SASL_SSL", "OAUTHBEARER")
    context = security["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname  # the system's CAs, names checked
    message = first_message(security)
    token = message.decode().split("auth=Bearer ")[1].split("\x01")[0]
    assert message == oauthbearer_initial_response(token)  # RFC 7628, no extensions
    right = Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)
    assert token_is_valid(token, right, REGION)
    assert not token_is_valid(token, right, "us-east-1")  # the region is inside the signed scope
    assert not token_is_valid(token, Credentials(ACCESS_KEY, SECRET_KEY + "x", SESSION_TOKEN), REGION)
    _, fields = token_fields(token)
    assert fields["X-Amz-Credential"] == f"{ACCESS_KEY}/20261126/{REGION}/kafka-cluster/aws4_request"
    assert fields["X-Amz-Security-Token"] == SESSION_TOKEN
    assert fields["User-Agent"].startswith("aws-msk-iam-sasl-signer-python/")


def test_a_token_is_signed_at_authentication_not_at_configuration_and_reused_while_fresh():
    credentials = FixedCredentials()
    security = kafka_python_security(IAM, MskIamTokens(REGION, credentials=credentials,
                                                       clock_ms=lambda: 1_795_654_800_000))
    assert credentials.loads == 0  # configuring the admin client signs nothing
    first, second = first_message(security), first_message(security)  # two connections' logins
    assert first == second and credentials.loads == 1
    token = first.decode().split("auth=Bearer ")[1].split("\x01")[0]
    assert token_is_valid(token, credentials.credentials, REGION)


def test_msk_iam_with_a_role_signs_with_the_credentials_sts_gave_for_that_role(aws_environment, monkeypatch):
    assumed = Credentials("ASIAASSUMEDROLEKEY", "assumed/secret+key", "assumed-session-token")
    make_client = boto3.client
    stubs: list[Stubber] = []

    def sts_client(service, **kwargs):
        assert service == "sts"
        client = make_client("sts", region_name="us-east-1")
        stub = Stubber(client)
        stub.add_response("assume_role", {
            "Credentials": {"AccessKeyId": assumed.access_key, "SecretAccessKey": assumed.secret_key,
                            "SessionToken": assumed.token, "Expiration": SIGNED_AT + datetime.timedelta(hours=1)},
        }, {"RoleArn": ROLE_ARN, "RoleSessionName": "MSKSASLDefaultSession"})
        stub.activate()
        stubs.append(stub)
        return client

    monkeypatch.setattr(boto3, "client", sts_client)
    security = kafka_python_security(UpstreamConfig(**{**IAM.__dict__, "aws_msk_iam_role_arn": ROLE_ARN}))
    token = first_message(security).decode().split("auth=Bearer ")[1].split("\x01")[0]
    [stub] = stubs
    stub.assert_no_pending_responses()  # AssumeRole was asked, for this role
    assert token_is_valid(token, assumed, REGION)
    assert not token_is_valid(token, Credentials(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN), REGION)
    assert token_fields(token)[1]["X-Amz-Security-Token"] == "assumed-session-token"


def scram_upstream(password: str, **tls) -> UpstreamConfig:
    return UpstreamConfig(bootstrap_servers=("b-1:9096",), security_protocol="SASL_SSL",
                          sasl_mechanism="SCRAM-SHA-512", sasl_username="sidecar", sasl_password=password, **tls)


def scram_exchange(security, server: ScramServer) -> None:
    """kafka-python's SCRAM client against the proxy's SCRAM server; raises AuthenticationFailed."""
    client = get_sasl_mechanism(security["sasl_mechanism"])(**security)
    while not client.is_done():
        client.receive(server.step(client.auth_bytes()))


def handshake(client: ssl.SSLContext, server: ssl.SSLContext, server_hostname: str) -> None:
    """A TLS handshake between the two contexts over memory BIOs; raises ssl.SSLError."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_client = client.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    tls_server = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):  # a TLS 1.3 handshake takes two or three flights
        for name, end, out, peer_in in (("client", tls_client, c_out, s_in), ("server", tls_server, s_out, c_in)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


def test_scram_logs_in_with_the_configured_user_and_password_and_only_with_it(tmp_path):
    users = ScramUsers({"sidecar": {"SCRAM-SHA-512": scram_credential("s3cret", "SCRAM-SHA-512", iterations=4096)}})
    certs = make_certs(tmp_path, "leader placement test CA")  # a server certificate for localhost
    security = kafka_python_security(scram_upstream("s3cret", tls_ca_file=str(certs.ca_file)))
    assert set(security) == {"security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
                             "sasl_plain_password"}
    assert set(security) <= set(KafkaAdminClient.DEFAULT_CONFIG)
    assert first_message(security).startswith(b"n,,n=sidecar,r=")
    server = ScramServer("SCRAM-SHA-512", users)
    scram_exchange(security, server)
    assert server.complete and server.principal == "sidecar"
    with pytest.raises(AuthenticationFailed):
        scram_exchange(kafka_python_security(scram_upstream("not-it")), ScramServer("SCRAM-SHA-512", users))

    broker = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    broker.load_cert_chain(str(certs.cert_file), str(certs.key_file))
    handshake(security["ssl_context"], broker, "localhost")  # the private CA is trusted, the name checked
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(security["ssl_context"], broker, "b-1.example")
    unchecked = kafka_python_security(scram_upstream("s3cret", tls_ca_file=str(certs.ca_file),
                                                     tls_check_hostname=False))
    handshake(unchecked["ssl_context"], broker, "b-1.example")  # upstream.tls_check_hostname = false
    (tmp_path / "other").mkdir()
    other = make_certs(tmp_path / "other", "another CA")
    stranger = kafka_python_security(scram_upstream("s3cret", tls_ca_file=str(other.ca_file)))
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        handshake(stranger["ssl_context"], broker, "localhost")
