"""Checks on a ledger and the room of every rank: one compatibility key, every rank, worst boot.

A budget may only come from boots of one configuration (:func:`compatibility_key`), must cover every
rank of TP × PP × DP, and takes each rank's **worst** (lowest) room over repeated boots, so one
lucky boot cannot set the value (:func:`room_per_rank`). Failed boots refuse the budget.
Every refusal is a :class:`LedgerError` naming the file and line of the evidence.
"""

from __future__ import annotations

import pandas as pd

from kvplan.budget import Budget, BudgetError, median_bytes, uniform_budget
from kvplan.columns import KEY_COLUMNS
from kvplan.units import format_size


class LedgerError(ValueError):
    """A ledger from which no budget may be computed; the message names file and line."""


def is_known(value: object) -> bool:
    """False for a missing ledger cell (None, NaN, ``pd.NA``); lists and dicts count as known.

    >>> is_known(pd.NA), is_known(float("nan")), is_known(0), is_known([1])
    (False, False, True, True)
    """
    if value is None:
        return False
    try:
        return not bool(pd.isna(value))
    except (TypeError, ValueError):  # array-likes: pd.isna answers element-wise
        return True


def plain_value(value: object) -> object:
    """A ledger cell as a plain Python value: None when missing, numpy scalars unwrapped.

    >>> import numpy as np
    >>> plain_value(np.int64(7)), plain_value(pd.NA)
    (7, None)
    """
    if not is_known(value):
        return None
    return value.item() if hasattr(value, "item") else value


def _where(ledger: pd.DataFrame, source: object, boot: object, rank: object, column: str) -> str:
    """``file:line`` of a ledger value when the reader recorded it, else ``file``."""
    lines = ledger.attrs.get("lines", {})
    rank_key = -1 if not is_known(rank) else int(rank)
    line = lines.get((source, plain_value(boot), rank_key, column))
    return f"{source}:{line}" if is_known(line) else f"{source}"


def compatibility_key(ledger: pd.DataFrame) -> dict:
    """The one compatibility key shared by every row, as plain values (None = not logged).

    A field logged with different values raises :class:`LedgerError` listing each field, each
    value and the files (and lines) that show it; a field some files do not show is not a conflict.

    >>> frame = pd.DataFrame({"source": ["a.log"], "boot": [0], "rank": [0], "vllm_version": ["0.26.0"]})
    >>> compatibility_key(frame)["vllm_version"]
    '0.26.0'
    """
    if ledger.empty:
        raise LedgerError("the ledger is empty: no boot was found in the logs")
    key, conflicts = {}, []
    for column in KEY_COLUMNS:
        if column not in ledger.columns:
            key[column] = None
            continue
        shown = ledger[["source", "boot", column]].dropna(subset=[column])
        values = list(dict.fromkeys(plain_value(value) for value in shown[column]))
        key[column] = values[0] if len(values) == 1 else None
        if len(values) > 1:
            parts = []
            for value in values:
                places = shown[shown[column].map(plain_value) == value][["source", "boot"]].drop_duplicates()
                where = ", ".join(
                    _where(ledger, s, b, None, column) for s, b in places.itertuples(index=False)
                )
                parts.append(f"{value!r} in {where}")
            conflicts.append(f"{column}: " + " vs ".join(parts))
    if conflicts:
        raise LedgerError(
            "the logs mix compatibility keys, so no single budget applies: " + "; ".join(conflicts)
        )
    return key


def _world_size(key: dict) -> int | None:
    sizes = [
        key.get(name) for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    ]
    if any(size is None for size in sizes):
        return None
    return int(sizes[0]) * int(sizes[1]) * int(sizes[2])


def room_per_rank(ledger: pd.DataFrame, assume_uniform: bool = False) -> pd.DataFrame:
    """Each rank's room over all boots of one key: the worst (lowest) boot, and the spread.

    Indexed by rank: ``room_bytes`` (the lowest over boots), ``room_source``, ``init_free_bytes``
    (of that boot, else the rank's lowest), ``room_min_bytes``, ``room_median_bytes``,
    ``room_max_bytes``, ``boots`` (how many boots showed a room), ``source`` and ``boot`` of the
    worst boot. Refuses mixed keys, a missing rank and ranks without room; with
    ``assume_uniform=True`` ranks without room get the lowest room shown (``room_source``
    ``assumed_uniform``), for logs where vLLM printed local rank 0 only.

    >>> frame = pd.DataFrame({"source": ["a.log"] * 3, "boot": [0, 1, 0], "rank": [0, 0, 1],
    ...                       "room_bytes": [30, 20, 25], "room_source": ["suggestion"] * 3})
    >>> room_per_rank(frame)[["room_bytes", "room_max_bytes", "boots"]].values.tolist()
    [[20, 30, 2], [25, 25, 1]]
    """
    key = compatibility_key(ledger)
    world = _world_size(key)
    ranks_seen = sorted({int(rank) for rank in ledger["rank"].dropna()})
    expected = list(range(world)) if world is not None else ranks_seen
    with_room = ledger.dropna(subset=["room_bytes"]) if "room_bytes" in ledger else ledger.iloc[0:0]
    records = {}
    for rank, rows in with_room.groupby("rank"):
        rooms = [int(value) for value in rows["room_bytes"]]
        worst = rows.loc[rows["room_bytes"].astype("Int64").idxmin()]
        free = worst.get("init_free_bytes")
        if not is_known(free) and "init_free_bytes" in rows:
            lowest = rows["init_free_bytes"].dropna()
            free = lowest.min() if not lowest.empty else None
        records[int(rank)] = {
            "room_bytes": min(rooms),
            "room_source": plain_value(worst.get("room_source")),
            "init_free_bytes": plain_value(free),
            "room_min_bytes": min(rooms),
            "room_median_bytes": median_bytes(rooms),
            "room_max_bytes": max(rooms),
            "boots": len(rooms),
            "source": plain_value(worst.get("source")),
            "boot": plain_value(worst.get("boot")),
        }
    if not records:
        raise LedgerError(
            f"no rank shows its room in {_files(ledger)}: the logs hold no --kv-cache-memory "
            "suggestion, 'Available KV cache memory' or DEBUG memory lines (a manual-value or "
            "unfinished boot?); profile a boot without --kv-cache-memory-bytes"
        )
    lacking = [rank for rank in expected if rank not in records]
    if lacking and not assume_uniform:
        raise LedgerError(_lacking_message(ledger, key, world, ranks_seen, records, lacking))
    if lacking:
        lowest = min(records.values(), key=lambda record: record["room_bytes"])
        for rank in lacking:
            records[rank] = {**lowest, "room_source": "assumed_uniform", "boots": 0}
    frame = pd.DataFrame.from_dict(records, orient="index").sort_index()
    frame.index.name = "rank"
    for column in (
        "room_bytes",
        "init_free_bytes",
        "room_min_bytes",
        "room_median_bytes",
        "room_max_bytes",
        "boots",
        "boot",
    ):
        frame[column] = frame[column].astype("Int64")
    return frame


