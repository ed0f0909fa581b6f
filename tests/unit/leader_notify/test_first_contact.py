"""Which partitions count as a first contact for an agent (imports only first_contact)."""

from __future__ import annotations

import pytest

from leader_notify.sender.first_contact import AppendedPartitions

B1, B2, C1 = "10.0.2.1:9000", "10.0.2.2:9000", "10.0.3.1:9000"  # two agents of one zone, one of another


def test_a_partition_nobody_appended_is_a_first_contact_until_its_agent_has():
    appended = AppendedPartitions()
    assert appended.first_contact(B1, [("orders", 0)])
    appended.appended(B1, [("orders", 0)])
    assert not appended.first_contact(B1, [("orders", 0)])
    assert appended.first_contact(B1, [("orders", 0), ("orders", 1)])  # one new partition is enough
    assert appended.first_contact(B1, [("clicks", 0)])                 # a new topic
    assert not appended.first_contact(B1, [])                          # a notification of no entries


def test_a_partition_another_agent_appended_last_is_a_first_contact_again():
    """A leader that moved zones (or owners) and came back: its new followers start over."""
    appended = AppendedPartitions()
    appended.appended(B1, [("orders", 2)])
    assert appended.first_contact(C1, [("orders", 2)])
    appended.appended(C1, [("orders", 2)])
    assert appended.first_contact(B1, [("orders", 2)])
    assert appended.first_contact(B2, [("orders", 2)])
    assert not appended.first_contact(C1, [("orders", 2)])


def test_the_least_recently_appended_partitions_are_forgotten_first():
    appended = AppendedPartitions(max_partitions=2)
    appended.appended(B1, [("t", 0), ("t", 1)])
    appended.appended(B1, [("t", 0)])  # t-0 is now the more recent
    appended.appended(B1, [("t", 2)])  # three: t-1 goes
    assert len(appended) == 2
    assert appended.first_contact(B1, [("t", 1)])
    assert not appended.first_contact(B1, [("t", 0), ("t", 2)])


def test_at_least_one_partition_is_remembered():
    with pytest.raises(ValueError):
        AppendedPartitions(max_partitions=0)
