"""core.addresses.is_loopback, table by table (listeners and connection limits share it)."""

import pytest

from core.addresses import is_loopback


@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True), ("localhost", True),
    ("fe80::1%lo", False), ("::1%lo", True), ("10.0.0.5", False), ("0.0.0.0", False), ("::", False),
    ("gateway.example", False), ("", False),
])
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected
