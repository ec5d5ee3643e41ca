"""Checks: pure functions of evidence that return a :class:`Check`, and how verdicts fold.

A check passes (``True``), fails (``False``) or cannot be judged (``None``); one with nothing to look at is
*not applicable* (``N/A``): it neither passes, fails nor blocks the verdict. The checks live in
:mod:`~kvplan.checks.key` (is the boot the approved launch), :mod:`~kvplan.checks.launch` (vLLM's own
start-up refusals), :mod:`~kvplan.checks.gate` (a canary against an approval) and
:mod:`~kvplan.checks.canary` (a canary as evidence, its launch and running value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kvplan.escape import terminal_text

NOT_APPLICABLE = "N/A"


@dataclass(frozen=True)
class Check:
    """One check: its name, whether it passed (None = cannot judge), the evidence, whether it applies.

    >>> Check("every rank present", True, "ranks 0-3 of 4").to_dict()
    {'name': 'every rank present', 'passed': True, 'detail': 'ranks 0-3 of 4', 'applicable': True}
    """

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
    """False when any check failed, else None when any (or, with none applicable, all) could not be judged.

    >>> gate_verdict([Check("a", True, ""), Check("b", None, "")]) is None
    True
    >>> gate_verdict([Check("a", True, ""), Check("b", None, "no plan", applicable=False)])
    True
    """
    verdicts = [check.passed for check in checks if check.applicable]
    if False in verdicts:
        return False
    if None in verdicts or not verdicts:
        return None
    return True


def verdict_word(passed: bool | None) -> str:
    """The one word for a verdict: ``PASS``, ``FAIL`` or ``CANNOT JUDGE``."""
    return {True: "PASS", False: "FAIL", None: "CANNOT JUDGE"}[passed]


def format_check(check: Check) -> str:
    """One check as the CLI prints it: verdict and name, then each ``; ``-part of its evidence indented.

    >>> print(format_check(Check("every rank present", False, "missing rank 3; rank 2: ok")))
    FAIL  every rank present
          missing rank 3
          rank 2: ok
    """
    word = verdict_word(check.passed) if check.applicable else NOT_APPLICABLE
    parts = [f"      {terminal_text(part)}" for part in check.detail.split("; ") if part]  # text from files
    return "\n".join([f"{word}  {terminal_text(check.name)}", *parts])


def format_checks(checks: Sequence[Check]) -> str:
    """What ``kvplan gate`` prints: each check, then the verdict and the count of each verdict word (issue 24),
    e.g. ``gate: FAIL (5 PASS, 1 FAIL, 0 CANNOT JUDGE, 2 N/A)``."""
    lines = [format_check(check) for check in checks]
    counts = {word: 0 for word in (*map(verdict_word, (True, False, None)), NOT_APPLICABLE)}
    for check in checks:
        counts[verdict_word(check.passed) if check.applicable else NOT_APPLICABLE] += 1
    tally = ", ".join(f"{count} {word}" for word, count in counts.items())
    lines.append(f"gate: {verdict_word(gate_verdict(checks))} ({tally})")
    return "\n".join(lines)
