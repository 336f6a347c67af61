"""``python -m hpc_runner``."""

import sys

from hpc_runner.cli import main

sys.exit(main())
