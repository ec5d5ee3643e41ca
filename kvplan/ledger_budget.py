"""From a checked ledger to the budget: failed boots and ranks left out refuse it, the worst room sets it.

:func:`budget_from_rooms` is the uniform budget of :func:`kvplan.ledger.room_per_rank`'s worst room per
rank; :func:`refuse_failed_boots` and :func:`check_dropped_ranks` refuse a ledger from which no budget may come.
Every refusal is a :class:`~kvplan.ledger.LedgerError` naming the file and line of the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from kvplan.budget import Budget, BudgetError, uniform_budget
from kvplan.columns import failure_phase
from kvplan.ledger import LedgerError, _line, _where, plain_value, room_per_rank
from kvplan.units import format_size

#: Codes of reader notes that left a rank's lines out of the ledger (a process claiming a rank outside
#: TP × PP × DP): that GPU's room may be below every rank kept, so no budget may be computed without it.
DROPPED_RANK_CODES = frozenset({"rank-out-of-world"})


def check_dropped_ranks(notes: Iterable[object]) -> None:
    """Raise :class:`LedgerError` when a reader note (a :class:`kvplan.notes.Note`) says a rank's lines
    were left out; the message is the note's own ``file:line`` and text.

    >>> check_dropped_ranks(["a.log:3: a warning of another kind"])
    """
    dropped = [str(note) for note in notes if getattr(note, "code", None) in DROPPED_RANK_CODES]
    if dropped:
        more = f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else ""
        raise LedgerError(
            f"{dropped[0]}{more}. That GPU's room may be below every rank kept, so the budget is refused: "
            "give the logs of one launch whose engine config names its parallel sizes, or leave those "
            "lines out"
        )


#: Order in which failed rows are reported: out of memory first, then errors, then cut-off boots.
_OUTCOME_ORDER = {"oom": 0, "error": 1, "incomplete": 2}
_SHOWN_FAILURES = 6


def refuse_failed_boots(ledger: pd.DataFrame, lines: Mapping | None = None) -> None:
    """Raise :class:`LedgerError` when any row's boot did not come through startup cleanly.

    The message lists each failed row with its own file:line and text, OOM first, then errors (a
    rank's own before the ones it only inherits from the engine, by line), then incomplete boots.

    >>> refuse_failed_boots(pd.DataFrame({"source": ["a.log"], "boot": [0], "rank": [0], "outcome": ["ok"]}))
    """
    if "outcome" not in ledger:
        return
    lines = lines if lines is not None else {}
    failed = ledger[ledger["outcome"].fillna("incomplete") != "ok"]
    if failed.empty:
        return
    items = []
    for _, row in failed.iterrows():
        outcome = plain_value(row["outcome"]) or "incomplete"
        where = _where(lines, row["source"], row["boot"], row["rank"], "outcome")
        line = _line(lines, row["source"], row["boot"], row["rank"], "outcome")
        text = str(plain_value(row.get("error")) or "no text")
        text = text if len(text) <= 240 else text[:239] + "…"
        phase = failure_phase(plain_value(row.get("failed_in")))
        items.append(
            (
                _OUTCOME_ORDER.get(outcome, 3),
                line if line is not None else float("inf"),
                f"{where}: boot {plain_value(row['boot'])} rank {plain_value(row['rank'])} did not boot cleanly "
                f"({outcome}: {text})" + (f" {phase}" if phase else ""),
            )
        )
    items.sort(key=lambda item: item[:2])
    shown = [item[2] for item in items[:_SHOWN_FAILURES]]
    more = f"; {len(items) - _SHOWN_FAILURES} more row(s) not ok" if len(items) > _SHOWN_FAILURES else ""
    raise LedgerError(
        "; ".join(shown)
        + more
        + ". The budget is refused rather than computed from partial evidence. "
        + _next_step(failed, ledger)
    )


def _next_step(failed: pd.DataFrame, ledger: pd.DataFrame) -> str:
    """What to do about the failed rows: give the rest of a log cut short, or fix a failure and boot
    again; leaving a boot out only when the ledger holds another.

    >>> frame = pd.DataFrame({"source": ["a.log"], "boot": [0], "outcome": ["incomplete"]})
    >>> _next_step(frame, frame)
    "Give the whole log, through its 'Application startup complete' line: it stops before startup completed."
    """
    cut_short = set(failed["outcome"].fillna("incomplete")) == {"incomplete"}
    step = (
        "give the whole log, through its 'Application startup complete' line: it stops before startup completed."
        if cut_short
        else "fix what failed and boot again."
    )
    boots = ledger[["source", "boot"]].drop_duplicates() if {"source", "boot"} <= set(ledger) else ledger[:1]
    failed_boots = (
        failed[["source", "boot"]].drop_duplicates() if {"source", "boot"} <= set(failed) else failed[:1]
    )
    if len(boots) > len(failed_boots):
        return f"Leave the failed boot(s) out (the ledger holds others), or {step}"
    return step[0].upper() + step[1:]


def budget_from_ledger(
    ledger: pd.DataFrame,
    reserve_bytes: int,
    block_bytes: int | None = None,
    assume_uniform: bool = False,
    lines: Mapping | None = None,
) -> Budget:
    """The uniform budget from a ledger: checks, worst room per rank, then :func:`uniform_budget`.

    >>> GiB = 2**30
    >>> frame = pd.DataFrame({"source": ["a.log"] * 2, "boot": [0, 0], "rank": [0, 1],
    ...                       "room_bytes": [13 * GiB, 14 * GiB], "room_source": ["suggestion"] * 2,
    ...                       "outcome": ["ok", "ok"]})
    >>> budget_from_ledger(frame, GiB).uniform_budget_bytes == 12 * GiB
    True
    """
    lines = lines if lines is not None else {}
    refuse_failed_boots(ledger, lines)
    return budget_from_rooms(
        ledger,
        room_per_rank(ledger, assume_uniform=assume_uniform, lines=lines),
        reserve_bytes,
        block_bytes,
        lines,
    )


def budget_from_rooms(
    ledger: pd.DataFrame,
    rooms: pd.DataFrame,
    reserve_bytes: int,
    block_bytes: int | None = None,
    lines: Mapping | None = None,
) -> Budget:
    """:func:`uniform_budget` of the worst room per rank (:func:`room_per_rank` of ``ledger``).

    A budget that leaves nothing is refused naming the weakest rank's file and line (from ``lines``).
    """
    lines = lines if lines is not None else {}
    try:
        return uniform_budget(
            rooms["room_bytes"].astype(int).tolist(),
            reserve_bytes,
            block_bytes=block_bytes,
            ranks=rooms.index.astype(int).tolist(),
        )
    except BudgetError as exc:
        weakest = int(rooms["room_bytes"].astype(int).idxmin())
        record = rooms.loc[weakest]
        where = _where(lines, record["source"], record["boot"], weakest, "room_bytes")
        raise LedgerError(f"{where}: {exc} (weakest room {format_size(int(record['room_bytes']))})") from None
