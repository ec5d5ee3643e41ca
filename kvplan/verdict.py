"""A check's verdict and how verdicts fold: :class:`Check`, :func:`gate_verdict`, :func:`format_checks`.

A check passes (``True``), fails (``False``) or cannot be judged from the evidence given (``None``).
A check with nothing to look at (no admission plan was approved; no observation of the reserve after
warm-up) is *not applicable* (``applicable=False``, ``passed`` None): it is listed as ``N/A`` with the
reason and neither passes, fails nor blocks the verdict. The gate checks (:mod:`kvplan.checks`), the load
checks (:mod:`kvplan.load`) and the approval checks all return :class:`Check`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kvplan.escape import terminal_text

NOT_APPLICABLE = "N/A"


@dataclass(frozen=True)
class Check:
    """One gate check: its name, whether it passed (None = cannot judge) and the evidence.

    ``applicable`` False marks a check with no evidence to judge in this gate (``passed`` is then
    None); :func:`gate_verdict` leaves it out and :func:`format_checks` prints it as ``N/A``.

    >>> Check("every rank present", True, "ranks 0-3 of 4").to_dict()
    {'name': 'every rank present', 'passed': True, 'detail': 'ranks 0-3 of 4', 'applicable': True}
    """

    name: str
    passed: bool | None
    detail: str
    applicable: bool = True

    def to_dict(self) -> dict:
        """JSON-ready ``{"name", "passed", "detail"}``."""
        return asdict(self)


def gate_verdict(checks: Sequence[Check]) -> bool | None:
    """False when any check failed, else None when any could not be judged, else True.

    Checks that are not applicable are left out; with none applicable the gate cannot judge.

    >>> gate_verdict([Check("a", True, ""), Check("b", None, "")]) is None
    True
    >>> gate_verdict([Check("a", None, ""), Check("b", False, "")])
    False
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
    """The one word for a verdict, for a check or a whole gate: ``PASS``, ``FAIL`` or ``CANNOT JUDGE``.

    >>> verdict_word(True), verdict_word(False), verdict_word(None)
    ('PASS', 'FAIL', 'CANNOT JUDGE')
    """
    return {True: "PASS", False: "FAIL", None: "CANNOT JUDGE"}[passed]


def format_check(check: Check) -> str:
    """One check as ``kvplan gate`` and ``approve`` print it: its verdict word and name, then each
    ``; ``-separated part of its evidence on an indented line (one line per rank).

    >>> print(format_check(Check("every rank present", False, "missing rank 3; rank 2: ok")))
    FAIL  every rank present
          missing rank 3
          rank 2: ok
    """
    head = (
        f"{verdict_word(check.passed) if check.applicable else NOT_APPLICABLE}  {terminal_text(check.name)}"
    )
    # text from files: one line each
    return "\n".join([head, *(f"      {terminal_text(part)}" for part in check.detail.split("; ") if part)])


def format_checks(checks: Sequence[Check]) -> str:
    """The text ``kvplan gate`` prints: each check with its verdict, its evidence parts, then the verdict.

    A detail's ``; ``-separated parts go on their own indented lines; a check that is not applicable
    reads ``N/A``. The last line folds the checks with :func:`gate_verdict` and counts them by verdict:
    PASS, FAIL, CANNOT JUDGE and N/A (issue 24: none is hidden).

    >>> checks = [Check("every rank present", True, "ranks 0-3 of 4"),
    ...           Check("no OOM or error", None, "c.log rank 2: incomplete; d.log rank 0: incomplete"),
    ...           Check("tokens cover the admission plan", None, "no plan", applicable=False)]
    >>> print(format_checks(checks))
    PASS  every rank present
          ranks 0-3 of 4
    CANNOT JUDGE  no OOM or error
          c.log rank 2: incomplete
          d.log rank 0: incomplete
    N/A  tokens cover the admission plan
          no plan
    gate: CANNOT JUDGE (1 PASS, 0 FAIL, 1 CANNOT JUDGE, 1 N/A)
    """
    lines = [format_check(check) for check in checks]
    counts = {word: 0 for word in (*map(verdict_word, (True, False, None)), NOT_APPLICABLE)}
    for check in checks:
        counts[verdict_word(check.passed) if check.applicable else NOT_APPLICABLE] += 1
    tally = ", ".join(f"{count} {word}" for word, count in counts.items())
    lines.append(f"gate: {verdict_word(gate_verdict(checks))} ({tally})")
    return "\n".join(lines)
