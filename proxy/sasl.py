"""Sans-IO SASL server for the client listener: PLAIN (RFC 4616) and SCRAM-SHA-256/512
(RFC 5802, RFC 7677), terminated at the proxy.

Strategy: SASL ends here because the proxy multiplexes many clients onto shared upstream
connections (and agents in other zones append for them), so a client's credentials cannot
be passed on; the proxy authenticates itself upstream with its own identity. The users
file holds only SCRAM's salted keys (StoredKey, ServerKey), never passwords: a SCRAM
exchange checks the client's proof against StoredKey, and PLAIN derives the same keys from
the password it receives and compares them, so one stored credential serves both. Every
object here takes bytes and returns bytes; the listener (proxy/server.py) frames them in
SaslHandshake/SaslAuthenticate. A failed exchange raises AuthenticationFailed, which the
listener answers with SASL_AUTHENTICATION_FAILED and then closes the connection, as Kafka
does. Messages never contain a password or a proof.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from core.errors import SidecarError

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_HASHES: dict[str, str] = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

# Kafka's own error codes for the SASL APIs.
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58

MIN_SCRAM_ITERATIONS = 4096  # RFC 7677's floor, and Kafka's
MAX_SCRAM_ITERATIONS = 16384  # Kafka's ceiling (ScramMechanism.maxIterations); bounds a login's CPU
DEFAULT_SCRAM_ITERATIONS = 8192  # like Kafka's kafka-configs default
SALT_BYTES = 32
NONCE_BYTES = 24  # server part of the SCRAM nonce, before base64
MAX_AUTH_BYTES = 8 * 1024  # a SASL token is a few hundred bytes; refuse more before parsing
FAILED = "Authentication failed: invalid credentials"  # one message for every cause: no user enumeration


class AuthenticationFailed(SidecarError):
    """The client's credentials or SASL messages were wrong (answered with error 58, then closed)."""

    retriable = False  # the same input fails the same way


class CredentialsError(ValueError):
    """The users file is malformed (the operator's fault, reported at start-up)."""


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user and one SCRAM mechanism (RFC 5802 section 3)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _keys(mechanism: str, password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) for a password (RFC 5802 section 3)."""
    hash_name = SCRAM_HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return hashlib.new(hash_name, client_key).digest(), _hmac(hash_name, salted, b"Server Key")


def scram_credential(password: str, mechanism: str, *, salt: bytes | None = None,
                     iterations: int = DEFAULT_SCRAM_ITERATIONS) -> ScramCredential:
    """The stored form of `password` for `mechanism`. Raises ValueError on a bad mechanism or count."""
    if mechanism not in SCRAM_HASHES:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
    if not MIN_SCRAM_ITERATIONS <= iterations <= MAX_SCRAM_ITERATIONS:
        raise ValueError(f"iterations must be within {MIN_SCRAM_ITERATIONS}..{MAX_SCRAM_ITERATIONS}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    stored_key, server_key = _keys(mechanism, password.encode("utf-8"), salt, iterations)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


class Credentials:
    """Users and their stored SCRAM credentials, from the users file."""

    def __init__(self, users: Mapping[str, Mapping[str, ScramCredential]]) -> None:
        self._users = {name: dict(creds) for name, creds in users.items()}

    def __len__(self) -> int:
        return len(self._users)

    def lookup(self, username: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(username, {}).get(mechanism)

    def any_for(self, username: str) -> ScramCredential | None:
        """The credential PLAIN checks a password against (the strongest the user has)."""
        creds = self._users.get(username, {})
        return creds.get(SCRAM_SHA_512) or creds.get(SCRAM_SHA_256)


def parse_credentials(text: str) -> Credentials:
    """Parse a users file (TOML, below). Raises CredentialsError naming the bad entry.

        [users.alice.SCRAM-SHA-256]
        salt = "<base64>"
        iterations = 8192
        stored_key = "<base64>"
        server_key = "<base64>"

    `azsidecar proxy-user NAME` prints such entries from a password read on stdin.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CredentialsError(f"users file is not TOML: {exc}") from exc
    unknown = set(data) - {"users"}
    if unknown:
        raise CredentialsError(f"users file: unknown table {sorted(unknown)[0]!r} (expected [users.NAME.MECHANISM])")
    users: dict[str, dict[str, ScramCredential]] = {}
    for name, mechanisms in data.get("users", {}).items():
        if not isinstance(mechanisms, dict) or not mechanisms:
            raise CredentialsError(f"users.{name}: expected tables [users.{name}.SCRAM-SHA-256] or -512")
        for mechanism, entry in mechanisms.items():
            where = f"users.{name}.{mechanism}"
            if mechanism not in SCRAM_HASHES:
                raise CredentialsError(f"{where}: mechanism must be one of {', '.join(SCRAM_HASHES)}")
            try:
                salt = base64.b64decode(entry["salt"], validate=True)
                stored_key = base64.b64decode(entry["stored_key"], validate=True)
                server_key = base64.b64decode(entry["server_key"], validate=True)
                iterations = entry["iterations"]
            except (KeyError, TypeError, ValueError) as exc:
                raise CredentialsError(f"{where}: needs base64 salt, stored_key, server_key and iterations") from exc
            size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
            if len(stored_key) != size or len(server_key) != size:
                raise CredentialsError(f"{where}: stored_key and server_key must be {size} bytes")
            if not isinstance(iterations, int) or not MIN_SCRAM_ITERATIONS <= iterations <= MAX_SCRAM_ITERATIONS:
                raise CredentialsError(f"{where}: iterations must be within {MIN_SCRAM_ITERATIONS}..{MAX_SCRAM_ITERATIONS}")
            if not salt:
                raise CredentialsError(f"{where}: empty salt")
            users.setdefault(name, {})[mechanism] = ScramCredential(mechanism, salt, iterations, stored_key, server_key)
    return Credentials(users)


