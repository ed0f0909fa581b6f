"""A throwaway CA and a server certificate for 127.0.0.1/localhost, made with `cryptography`."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from deploy.local.kafka_security import new_ca, server_cert

VALIDITY = datetime.timedelta(days=1)  # lives for one test session


@dataclass(frozen=True)
class CertFiles:
    ca_file: Path
    cert_file: Path
    key_file: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_certs(directory: Path, common_name: str = "azsidecar test CA") -> CertFiles:
    """Write ca.pem, server.pem and server-key.pem (SANs 127.0.0.1 and localhost) to `directory`."""
    ca_key, ca_cert = new_ca(common_name, path_length=None, validity=VALIDITY)
    key, cert = server_cert(ca_key, ca_cert, "localhost", [x509.DNSName("localhost"),
                                                           x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
                            validity=VALIDITY)
    files = CertFiles(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    files.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    files.key_file.chmod(0o600)  # a private key: the proxy refuses one others can read
    ca_key_file = directory / "ca-key.pem"  # for make_client_cert
    ca_key_file.write_bytes(ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    ca_key_file.chmod(0o600)
    return files


def make_client_cert(ca: CertFiles, directory: Path, subject: list[tuple[x509.ObjectIdentifier, str]],
                     name: str) -> tuple[Path, Path]:
    """A client certificate (CLIENT_AUTH) signed by `ca`'s CA with `subject`'s attributes in
    order (most general first); returns (certificate file, key file)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = x509.load_pem_x509_certificate(ca.ca_file.read_bytes())
    ca_key = serialization.load_pem_private_key((ca.ca_file.parent / "ca-key.pem").read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(oid, value) for oid, value in subject]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file