def _files(ledger: pd.DataFrame) -> str:
    files = (
        list(dict.fromkeys(str(source) for source in ledger["source"].dropna())) if "source" in ledger else []
    )
    return ", ".join(files) or "the ledger"


def _lacking_message(
    ledger: pd.DataFrame,
    key: dict,
    world: int | None,
    ranks_seen: list[int],
    records: dict,
    lacking: list[int],
) -> str:
    sources = {record["room_source"] for record in records.values()}
    version = key.get("vllm_version")
    recent = version is None or tuple(int(p) for p in str(version).split(".")[:2] if p.isdigit()) >= (0, 11)
    first = min(records)
    where = _where(ledger, records[first]["source"], records[first]["boot"], first, "room_bytes")
    listing = ", ".join(str(rank) for rank in lacking)
    if sources == {"available_kv"} and recent:
        return (
            f"{where}: the logs show the room of local rank 0 only (rank(s) "
            f"{', '.join(str(r) for r in sorted(records))}); rank(s) {listing} show none, and rank 0 "
            "does not speak for the others. Rerun with VLLM_LOGGING_LEVEL=DEBUG or vLLM ≥ 0.26 (the "
            "--kv-cache-memory suggestion is printed on every rank), or pass --assume-uniform to accept "
            "rank 0's room for every rank."
        )
    missing = [rank for rank in lacking if rank not in ranks_seen]
    if missing:
        size_where = _where(
            ledger, ledger["source"].iloc[0], ledger["boot"].iloc[0], None, "tensor_parallel_size"
        )
        return (
            f"rank(s) {', '.join(str(r) for r in missing)} missing: TP × PP × DP = {world} ({size_where}) "
            f"but {_files(ledger)} show rank(s) {', '.join(str(r) for r in ranks_seen)} only. "
            "Give every rank's log (all nodes), or check that no worker died silently."
        )
    rows = ledger[ledger["rank"].isin(lacking)]
    places = ", ".join(sorted({f"{s} boot {b}" for s, b in rows[["source", "boot"]].itertuples(index=False)}))
    return (
        f"rank(s) {listing} show no room in {places}: no --kv-cache-memory suggestion, no "
        "'Available KV cache memory' that can be corrected for CUDA graphs, no DEBUG memory lines. "
        "Profile a boot without --kv-cache-memory-bytes, with VLLM_LOGGING_LEVEL=DEBUG."
    )


def check_outcomes(ledger: pd.DataFrame) -> None:
    """Raise :class:`LedgerError` for the first row whose boot did not finish sizing the KV cache.

    >>> check_outcomes(pd.DataFrame({"source": ["a.log"], "boot": [0], "rank": [0], "outcome": ["ok"]}))
    """
    if "outcome" not in ledger:
        return
    failed = ledger[ledger["outcome"].fillna("incomplete") != "ok"]
    if failed.empty:
        return
    row = failed.iloc[0]
    where = _where(ledger, row["source"], row["boot"], row["rank"], "outcome")
    more = f" ({len(failed) - 1} more row(s) not ok)" if len(failed) > 1 else ""
    raise LedgerError(
        f"{where}: boot {plain_value(row['boot'])} rank {plain_value(row['rank'])} did not boot cleanly "
        f"({plain_value(row['outcome']) or 'unknown'}: {plain_value(row.get('error')) or 'no text'}){more}; "
        "the budget is refused rather than computed from partial evidence. Leave that boot out "
        "or fix it and boot again."
    )


def budget_from_ledger(
    ledger: pd.DataFrame, reserve_bytes: int, block_bytes: int | None = None, assume_uniform: bool = False
) -> Budget:
    """The uniform budget from a ledger: checks, worst room per rank, then :func:`uniform_budget`.

    >>> GiB = 2**30
    >>> frame = pd.DataFrame({"source": ["a.log"] * 2, "boot": [0, 0], "rank": [0, 1],
    ...                       "room_bytes": [13 * GiB, 14 * GiB], "room_source": ["suggestion"] * 2,
    ...                       "outcome": ["ok", "ok"]})
    >>> budget_from_ledger(frame, GiB).uniform_budget_bytes == 12 * GiB
    True
    """
    check_outcomes(ledger)
    rooms = room_per_rank(ledger, assume_uniform=assume_uniform)
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
        where = _where(ledger, record["source"], record["boot"], weakest, "room_bytes")
        raise LedgerError(f"{where}: {exc} (weakest room {format_size(int(record['room_bytes']))})") from None