def format_credential(username: str, credential: ScramCredential) -> str:
    """One users-file entry (TOML) for `credential`."""
    b64 = base64.b64encode
    return (f'[users."{_toml_escape(username)}".{credential.mechanism}]\n'
            f'salt = "{b64(credential.salt).decode()}"\n'
            f"iterations = {credential.iterations}\n"
            f'stored_key = "{b64(credential.stored_key).decode()}"\n'
            f'server_key = "{b64(credential.server_key).decode()}"\n')


def _toml_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class PlainServer:
    """PLAIN: one message `authzid NUL authcid NUL password`, answered with empty bytes."""

    mechanism = PLAIN

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials
        self.complete = False
        self.principal: str | None = None

    def step(self, message: bytes) -> bytes:
        """Check the client's message. Raises AuthenticationFailed."""
        if self.complete:
            raise AuthenticationFailed("PLAIN takes exactly one message")
        parts = bytes(message).split(b"\0")
        if len(parts) != 3 or not parts[1]:
            raise AuthenticationFailed("malformed PLAIN message")
        authzid, authcid, password = parts
        try:
            username = authcid.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AuthenticationFailed("malformed PLAIN message") from exc
        if authzid and authzid != authcid:
            raise AuthenticationFailed(FAILED)  # Kafka allows no impersonation either
        credential = self._credentials.any_for(username)
        if credential is None:
            raise AuthenticationFailed(FAILED)
        stored_key, _ = _keys(credential.mechanism, password, credential.salt, credential.iterations)
        if not hmac.compare_digest(stored_key, credential.stored_key):
            raise AuthenticationFailed(FAILED)
        self.complete = True
        self.principal = username
        return b""


