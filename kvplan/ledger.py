"""Checks on a ledger: one compatibility key, every rank of TP × PP × DP, and each rank's **worst** room over
repeated boots (one lucky boot cannot set the value); every refusal is a :class:`LedgerError` naming file and line.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from kvplan.budget import median_bytes
from kvplan.columns import KEY_COLUMNS, LAYOUT_FIELDS, SIZING_CONFIG, is_known, world_size
from kvplan.releases import local_rank0_only, rank0_only_advice, version_tuple
from kvplan.units import GIB_2DP_HALF_STEP_BYTES, format_size

#: Key fields that every boot of a budget must show: which model, and how many ranks.
REQUIRED_KEY = ("model", *LAYOUT_FIELDS)


class LedgerError(ValueError):
    """A ledger from which no budget may be computed; the message names file and line."""


class LedgerWarning(UserWarning):
    """Evidence a budget uses with a caveat (different room sources, a manual boot left out)."""


def plain_value(value: object) -> Any:
    """A ledger cell as a plain Python value: None when missing, numpy scalars unwrapped."""
    if not is_known(value):
        return None
    return value.item() if hasattr(value, "item") else value


def _line(lines: Mapping, source: object, boot: object, rank: Any, column: str) -> int | None:
    """Line number of a ledger value when the reader recorded it (rank None: a boot-level value)."""
    rank_key = -1 if not is_known(rank) else int(rank)
    line: Any = lines.get((source, plain_value(boot), rank_key, column))
    return int(line) if is_known(line) else None


def _where(lines: Mapping, source: object, boot: object, rank: object, column: str) -> str:
    """``file:line`` of a ledger value when the reader recorded it (in ``lines``), else ``file``."""
    line = _line(lines, source, boot, rank, column)
    return f"{source}:{line}" if line is not None else f"{source}"


_HOST_POOL = ("kv_cache_tokens", "max_model_len", "available_kv_bytes")


def logged_launch_settings(ledger: pd.DataFrame) -> dict:
    """The :data:`~kvplan.columns.SIZING_CONFIG` settings the logs show with one value, and for a HiSparse pool
    ``host_pool`` (:func:`kvplan.kvspec.launch.host_pool_bound`)."""
    settings = {}
    for column in SIZING_CONFIG:
        if column in ledger.columns:
            values = {plain_value(value) for value in ledger[column].dropna()}
            if len(values) == 1:
                settings[column] = values.pop()
    if "host" in str(settings.get("kv_cache_pools", "")) and {*_HOST_POOL} <= {*ledger.columns}:
        shown = ledger.dropna(subset=list(_HOST_POOL))
        if len(shown):  # HiSparse: the lowest logged concurrency, the most memory (a 2-decimal GiB figure)
            ratio = shown["kv_cache_tokens"] / shown["max_model_len"]
            low = shown.loc[ratio.astype(float).idxmin()]
            most = int(shown["available_kv_bytes"].max()) + GIB_2DP_HALF_STEP_BYTES
            settings["host_pool"] = (int(low["kv_cache_tokens"]), int(low["max_model_len"]), most)
    return settings


def compatibility_key(ledger: pd.DataFrame, lines: Mapping | None = None) -> dict:
    """The one compatibility key shared by every row, as plain values (None = not logged); values that differ,
    or a :data:`REQUIRED_KEY` field some boot does not show, raise :class:`LedgerError` naming where."""
    if ledger.empty:
        raise LedgerError("the ledger is empty: no boot was found in the logs")
    lines = lines if lines is not None else {}
    key: dict = {}
    conflicts: list = []
    pairs = list(zip(_cells(ledger, "source"), _cells(ledger, "boot")))  # plain lists: no pandas per field
    boots = list(dict.fromkeys(pairs))
    for column in KEY_COLUMNS:  # a column the ledger lacks: no cell shown, None
        shown = [(pair, value) for pair, value in zip(pairs, _cells(ledger, column)) if value is not None]
        values = list(dict.fromkeys(value for _, value in shown))
        key[column] = values[0] if len(values) == 1 else None
        if values and column in REQUIRED_KEY:
            shown_boots = {pair for pair, _ in shown}
            unshown = [pair for pair in boots if pair not in shown_boots]
            if unshown:
                places = ", ".join(f"{s} boot {b} ({_where(lines, s, b, None, 'boot')})" for s, b in unshown)
                conflicts.append(f"{column}: {values[0]!r} shown, but not logged in {places}")
                key[column] = None
        if len(values) > 1:
            parts = []
            for value in values:
                showing = dict.fromkeys(pair for pair, shown_value in shown if shown_value == value)
                where = ", ".join(_value_where(lines, s, b, column, ledger, value) for s, b in showing)
                parts.append(f"{value!r} in {where}")
            conflicts.append(f"{column}: " + " vs ".join(parts))
    if conflicts:
        raise LedgerError(
            "the logs mix compatibility keys, so no single budget applies: " + "; ".join(conflicts)
        )
    return key


def _value_where(
    lines: Mapping, source: object, boot: object, column: str, ledger: pd.DataFrame, value: object
) -> str:
    """``file:line`` of the first row of a boot showing ``value`` in ``column``, else of the boot's ``column``."""
    cells = zip(
        _cells(ledger, "source"), _cells(ledger, "boot"), _cells(ledger, "rank"), _cells(ledger, column)
    )
    for row_source, row_boot, rank, shown in cells:
        if (row_source, row_boot) == (source, boot) and shown == value and rank is not None:
            line = _line(lines, source, boot, rank, column)
            if line is not None:
                return f"{source}:{line}"
    return _where(lines, source, boot, None, column)


