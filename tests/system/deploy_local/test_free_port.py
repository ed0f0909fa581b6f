"""free_port hands out listener ports that no outgoing connection can take."""

from __future__ import annotations

import socket

import pytest

from deploy.local import processes
from deploy.local.processes import free_port, listener_ports


def test_listener_ports_lie_below_the_ephemeral_range():
    assert listener_ports(32768) == range(10000, 32768)


def test_an_ephemeral_range_starting_low_leaves_the_kernel_to_pick():
    assert listener_ports(10500) is None
    assert listener_ports(1024) is None


def test_free_port_is_outside_the_ephemeral_range_and_never_repeats(monkeypatch, tmp_path):
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("32768\t60999\n")
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE_FILE", range_file)
    ports = [free_port() for _ in range(300)]
    assert all(10000 <= p < 32768 for p in ports)
    assert len(set(ports)) == 300


def test_free_port_skips_a_port_someone_listens_on(monkeypatch, tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        # the taken port is the only candidate: free_port must refuse it and let the kernel pick
        range_file = tmp_path / "ip_local_port_range"
        range_file.write_text(f"{taken + 1} 65535\n")
        monkeypatch.setattr(processes, "EPHEMERAL_RANGE_FILE", range_file)
        monkeypatch.setattr(processes, "LOWEST_LISTENER_PORT", taken)
        monkeypatch.setattr(processes, "FEWEST_LISTENER_PORTS", 1)
        assert free_port() != taken


def test_a_missing_range_file_falls_back_to_the_kernels_pick(monkeypatch, tmp_path):
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE_FILE", tmp_path / "absent")
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_two_port_slices_never_share_a_port(monkeypatch, tmp_path):
    # the suite's parallel workers pick ports at the same time, each from its own slice
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("32768\t60999\n")
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE_FILE", range_file)
    picked = {}
    for k in (0, 1):
        monkeypatch.setenv(processes.PORT_SLICE_ENV, f"{k}/2")
        picked[k] = [free_port() for _ in range(100)]
    assert all(p % 2 == 0 for p in picked[0]) and all(p % 2 == 1 for p in picked[1])


@pytest.mark.parametrize(("raw", "expected"), [
    ("1/3", (1, 3)), ("0/1", (0, 1)), ("", (0, 1)), ("3/3", (0, 1)), ("-1/2", (0, 1)), ("x/2", (0, 1)), ("2", (0, 1)),
])
def test_port_slice_reads_k_of_n_and_ignores_anything_else(monkeypatch, raw, expected):
    monkeypatch.setenv(processes.PORT_SLICE_ENV, raw)
    assert processes.port_slice() == expected