class ScramServer:
    """SCRAM-SHA-256/512 server side: client-first -> server-first, client-final -> server-final.

    `nonce` makes the server nonce fixed (tests); by default it is random per exchange.
    Channel binding is not offered (the listener is TLS at most, not bound): a client
    asking for it ("p=") is refused. An unknown user gets a made-up salt and fails at the
    proof, so the exchange does not tell which users exist.
    """

    def __init__(self, mechanism: str, credentials: Credentials, *, nonce: Callable[[], bytes] | None = None,
                 unknown_user_key: bytes | None = None) -> None:
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        self.mechanism = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._credentials = credentials
        self._nonce = nonce or (lambda: base64.b64encode(secrets.token_bytes(NONCE_BYTES)))
        self._unknown_user_key = unknown_user_key or secrets.token_bytes(32)
        self._state = 0
        self._credential: ScramCredential | None = None
        self._username = ""
        self._gs2_header = b""
        self._client_first_bare = b""
        self._server_first = b""
        self._full_nonce = b""
        self.complete = False
        self.principal: str | None = None

    def step(self, message: bytes) -> bytes:
        """Answer the client's next message. Raises AuthenticationFailed."""
        message = bytes(message)
        if self._state == 0:
            self._state = 1
            return self._client_first(message)
        if self._state == 1:
            self._state = 2
            return self._client_final(message)
        raise AuthenticationFailed("SCRAM exchange already finished")

    def _client_first(self, message: bytes) -> bytes:
        # gs2-header: "n," (no channel binding) or "y," (client could, we do not offer it),
        # then an authzid "a=..." or nothing, then ",".
        cbind, sep, rest = message.partition(b",")
        if not sep or cbind not in (b"n", b"y"):
            raise AuthenticationFailed("SCRAM: channel binding is not supported" if cbind.startswith(b"p=")
                                       else "SCRAM: malformed client-first message")
        authzid, sep, bare = rest.partition(b",")
        if not sep or (authzid and not authzid.startswith(b"a=")):
            raise AuthenticationFailed("SCRAM: malformed client-first message")
        self._gs2_header = message[: len(message) - len(bare)]
        attrs = _attributes(bare)
        if "m" in attrs or "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise AuthenticationFailed("SCRAM: malformed client-first message")
        self._username = _unescape_username(attrs["n"])
        if authzid and _unescape_username(authzid[2:].decode("utf-8", errors="replace")) != self._username:
            raise AuthenticationFailed(FAILED)
        self._client_first_bare = bare
        self._credential = self._credentials.lookup(self._username, self.mechanism)
        if self._credential is not None:
            salt, iterations = self._credential.salt, self._credential.iterations
        else:
            salt = _hmac(self._hash, self._unknown_user_key, self._username.encode("utf-8"))[:SALT_BYTES]
            iterations = DEFAULT_SCRAM_ITERATIONS
        self._full_nonce = attrs["r"].encode("ascii", errors="replace") + self._nonce()
        self._server_first = (b"r=" + self._full_nonce + b",s=" + base64.b64encode(salt)
                              + b",i=" + str(iterations).encode())
        return self._server_first

    def _client_final(self, message: bytes) -> bytes:
        without_proof, sep, proof_attr = message.rpartition(b",p=")
        if not sep:
            raise AuthenticationFailed("SCRAM: malformed client-final message")
        attrs = _attributes(without_proof)
        if attrs.get("c", "").encode() != base64.b64encode(self._gs2_header):
            raise AuthenticationFailed("SCRAM: channel binding data does not match the gs2 header")
        if attrs.get("r", "").encode() != self._full_nonce:
            raise AuthenticationFailed("SCRAM: nonce mismatch")
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError as exc:
            raise AuthenticationFailed("SCRAM: malformed proof") from exc
        credential = self._credential
        if credential is None:
            raise AuthenticationFailed(FAILED)
        auth_message = self._client_first_bare + b"," + self._server_first + b"," + without_proof
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed(FAILED)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(FAILED)
        self.complete = True
        self.principal = self._username
        return b"v=" + base64.b64encode(_hmac(self._hash, credential.server_key, auth_message))


def _attributes(message: bytes) -> dict[str, str]:
    """`k=v,k=v` into a dict (first occurrence wins). Raises AuthenticationFailed on garbage."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuthenticationFailed("SCRAM: message is not UTF-8") from exc
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationFailed("SCRAM: malformed attribute")
        out.setdefault(key, value)
    return out


def _unescape_username(name: str) -> str:
    # RFC 5802 5.1: "," and "=" in a saslname are sent as "=2C" and "=3D".
    return name.replace("=2C", ",").replace("=3D", "=")


class SaslSession:
    """One connection's authentication: SaslHandshake picks a mechanism, SaslAuthenticate
    carries its messages, until the mechanism completes (then `authenticated`)."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: Credentials, *,
                 scram_nonce: Callable[[], bytes] | None = None) -> None:
        self.mechanisms = mechanisms
        self._credentials = credentials
        self._scram_nonce = scram_nonce
        self._server: PlainServer | ScramServer | None = None
        self.authenticated = False
        self.principal: str | None = None

    def handshake(self, mechanism: str) -> int:
        """Choose `mechanism`; returns the Kafka error code for the SaslHandshake answer."""
        if self._server is not None:
            return ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms:
            return UNSUPPORTED_SASL_MECHANISM
        if mechanism == PLAIN:
            self._server = PlainServer(self._credentials)
        else:
            self._server = ScramServer(mechanism, self._credentials, nonce=self._scram_nonce)
        return 0

    def authenticate(self, auth_bytes: bytes) -> bytes:
        """Feed one SaslAuthenticate token; returns the server's token.

        Raises AuthenticationFailed (bad credentials or messages, or no handshake first).
        """
        if self._server is None or self.authenticated:
            raise AuthenticationFailed("SaslAuthenticate without a preceding SaslHandshake, or after login")
        if len(auth_bytes) > MAX_AUTH_BYTES:
            raise AuthenticationFailed(f"SASL token larger than {MAX_AUTH_BYTES} bytes")
        answer = self._server.step(auth_bytes)
        if self._server.complete:
            self.authenticated = True
            self.principal = self._server.principal
        return answer


def load_credentials(path: str) -> Credentials:
    """Read and parse the users file at `path`. Raises CredentialsError (unreadable or malformed)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CredentialsError(f"cannot read users file {path}: {exc.strerror}") from exc
    return parse_credentials(text)
