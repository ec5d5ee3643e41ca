"""Gate a canary boot against an approved budget: each check with its verdict and evidence."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Check:
    """One gate check: its name, whether it passed (None = cannot judge) and the evidence.

    >>> Check("every rank present", True, "ranks 0-3 of 4").to_dict()["passed"]
    True
    """

    name: str
    passed: bool | None
    detail: str

    def to_dict(self) -> dict:
        """JSON-ready ``{"name", "passed", "detail"}``."""
        return asdict(self)
