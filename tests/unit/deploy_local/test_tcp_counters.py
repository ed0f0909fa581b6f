"""The zones' TCP counters: parsing /proc/net/netstat and the interval's differences."""

from __future__ import annotations

import pytest

from deploy.local.tcp_counters import difference, parse_tcp_ext

NETSTAT = """TcpExt: SyncookiesSent PruneCalled TCPLossProbes TCPTimeouts TCPRcvQDrop TCPDSACKRecv TCPDSACKOldSent
TcpExt: 0 2 31 0 1 22 3
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
"""


def test_the_watched_counters_are_read_by_name_and_the_others_left_out():
    assert parse_tcp_ext(NETSTAT) == {"PruneCalled": 2, "TCPLossProbes": 31, "TCPTimeouts": 0, "TCPRcvQDrop": 1,
                                      "TCPDSACKRecv": 22, "TCPDSACKOldSent": 3}


@pytest.mark.parametrize("text", ["", "IpExt: InNoRoutes\nIpExt: 0\n", "TcpExt: A B\nTcpExt: 1\n",
                                  "TcpExt: TCPTimeouts\n"])
def test_a_text_without_paired_tcpext_lines_is_refused(text):
    with pytest.raises(ValueError):
        parse_tcp_ext(text)


def test_the_difference_keeps_the_counters_that_moved():
    before = {"TCPLossProbes": 10, "TCPRcvQDrop": 0, "TCPTimeouts": 4}
    after = {"TCPLossProbes": 35, "TCPRcvQDrop": 1, "TCPTimeouts": 4, "TCPDSACKRecv": 7}
    assert difference(before, after) == {"TCPLossProbes": 25, "TCPRcvQDrop": 1}
