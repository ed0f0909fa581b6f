"""Micro-check of the proxy's receive path for large Produce frames (not a timed test).

Sends N frames of --frame-bytes over a local socketpair from a thread and receives them the
way proxy/server.py does: into ServerCodec.frame_buffer() (the buffer grows with the bytes
received) or, with --chunked, as chunks joined once per frame. A third mode allocates each
whole frame up front, as the codec did before issue 23, for comparison. Prints ms per frame.

    .venv/bin/python bench/bench_codec_receive.py --frame-bytes 1048576 --frames 300
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka_protocol.kafka_codec import NEED_DATA, ServerCodec  # noqa: E402

CHUNK = 256 * 1024  # proxy/server.py RECEIVE_CHUNK_BYTES


def frame_of(size: int) -> bytes:
    header = struct.pack(">hhih", 0, 3, 1, -1)  # Produce v3, correlation 1, null client_id
    return struct.pack(">i", size - 4) + header + b"\x00" * (size - 4 - len(header))


def run(mode: str, frame: bytes, frames: int) -> float:
    a, b = socket.socketpair()

    def send() -> None:
        for _ in range(frames):
            a.sendall(frame)
        a.close()

    sender = threading.Thread(target=send)
    sender.start()
    codec = ServerCodec(64 * 1024 * 1024)
    got_frames = 0
    started = time.perf_counter()
    if mode == "whole":
        while got_frames < frames:
            buf = bytearray(len(frame))
            view = memoryview(buf)
            filled = 0
            while filled < len(buf):
                filled += b.recv_into(view[filled:])
            view.release()
            got_frames += 1
    else:
        while got_frames < frames:
            direct = codec.frame_buffer() if mode == "grow" else None
            if direct is not None:
                n = b.recv_into(direct)
                direct.release()
                codec.received_into(n)
            else:
                codec.receive_data(b.recv(CHUNK))
            while codec.next_frame() is not NEED_DATA:
                got_frames += 1
    elapsed = time.perf_counter() - started
    sender.join()
    b.close()
    return elapsed / frames * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frame-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    frame = frame_of(args.frame_bytes)
    for _ in range(args.rounds):
        print("  ".join(f"{mode} {run(mode, frame, args.frames):.3f} ms/frame" for mode in ("whole", "grow", "chunked")))


if __name__ == "__main__":
    main()
