"""`azsidecar status`: one GET of /livez or /readyz, for probes, systemd and scripts.

Prints the status port's JSON answer (or why there was none) and exits 0 when the process
is live/ready, 1 otherwise. `--wait-s` asks again once a second until yes or the time is up.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request

REQUEST_TIMEOUT_S = 2.0
RETRY_EVERY_S = 1.0


def ask(url: str) -> tuple[bool, str]:
    """(yes, what the status port said or why it did not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as answer:
            return answer.status == 200, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return False, exc.read().decode(errors="replace")
    except (OSError, ValueError) as exc:
        return False, f"no answer from {url}: {exc}"


def main(args: argparse.Namespace) -> int:
    url = f"http://{args.host}:{args.port}/{'livez' if args.check == 'live' else 'readyz'}"
    deadline = time.monotonic() + args.wait_s
    while True:
        yes, said = ask(url)
        if yes or time.monotonic() >= deadline:
            print(said, file=sys.stdout if yes else sys.stderr)
            return 0 if yes else 1
        time.sleep(RETRY_EVERY_S)  # a polling interval for a command-line wait, not synchronization
