"""Shared test helpers: where test data lives, and a GiB constant for readable arithmetic."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

TESTS_DATA_DIR = Path(__file__).parent / "data"
GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10


#: make demo's sample: one boot of Llama-3.1-70B on four H100s (rank 2 limits).
SAMPLE_LOG = Path(__file__).resolve().parent.parent / "data" / "boots" / "four-rank" / "boot.log"


def approve_args(out, *flags: str) -> list[str]:
    """``kvplan approve`` argv of the sample log at make demo's 0.9 GiB reserve, approver "t", into ``out``,
    with ``flags`` (``--guard``, ``--nvidia-smi``, ...) added."""
    return ["approve", str(SAMPLE_LOG), *flags, "--reserve", "0.9GiB", "--approver", "t", "--out", str(out)]
