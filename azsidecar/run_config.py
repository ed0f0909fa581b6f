"""`azsidecar config validate` and `azsidecar config show`: the config as the other commands load it;
`azsidecar config docs`: the configuration reference (azsidecar/config_docs.py).

Both load the file (if given) with the `AZSIDECAR__...` variables of the environment, as
`azsidecar proxy` does, and read no secret: `validate` prints one line, OK or the error
(exit code 2); `show` prints the effective config as TOML with each value's origin.
"""

from __future__ import annotations

import argparse
import os
import sys

from azsidecar import config_docs
from azsidecar.config import load_config_with_origins
from azsidecar.config_layers import env_assignments
from azsidecar.config_show import render
from azsidecar.secrets import secret_sources


def main(args: argparse.Namespace) -> int:
    if args.config_command == "docs":
        return config_docs.run(args, sys.stdout, sys.stderr)
    config, origins = load_config_with_origins(args.config, None, os.environ)
    source = args.config or "no config file (defaults)"
    if args.config_command == "validate":
        names = [a.origin for a in env_assignments(os.environ)]
        print(f"{source}: OK" + (f", with {', '.join(names)}" if names else ""))
        return 0
    sys.stdout.write(f"# The effective configuration: {source}, with the environment. After each value, where it\n"
                     f"# came from: default, file, or the variable that set it. Secrets are not shown.\n\n")
    sys.stdout.write(render(config, origins, secret_sources(config, os.environ)))
    return 0
