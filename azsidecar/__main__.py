import sys

from azsidecar.cli import main

sys.exit(main())
