"""Fixtures shared by the system tier (three zones, campaigns)."""

from __future__ import annotations

import pytest


@pytest.fixture
def env(loopback_kafka_zones):
    """The loopback three-zone Kafka environment (tests/conftest.py: shared by the session's
    three-zone modules); tests that build their own zones define `env` themselves."""
    return loopback_kafka_zones
