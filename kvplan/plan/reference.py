"""Startup free memory per rank: ``F_ref`` of the approved boots and ``F_boot`` of a later boot.

This is the one rule for the free-memory reference of drift and the gate
(``B_adj_i = B_ref_i − max(0, F_ref_i − F_boot_i) − G``); a higher ``F_ref`` or a lower ``F_boot``
only lowers ``B_adj``, so where evidence leaves a choice the rule takes that side:

- ``F_ref`` of a rank with a room of its own: the free memory of the boot that set its room (its
  worst boot, :func:`kvplan.ledger.room_per_rank`), the one the room was measured against;
- ``F_ref`` of a rank whose room was assumed from another rank (``--assume-uniform``): the
  **highest** free memory its own boots show (the room is not its own, so the strictest reference);
- ``F_boot`` of a later boot: the **lowest** free memory each rank shows over its boots.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvplan.drift import lowest_free_bytes
from kvplan.ledger import is_known


def reference_free_bytes(ledger: pd.DataFrame, rooms: pd.DataFrame) -> tuple[int | None, ...]:
    """``F_ref`` per rank of ``rooms`` (:func:`kvplan.ledger.room_per_rank`, index order) [bytes].

    None where the rank's logs show no startup free memory.

    >>> ledger = pd.DataFrame({"rank": [0, 1], "init_free_bytes": [50, 52]})
    >>> rooms = pd.DataFrame({"room_source": ["suggestion", "assumed_uniform"],
    ...                       "init_free_bytes": [50, 50]}, index=[0, 1])
    >>> reference_free_bytes(ledger, rooms)  # rank 1's room is rank 0's: its own free memory, 52
    (50, 52)
    """
    free: list[int | None] = []
    for rank, record in rooms.iterrows():
        if record["room_source"] == "assumed_uniform":
            own = ledger.loc[ledger["rank"] == rank, "init_free_bytes"].dropna()
            free.append(int(own.max()) if not own.empty else None)
        else:
            value = record["init_free_bytes"]
            free.append(int(value) if is_known(value) else None)
    return tuple(free)


def boot_free_bytes(ledger: pd.DataFrame, ranks: Sequence[int]) -> tuple[int, ...]:
    """``F_boot`` per rank (``ranks`` order): the lowest startup free memory each rank shows [bytes]
    (:func:`kvplan.drift.lowest_free_bytes`).

    A rank that shows none is refused, naming the files.

    >>> ledger = pd.DataFrame({"source": "c.log", "rank": [0, 0, 1], "init_free_bytes": [50, 48, 49]})
    >>> boot_free_bytes(ledger, [0, 1])
    (48, 49)
    """
    lowest = lowest_free_bytes(ledger)
    for rank in ranks:
        if rank not in lowest:
            sources = ledger["source"].dropna() if "source" in ledger.columns else []
            files = ", ".join(dict.fromkeys(str(source) for source in sources))
            raise ValueError(
                f"{files or 'the ledger'}: rank {rank} shows no free memory at startup "
                "(no startup memory line in its log): is the log complete?"
            )
    return tuple(lowest[rank] for rank in ranks)
