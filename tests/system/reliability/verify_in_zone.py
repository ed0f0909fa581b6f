"""`python -m tests.system.reliability.verify_in_zone ARGS.json RESULT.json`: verify_acknowledged run
inside a zone's network namespace (netns mode: the brokers are reachable only from the zones)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.system.reliability.harness import verify_acknowledged


def main(argv: list[str]) -> int:
    args = json.loads(Path(argv[0]).read_text())
    result = verify_acknowledged(args["bootstrap"], args["spec"], args["record_bytes"], args["summaries"],
                                 unknown_producers=args["unknown_producers"])
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
