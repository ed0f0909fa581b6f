"""TLS and SASL/SCRAM-SHA-512 client listeners for the local Apache Kafka cluster.

Strategy. `make_broker_tls` writes a throwaway CA and one broker certificate whose
subject alternative names are every node's host (all three nodes share it: on loopback
they all listen on 127.0.0.1; in netns mode each has its zone address), so a client that
trusts the CA verifies the host it dialled, as it does with MSK's certificates. The
broker reads its key and chain as one PEM file (`ssl.keystore.type=PEM`, PKCS#8 key): no
keytool, no JKS/PKCS12 passwords. `security_listeners` returns the two `Listener` specs
MSK offers beside IAM - `SSL` (MSK's port 9094) and `SASL_SSL` with SCRAM-SHA-512 (9096) -
for `start_kafka_cluster(listeners=...)`; the inter-broker listener stays PLAINTEXT.

SCRAM users are written by `StorageTool format --add-scram` (`scram_format_args`, given as
`start_kafka_cluster(format_args=...)`), not by the Admin API after start: the credential
is then in the bootstrap metadata every node starts from, so it exists on all three
brokers before the first client connects. An AlterUserScramCredentials after start
reaches each broker through the metadata log a little later, and a client that
connects to a broker that has not yet applied it is refused - a race every test would
have to wait out. The cost: users are fixed at format time (enough for tests).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy.local.kafka_cluster import Listener

VALIDITY = datetime.timedelta(days=2)  # a local cluster lives for a test run or a demo
CLOCK_SKEW = datetime.timedelta(minutes=5)  # not-before in the past: the JVM and Python read one clock, but be lenient
SCRAM_MECHANISM = "SCRAM-SHA-512"  # MSK's SASL/SCRAM mechanism
SSL_LISTENER = "SSL"
SASL_SSL_LISTENER = "SASL_SSL"
SSL_PORT_OFFSET = 2  # netns mode: 9093 + 2 = 9095 (9094 is the controller's)
SASL_SSL_PORT_OFFSET = 3  # netns mode: 9096, MSK's SASL/SCRAM port


@dataclass(frozen=True)
class BrokerTls:
    """PEM files: the CA clients trust, and the brokers' key and certificate chain."""

    ca_file: Path
    keystore_file: Path  # PKCS#8 private key, then the broker certificate and the CA's
    hosts: tuple[str, ...]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _subject_alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys([*hosts, "localhost"]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def new_ca(name: str, path_length: int | None = 0,
           validity: datetime.timedelta = VALIDITY) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed P-256 CA that may sign certificates (key and certificate)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name)).issuer_name(_name(name))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_cert


def server_cert(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, common_name: str,
                sans: Sequence[x509.GeneralName],
                validity: datetime.timedelta = VALIDITY) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A P-256 server certificate (SERVER_AUTH) for `sans`, signed by the CA."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + validity)
        .add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def make_broker_tls(directory: Path, hosts: Sequence[str] = ("127.0.0.1",),
                    ca_name: str = "azsidecar local Kafka CA") -> BrokerTls:
    """Write ca.pem and broker-keystore.pem (mode 600) to `directory`.

    The broker certificate names every host in `hosts` (IP or DNS SANs) and localhost.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = new_ca(ca_name)
    key, cert = server_cert(ca_key, ca_cert, "kafka-broker", _subject_alt_names(hosts))
    tls = BrokerTls(directory / "ca.pem", directory / "broker-keystore.pem", tuple(hosts))
    tls.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    # Kafka's PEM key store: one PKCS#8 key (unencrypted when ssl.key.password is unset), then the chain.
    tls.keystore_file.touch(mode=0o600)
    tls.keystore_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM))
    return tls


def _tls_settings(listener: str, tls: BrokerTls) -> dict[str, str]:
    prefix = f"listener.name.{listener.lower()}."
    return {f"{prefix}ssl.keystore.type": "PEM", f"{prefix}ssl.keystore.location": str(tls.keystore_file)}


def security_listeners(tls: BrokerTls) -> list[Listener]:
    """An `SSL` listener and a `SASL_SSL` listener with SCRAM-SHA-512 only, both with `tls`'s certificate.

    No client certificates are asked for (`ssl.client.auth` stays none), as on MSK's TLS and SCRAM ports.
    """
    sasl_prefix = f"listener.name.{SASL_SSL_LISTENER.lower()}."
    scram = {
        f"{sasl_prefix}sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"{sasl_prefix}{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }
    return [
        Listener(SSL_LISTENER, "SSL", SSL_PORT_OFFSET, _tls_settings(SSL_LISTENER, tls)),
        Listener(SASL_SSL_LISTENER, "SASL_SSL", SASL_SSL_PORT_OFFSET,
                 {**_tls_settings(SASL_SSL_LISTENER, tls), **scram}),
    ]


def scram_format_args(users: Mapping[str, str], mechanism: str = SCRAM_MECHANISM) -> list[str]:
    """`StorageTool format` arguments that create these SCRAM users (name -> password).

    Raises ValueError for a name or password StorageTool's `[name=...,password=...]` syntax
    cannot carry unquoted.
    """
    args: list[str] = []
    for name, password in users.items():
        for what, value in (("name", name), ("password", password)):
            if not value or any(c in value for c in ',[]="\\ '):
                shown = repr(value) if what == "name" else "of user " + repr(name)  # never echo a password
                raise ValueError(f"SCRAM {what} {shown}: empty or not plain; use letters, digits, '-', '_', '.'")
        args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args
