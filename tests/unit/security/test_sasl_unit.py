"""The SASL server state machines, alone: RFC 7677's SCRAM-SHA-256 transcript byte for byte,
kafka-python's SCRAM client against our server, PLAIN, refusals, hostile tokens, and the users file."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from proxy.sasl import (
    AuthenticationFailed,
    Credentials,
    CredentialsError,
    PlainServer,
    SaslSession,
    ScramServer,
    format_credential,
    parse_credentials,
    scram_credential,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = b"rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = b"%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credentials() -> Credentials:
    return Credentials({"user": {"SCRAM-SHA-256": scram_credential("pencil", "SCRAM-SHA-256", salt=RFC_SALT,
                                                                   iterations=4096)}})


def test_scram_sha_256_server_reproduces_rfc_7677_transcript():
    server = ScramServer("SCRAM-SHA-256", rfc_credentials(), nonce=lambda: RFC_SERVER_NONCE)
    assert server.step(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.principal == "user"


def test_kafka_python_scram_client_and_our_server_exchange_the_rfc_bytes():
    server = ScramServer("SCRAM-SHA-256", rfc_credentials(), nonce=lambda: RFC_SERVER_NONCE)
    client = ScramClient("user", "pencil", "SCRAM-SHA-256")
    client.nonce = RFC_CLIENT_NONCE  # the RFC's client nonce instead of a random one
    first = client.first_message()
    assert first == RFC_CLIENT_FIRST
    server_first = server.step(first)
    assert server_first == RFC_SERVER_FIRST
    client.process_server_first_message(server_first)
    final = client.final_message()
    assert final == RFC_CLIENT_FINAL
    server_final = server.step(final)
    assert server_final == RFC_SERVER_FINAL
    client.process_server_final_message(server_final)  # raises if the server signature were wrong


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_with_kafka_python_client(mechanism):
    creds = Credentials({"alice": {mechanism: scram_credential("s3cret-pw", mechanism, iterations=4096)}})
    session = SaslSession(("PLAIN", mechanism), creds)
    assert session.handshake(mechanism) == 0
    client = ScramClient("alice", "s3cret-pw", mechanism)
    client.process_server_first_message(session.authenticate(client.first_message()))
    assert not session.authenticated
    client.process_server_final_message(session.authenticate(client.final_message()))
    assert session.authenticated and session.principal == "alice"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "s3cret-pw")])
def test_scram_wrong_password_or_unknown_user_fails_at_the_proof(user, password):
    creds = Credentials({"alice": {"SCRAM-SHA-512": scram_credential("s3cret-pw", "SCRAM-SHA-512", iterations=4096)}})
    server = ScramServer("SCRAM-SHA-512", creds)
    client = ScramClient(user, password, "SCRAM-SHA-512")
    server_first = server.step(client.first_message())  # an unknown user still gets a salt
    assert b",s=" in server_first and server_first.endswith(b",i=8192" if user == "mallory" else b",i=4096")
    client.process_server_first_message(server_first)
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        server.step(client.final_message())
    assert not server.complete


def test_scram_refuses_channel_binding_tampered_nonce_and_a_third_message():
    server = ScramServer("SCRAM-SHA-256", rfc_credentials(), nonce=lambda: RFC_SERVER_NONCE)
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        server.step(b"p=tls-unique,,n=user,r=abc")
    server = ScramServer("SCRAM-SHA-256", rfc_credentials(), nonce=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.step(RFC_CLIENT_FINAL.replace(b"k0,p=", b"k1,p="))
    server = ScramServer("SCRAM-SHA-256", rfc_credentials(), nonce=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    server.step(RFC_CLIENT_FINAL)
    with pytest.raises(AuthenticationFailed):
        server.step(RFC_CLIENT_FINAL)


def test_plain_checks_the_password_against_the_stored_scram_keys():
    creds = Credentials({"user": {"SCRAM-SHA-256": scram_credential("pencil", "SCRAM-SHA-256", iterations=4096)}})
    assert PlainServer(creds).step(b"\0user\0pencil") == b""
    assert PlainServer(creds).step(b"user\0user\0pencil") == b""  # authzid = authcid is allowed
    for message in (b"\0user\0Pencil", b"\0nobody\0pencil", b"admin\0user\0pencil", b"user\0pencil", b""):
        with pytest.raises(AuthenticationFailed):
            PlainServer(creds).step(message)


def test_session_refuses_unknown_mechanism_and_authenticate_before_handshake():
    session = SaslSession(("SCRAM-SHA-256",), rfc_credentials())
    with pytest.raises(AuthenticationFailed, match="without a preceding SaslHandshake"):
        session.authenticate(b"\0user\0pencil")
    assert session.handshake("PLAIN") == 33  # UNSUPPORTED_SASL_MECHANISM
    assert session.handshake("SCRAM-SHA-256") == 0
    assert session.handshake("SCRAM-SHA-256") == 34  # ILLEGAL_SASL_STATE: one handshake per connection


def test_failure_messages_never_contain_the_password():
    creds = Credentials({"user": {"SCRAM-SHA-256": scram_credential("pencil", "SCRAM-SHA-256", iterations=4096)}})
    with pytest.raises(AuthenticationFailed) as info:
        PlainServer(creds).step(b"\0user\0hunter2-secret")
    assert "hunter2" not in str(info.value)


def test_users_file_round_trip_and_errors():
    cred = scram_credential("pencil", "SCRAM-SHA-256", salt=RFC_SALT, iterations=4096)
    text = format_credential("user", cred)
    assert text.splitlines()[:3] == ['[users."user".SCRAM-SHA-256]', 'salt = "W22ZaJ0SNY7soEsUEjb6gQ=="',
                                     "iterations = 4096"]
    assert "pencil" not in text
    parsed = parse_credentials(text)
    assert parsed.lookup("user", "SCRAM-SHA-256") == cred
    assert parsed.lookup("user", "SCRAM-SHA-512") is None
    server = ScramServer("SCRAM-SHA-256", parsed, nonce=lambda: RFC_SERVER_NONCE)
    server.step(RFC_CLIENT_FIRST)
    assert server.step(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    with pytest.raises(CredentialsError, match="iterations"):
        parse_credentials(text.replace("iterations = 4096", "iterations = 1"))
    with pytest.raises(CredentialsError, match="mechanism must be one of"):
        parse_credentials(text.replace("SCRAM-SHA-256", "SCRAM-SHA-1"))
    with pytest.raises(CredentialsError, match="32 bytes"):
        parse_credentials(text.replace("stored_key = \"", "stored_key = \"AAAA"))

HOSTILE_CREDS = Credentials({"user": {"SCRAM-SHA-256": scram_credential("pencil", "SCRAM-SHA-256", salt=RFC_SALT,
                                                                        iterations=4096)}})


@settings(max_examples=300, deadline=None)
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256"]),
       messages=st.lists(st.one_of(st.binary(max_size=200),
                                   st.sampled_from([RFC_CLIENT_FIRST, RFC_CLIENT_FINAL, b"n,,", b"n,a=,n=,r=",
                                                    b"c=biws,r=,p=", b"\0user\0"])),
                         min_size=1, max_size=4))
def test_hostile_tokens_only_ever_fail_authentication(mechanism, messages):
    session = SaslSession(("PLAIN", "SCRAM-SHA-256"), HOSTILE_CREDS, scram_nonce=lambda: RFC_SERVER_NONCE)
    assert session.handshake(mechanism) == 0
    for message in messages:
        try:
            session.authenticate(message)
        except AuthenticationFailed:
            break
    # Arbitrary bytes never log in; only the RFC's own transcript (for "user"/"pencil") can.
    assert not session.authenticated or messages[:2] == [RFC_CLIENT_FIRST, RFC_CLIENT_FINAL]
