"""The side-by-side harness of tests/monai_cli (MONAI's bundle `run` scenarios through both runners)."""

from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib puts no test folder on sys.path; the test modules import side_by_side
sys.path.insert(0, str(Path(__file__).resolve().parent))
