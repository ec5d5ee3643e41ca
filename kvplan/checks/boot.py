"""Checks of a boot's own rows: every approved rank present, no OOM or error line.

>>> check_ranks_present([0, 1], pd.DataFrame({"rank": [0, 1]})).detail
'ranks 0-1 of 2'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from kvplan.ledger import plain_value
from kvplan.verdict import Check

RANKS_CHECK = "every rank present"
OUTCOME_CHECK = "no OOM or error"


def check_ranks_present(approved_ranks: Sequence[int], boot_ledger: pd.DataFrame) -> Check:
    """The boot shows exactly the approved ranks.

    >>> check_ranks_present([0, 1], pd.DataFrame({"rank": [0]})).detail
    'missing rank 1 (the boot shows rank 0 of approved 0-1)'
    """
    boot = sorted({int(rank) for rank in boot_ledger["rank"].dropna()})
    approved = sorted(int(rank) for rank in approved_ranks)
    missing = [rank for rank in approved if rank not in boot]
    extra = [rank for rank in boot if rank not in approved]
    problems = []
    if missing:
        problems.append(f"missing rank{'s' if len(missing) > 1 else ''} {rank_list(missing)}")
    if extra:
        problems.append(f"unapproved rank{'s' if len(extra) > 1 else ''} {rank_list(extra)}")
    seen = f"the boot shows rank {rank_list(boot) or 'none'} of approved {_rank_span(approved)}"
    if problems:
        return Check(RANKS_CHECK, False, f"{', '.join(problems)} ({seen})")
    return Check(RANKS_CHECK, True, f"ranks {_rank_span(boot)} of {len(approved)}")


def check_outcomes(boot_ledger: pd.DataFrame) -> Check:
    """No rank ran out of memory or stopped with an error; an incomplete boot cannot be judged.

    >>> frame = pd.DataFrame({"source": ["c.log"], "rank": [2], "outcome": ["oom"],
    ...                       "error": ["CUDA out of memory"]})
    >>> check_outcomes(frame).detail
    'c.log rank 2: oom: CUDA out of memory'
    """
    failed, unknown = [], []
    for row in boot_ledger.itertuples(index=False):
        outcome = plain_value(getattr(row, "outcome", None))
        where = f"{getattr(row, 'source', '?')} rank {_rank_text(row.rank)}"
        if outcome in ("oom", "error"):
            failed.append(f"{where}: {outcome}: {plain_value(getattr(row, 'error', None)) or 'no text'}")
        elif outcome != "ok":
            unknown.append(f"{where}: {outcome or 'no outcome'}")
    if failed:
        return Check(OUTCOME_CHECK, False, "; ".join(failed + unknown))
    if unknown:
        detail = "; ".join(unknown) + " (the log stops before the KV cache is sized)"
        return Check(OUTCOME_CHECK, None, detail)
    return Check(OUTCOME_CHECK, True, f"{len(boot_ledger)} rank rows ok")


def _rank_text(rank: Any) -> str:
    return "?" if plain_value(rank) is None else str(int(rank))


def rank_list(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)


def _rank_span(ranks: Sequence[int]) -> str:
    """``0-3`` for a contiguous run, else the list.

    >>> _rank_span([0, 1, 2, 3]), _rank_span([0, 2])
    ('0-3', '0, 2')
    """
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return rank_list(ranks)
