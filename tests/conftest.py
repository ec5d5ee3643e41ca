"""Shared test helpers: where test data lives, and a GiB constant for readable arithmetic."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

TESTS_DATA_DIR = Path(__file__).parent / "data"
GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
