"""The inter-zone frame capture keeps its whole receive buffer on any host (root only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy.local.port_capture import RECEIVE_BUFFER_BYTES, PortCapture

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="AF_PACKET sockets need root")


def test_the_receive_buffer_is_not_capped_by_rmem_max():
    # A capture whose buffer the kernel silently capped at net.core.rmem_max dropped 24 frames
    # of a loaded CI run's 8.5 MB baseline, and the meter's frame tally no longer added up.
    # Where net.core.rmem_max is below the buffer (most hosts), SO_RCVBUF alone would get less;
    # elsewhere the check still holds the capture to its full buffer.
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    capture = PortCapture(["lo"], server_ports=[9092])
    capture.start()
    try:
        # The kernel reports twice what was set (its bookkeeping overhead).
        assert capture.receive_buffer_bytes() == 2 * 32 * 1024 * 1024, (rmem_max, RECEIVE_BUFFER_BYTES)
    finally:
        capture.stop()
    assert capture.dropped == 0