def _layout(ledger: pd.DataFrame, key: dict) -> int | None:
    """TP × PP × DP of the key; refuses logs that do not show the model or the parallel layout (a frame
    without those columns: a :class:`LedgerWarning` that the ranks seen are every rank)."""
    unknown = [name for name in ("model", *LAYOUT_FIELDS) if name in ledger.columns and key.get(name) is None]
    if unknown:  # issue 26: vLLM adds _DP to a worker's name only when DP > 1, so such a name is no DP=1
        raise LedgerError(
            f"{_files(ledger)}: the logs do not show {', '.join(unknown)}, so the number of ranks TP × PP × DP "
            "(or the configuration the budget is for) is not known: the engine-config line ('Initializing a V1 "
            f"LLM engine … with config: … {unknown[-1]}=N'), non-default args or version line states it (a worker "
            "named Worker_DP… means DP > 1). Give the whole log from the start of each boot."
        )
    world = world_size(key)
    if world is None:
        ranks = sorted({int(rank) for rank in ledger["rank"].dropna()})
        _warn(
            f"{_files(ledger)}: TP × PP × DP is unknown (the ledger has no parallel-size columns): the "
            f"rank(s) seen, {', '.join(map(str, ranks))}, are taken as every rank"
        )
    return world


def _warn(message: str) -> str:
    warnings.warn(LedgerWarning(message), stacklevel=3)
    return message


