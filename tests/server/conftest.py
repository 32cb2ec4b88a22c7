"""Server test helpers: fakes.py (a fake transport and a socketless server)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fakes
