"""Makes the in-tree client (`clients/python/src`) importable as `sonde` for
the scripts here, installed or not, so the tests run the tree's own code."""

import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