def room_per_rank(
    ledger: pd.DataFrame,
    assume_uniform: bool = False,
    lines: Mapping | None = None,
    key: Mapping | None = None,
) -> pd.DataFrame:
    """Each rank's room over all boots of one key [bytes]: the worst (lowest) boot, its free memory, the spread;
    ``attrs["notes"]`` holds the warnings (each also a :class:`LedgerWarning`). A boot with any room shows one
    for every rank (else :class:`LedgerError`) unless ``assume_uniform``; a manual-value boot is left out."""
    lines = lines if lines is not None else {}
    key = dict(key) if key is not None else compatibility_key(ledger, lines)
    world = _layout(ledger, key)
    frame = ledger.assign(source=ledger.get("source", "the ledger"), boot=ledger.get("boot", 0))
    ranks_seen = sorted({int(rank) for rank in frame["rank"].dropna()})
    expected = list(range(world)) if world is not None else ranks_seen
    names = ("source", "boot", "rank", "room_bytes", "room_source", "init_free_bytes")
    cells = {name: _cells(frame, name) for name in names}  # plain lists: no pandas per row
    boots: dict[tuple, list[int]] = {}  # (source, boot) → its row positions, in order of first appearance
    for position, pair in enumerate(zip(cells["source"], cells["boot"])):
        if None not in pair:
            boots.setdefault(pair, []).append(position)
    notes, manual_boots = [], 0
    observations: dict[int, list[dict]] = {}
    for (source, boot), positions in boots.items():
        own, free = _boot_rooms(cells, positions, world, lines)
        if not own:
            notes.append(_roomless_boot(lines, source, boot, frame.iloc[positions]))
            manual_boots += 1
            continue
        lacking = [rank for rank in expected if rank not in own]
        if lacking and not assume_uniform:
            raise LedgerError(_lacking_message(lines, key, world, frame.iloc[positions], own, lacking))
        lowest = min(own.values(), key=lambda row: row["room_bytes"])
        for rank in expected:
            seen = {**own.get(rank, {**lowest, "room_source": "assumed_uniform"}), "own": rank in own}
            observations.setdefault(rank, []).append(
                {**seen, "init_free_bytes": free.get(rank), "source": source, "boot": boot}
            )
    if not observations:
        manual = f" ({manual_boots} manual-value boot(s): no room evidence)" if manual_boots else ""
        raise LedgerError(
            f"no rank shows its room in {_files(ledger)}{manual}: the logs hold no --kv-cache-memory "
            "suggestion, 'Available KV cache memory' or DEBUG memory lines; profile a boot without "
            "--kv-cache-memory-bytes"
        )
    records = {rank: _record(items) for rank, items in observations.items()}
    notes += _mixed_sources(lines, records)
    result = pd.DataFrame.from_dict(records, orient="index").sort_index().rename_axis("rank")
    result = result.astype({column: "Int64" for column in result if column not in ("room_source", "source")})
    result.attrs["notes"] = notes
    return result


def _boot_rooms(cells: dict, positions: list[int], world: int | None, lines: Mapping) -> tuple[dict, dict]:
    """One boot's own rooms by rank (``room_bytes``, ``room_source``) and each rank's lowest startup free memory;
    a rank outside TP × PP × DP is refused."""
    own: dict[int, dict] = {}
    free: dict[int, int] = {}
    for position in positions:
        rank, room, initial = (cells[name][position] for name in ("rank", "room_bytes", "init_free_bytes"))
        if rank is not None and initial is not None:
            free[int(rank)] = min(free.get(int(rank), initial), initial)
        if room is not None and rank is not None:
            own[int(rank)] = {"room_bytes": int(room), "room_source": cells["room_source"][position]}
    outside = [rank for rank in own if world is not None and rank >= world]
    if outside:
        source, boot = cells["source"][positions[0]], cells["boot"][positions[0]]
        raise LedgerError(
            f"{_where(lines, source, boot, outside[0], 'room_bytes')}: rank {outside[0]} of boot "
            f"{plain_value(boot)} lies outside TP × PP × DP = {world} "
            f"({_where(lines, source, boot, None, 'tensor_parallel_size')}): its room can neither be "
            "left out nor given to another rank; check the rank or the parallel sizes"
        )
    return own, free


def _cells(frame: pd.DataFrame, column: str) -> list:
    """A column's cells as plain Python values (None when missing), or Nones when there is no column."""
    if column not in frame:
        return [None] * len(frame)
    series = frame[column]
    return [
        None if missing else value.item() if hasattr(value, "item") else value
        for value, missing in zip(series.tolist(), series.isna().tolist())
    ]


def worst_room_position(room_bytes: Sequence[int]) -> int:
    """Position of a rank's worst (lowest) room among its boots, the earliest of equal ones (the one rule)."""
    return min(range(len(room_bytes)), key=room_bytes.__getitem__)


def _record(items: list[dict]) -> dict:
    """One rank's worst observation and the spread of its rooms over boots."""
    rooms = [item["room_bytes"] for item in items]
    worst = items[worst_room_position(rooms)]
    free = worst["init_free_bytes"]
    if free is None:
        known = [item["init_free_bytes"] for item in items if item["init_free_bytes"] is not None]
        free = min(known) if known else None
    return {
        "room_bytes": worst["room_bytes"],
        "room_source": worst["room_source"],
        "init_free_bytes": free,
        "room_min_bytes": min(rooms),
        "room_median_bytes": median_bytes(rooms),
        "room_max_bytes": max(rooms),
        "room_spread_bytes": max(rooms) - min(rooms),
        "boots": sum(item["own"] for item in items),
        "source": worst["source"],
        "boot": worst["boot"],
    }


