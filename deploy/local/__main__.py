"""`python -m deploy.local [--mb N] [--segment-per-packet] [--cleanup]`: the metered baseline run."""

import sys

from deploy.local.scenario import main

sys.exit(main())
