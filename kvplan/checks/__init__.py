"""Checks: pure functions of evidence returning a :class:`Check` (passed, failed, None: cannot judge; a check
with nothing to look at is not applicable), and how their verdicts fold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kvplan.escape import terminal_text

NOT_APPLICABLE = "N/A"
_WORDS = {True: "PASS", False: "FAIL", None: "CANNOT JUDGE"}


@dataclass(frozen=True)
class Check:
    """One check: its name, whether it passed (None = cannot judge), the evidence, whether it applies."""

    name: str
    passed: bool | None
    detail: str
    applicable: bool = True

    @classmethod
    def not_applicable(cls, name: str, why: str) -> Check:
        """A check with nothing to look at: neither passes, fails nor blocks (``not applicable: why``)."""
        return cls(name, None, f"not applicable: {why}", applicable=False)

    def to_dict(self) -> dict:
        """JSON-ready ``{"name", "passed", "detail", "applicable"}``."""
        return asdict(self)


def gate_verdict(checks: Sequence[Check]) -> bool | None:
    """False when any applicable check failed, else None when any (or, with none applicable, all) could not be
    judged, else True.
    """
    verdicts = [check.passed for check in checks if check.applicable]
    if False in verdicts:
        return False
    if None in verdicts or not verdicts:
        return None
    return True


def verdict_word(passed: bool | None) -> str:
    """The one word for a verdict: ``PASS``, ``FAIL`` or ``CANNOT JUDGE``."""
    return _WORDS[passed]


def _word(check: Check) -> str:
    return verdict_word(check.passed) if check.applicable else NOT_APPLICABLE


def format_check(check: Check) -> str:
    """One check as the CLI prints it: verdict and name, then each ``; ``-part of its evidence indented."""
    parts = [f"      {terminal_text(part)}" for part in check.detail.split("; ") if part]  # text from files
    return "\n".join([f"{_word(check)}  {terminal_text(check.name)}", *parts])


def format_checks(checks: Sequence[Check]) -> str:
    """What ``kvplan gate`` prints: each check, then ``gate: FAIL (5 PASS, 1 FAIL, 0 CANNOT JUDGE, 2 N/A)``."""
    counts = dict.fromkeys([*_WORDS.values(), NOT_APPLICABLE], 0)
    for check in checks:
        counts[_word(check)] += 1
    tally = ", ".join(f"{count} {word}" for word, count in counts.items())
    return "\n".join([*map(format_check, checks), f"gate: {verdict_word(gate_verdict(checks))} ({tally})"])