def _roomless_boot(lines: Mapping, source: object, boot: object, rows: pd.DataFrame) -> str:
    """The warning about a manual-value boot (warned, returned); any other boot without room is refused."""
    where = _where(lines, source, boot, None, "boot")
    manual = rows["manual_kv_bytes"].dropna() if "manual_kv_bytes" in rows else pd.Series(dtype="Int64")
    if not manual.empty:
        return _warn(
            f"{where}: boot {plain_value(boot)} is a manual-value boot (--kv-cache-memory-bytes "
            f"{format_size(int(manual.min()))}): it shows the memory free at startup, not the room of its "
            "ranks, so it is no room evidence and is left out of the room. Judge it against the profiled "
            "boot's approval with `kvplan drift` or `kvplan gate`."
        )
    outcomes = ", ".join(
        f"rank {plain_value(rank)} {plain_value(outcome) or 'unknown'}"
        for rank, outcome in zip(rows["rank"], rows.get("outcome", pd.Series([None] * len(rows))))
    )
    raise LedgerError(
        f"{where}: boot {plain_value(boot)} shows no room on any rank ({outcomes or 'no ranks'}): it is no "
        "room evidence for a budget. Leave that boot out, or profile it again without "
        "--kv-cache-memory-bytes."
    )


def _mixed_sources(lines: Mapping, records: dict) -> list[str]:
    """The warning (warned, returned) when the worst rooms come from different evidence per rank."""
    sources = {rank: record["room_source"] for rank, record in records.items()}
    if len(set(sources.values()) - {"assumed_uniform"}) <= 1:
        return []
    listing = "; ".join(
        f"rank {rank}: {source} "
        f"({_where(lines, records[rank]['source'], records[rank]['boot'], rank, 'room_bytes')})"
        for rank, source in sorted(sources.items())
    )
    return [
        _warn(
            f"the rooms come from different evidence per rank ({listing}): a suggestion, an available-KV "
            "figure and a sum of parts are not measured alike; compare with care, or profile again so that "
            "every rank logs the same lines"
        )
    ]


def _files(ledger: pd.DataFrame) -> str:
    files = dict.fromkeys(str(source) for source in _cells(ledger, "source") if source is not None)
    return ", ".join(files) or "the ledger"


def _lacking_message(
    lines: Mapping, key: dict, world: int | None, rows: pd.DataFrame, own: dict, lacking: list[int]
) -> str:
    """Why a boot (``rows``) with room evidence shows none for some ranks, and what to do."""
    source, boot = plain_value(rows["source"].iloc[0]), plain_value(rows["boot"].iloc[0])
    name, listing = f"boot {boot}", ", ".join(map(str, lacking))
    where = _where(lines, source, boot, min(own), "room_bytes")
    if {plain_value(row.get("room_source")) for row in own.values()} == {"available_kv"}:
        version = version_tuple(key.get("vllm_version"))
        shown = "local rank 0" if local_rank0_only(version) else f"rank(s) {', '.join(map(str, sorted(own)))}"
        return (
            f"{where}: the logs show the room of {shown} only ({name}); rank(s) {listing} show none, and "
            f"rank 0 does not speak for the others. {rank0_only_advice(version)}."
        )
    present = {int(rank) for rank in rows["rank"].dropna()}
    missing = [rank for rank in lacking if rank not in present]
    if missing:
        size_where = _where(lines, source, boot, None, "tensor_parallel_size")
        return (
            f"{_where(lines, source, boot, None, 'boot')}: rank(s) {', '.join(map(str, missing))} missing from "
            f"{name}: TP × PP × DP = {world} ({size_where}) but the boot shows rank(s) "
            f"{', '.join(map(str, sorted(present)))} only. Give every rank's log (all nodes), or check "
            "that no worker died silently."
        )
    return (
        f"{where}: rank(s) {listing} show no room in {name} while rank(s) {', '.join(map(str, sorted(own)))} "
        "do: no --kv-cache-memory suggestion, no 'Available KV cache memory' that can be corrected for CUDA "
        "graphs, no DEBUG memory lines. Rooms of different boots are not mixed: profile a boot without "
        "--kv-cache-memory-bytes, with VLLM_LOGGING_LEVEL=DEBUG, or leave this boot out."
    )
