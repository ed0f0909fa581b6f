"""Where the deploy tests find helm and promtool: $AZSIDECAR_HELM / $AZSIDECAR_PROMTOOL, the
project's .tools/bin (`make setup` runs deploy/tools/install-tools.sh), or PATH (promtool: Debian's
prometheus package, which `make setup` installs as root)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.integration.deploy._hcl import ROOT


def tool(name: str) -> str:
    """The path of `name`, or skip the test saying how to install it."""
    given = os.environ.get(f"AZSIDECAR_{name.upper()}")
    local = ROOT / ".tools" / "bin" / name
    found = given or (str(local) if local.exists() else shutil.which(name))
    if not found:
        pytest.skip(f"{name} not installed: run `make tools` (deploy/tools/install-tools.sh says why it could not)")
    return found
