"""One boot into ledger rows: events to ranks, engine values, outcomes, the compatibility key."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pandas as pd

from kvplan.columns import GROUP_RANKS, LEDGER_COLUMNS, SIZING_CONFIG, world_size
from kvplan.io.ledger_frame import EMPTY_ROW, check_row
from kvplan.io.metadata import RoomRule, place_note
from kvplan.io.vllm.boots import KV_SIZED_COLUMNS, Boot, boot_key
from kvplan.io.vllm.conflicts import RankObservations, completed, safest, two_launches
from kvplan.io.vllm.manual import exact_manual
from kvplan.io.vllm.ranks import PRINTING_SCOPES, attribute, key_size, ray_worker_name

ENGINE_COLUMNS = ("kv_cache_tokens", "max_concurrency", "num_gpu_blocks")
#: What :func:`~kvplan.io.vllm.ranks.attribute` knows of a process it did not see (read only).
_NO_PROCESS: dict = {}
#: :data:`~kvplan.columns.LEDGER_COLUMNS` as a set, for membership.
_LEDGER_COLUMN_SET = frozenset(LEDGER_COLUMNS)
#: The last startup line of a rank in 0.5.0–0.6.3, which may print no boot-level completion line; later
#: releases log more after graph capture, so only "init engine … took" or "Application startup complete" does.
OLD_LAST_LINE_FAMILIES = ("graph_finished",)


@dataclass(frozen=True)
class _Failure:
    """An OOM or error line: how bad (0 = OOM first), where, what, who printed it, and when."""

    priority: int
    line: int
    outcome: str
    text: str
    raw: int | str
    process: str
    after_startup: bool
    failed_in: str | None = None


def resolve_boot(
    boot: Boot, source: str, room_rule: RoomRule | None = None, provenance: bool = True
) -> tuple[list[dict], list[tuple], list[str], dict]:
    """Attribute a boot's events to ranks and compute each rank's row (its room with ``room_rule``);
    without ``provenance`` the provenance rows returned are none."""
    warnings = list(boot.warnings)
    key, key_origin, version = boot_key(boot)
    printed = {event.key for event in boot.events if event.scope in PRINTING_SCOPES}
    ranks_of = attribute(boot, key, version, source, warnings, printed)
    rows: dict[int, dict] = {}
    origin: dict[tuple[int, str], tuple[int, int | str]] = {}

    def row(rank: int) -> dict:
        if rank not in rows:
            rows[rank] = {"rank": rank}
        return rows[rank]

    for process_key, info in ranks_of.items():
        if info.get("rank") is not None and process_key in printed:
            target = row(info["rank"])
            for name in (*GROUP_RANKS, "process", "pid"):
                if info.get(name) is not None:
                    target[name] = info[name]
    if boot.conflicts:
        raise two_launches(boot.conflicts, source)
    unattributed, failures, serving_failures, engine_values, seen = _sort_events(boot, ranks_of, row, origin)
    if unattributed:
        warnings.append(
            place_note(
                "unattributed-values",
                source,
                unattributed[0],
                f"{len(unattributed)} line(s) with per-rank values carry no process "
                "prefix that names a rank; they are left out of the ledger (first shown)",
            )
        )
    if serving_failures:
        warnings.append(
            place_note(
                "failure-after-startup",
                source,
                serving_failures[0],
                f"out-of-memory or error after startup completed "
                f"({len(serving_failures)} line(s)): the boot is marked oom/error, so no budget or gate "
                "passes on it; the value may be too high for live traffic",
            )
        )
    sizes = key_size(key, "tensor_parallel_size"), key_size(key, "pipeline_parallel_size")
    _attach_engine_values(engine_values, rows, sizes, origin, source, warnings, row)
    if not rows and (failures or boot.events):
        single = (sizes[0] or 1) * (sizes[1] or 1)
        if single == 1 and not unattributed:
            row(0)
    flags = _boot_flags(boot, key, version)
    flags["startup_done"] = _startup_done(boot, rows, key)
    _keep_safest(seen, rows, flags, origin, source, boot.index, warnings, room_rule)
    exact_manual(rows, boot.config, origin, source, warnings)
    for rank, values in rows.items():
        group_ranks(values, rank, sizes, key, version)
        _fill_row(values, rank, boot, source, failures, flags, origin, warnings, room_rule)
        check_row(values, rank, origin, source)
    warnings.extend(_caveats(boot, source))
    sizing = {column: boot.config[column] for column in SIZING_CONFIG if column in boot.config}
    if room_rule is not None:
        warnings += room_rule.boot_warnings(rows, key, flags, source, boot, origin)
    # the boot's key and sizing configuration fill what a rank's own values leave open
    shared = {column: value for column, (value, *_rest) in sizing.items()} | key
    for rank, values in rows.items():
        rows[rank] = {**EMPTY_ROW, **shared, **values, "source": source, "boot": boot.index}
    records = [rows[rank] for rank in sorted(rows)]
    provenance_rows = (
        _provenance(rows, origin, key, key_origin, sizing, source, boot.index) if provenance else []
    )
    info = {
        "source": source,
        "boot": boot.index,
        "first_line": boot.first_line,
        "last_line": boot.last_line,
        "vllm_version": key.get("vllm_version"),
        "compatibility_key": dict(key),
        "ranks": sorted(rows),
        "outcomes": {rank: rows[rank].get("outcome") for rank in sorted(rows)},
    }
    return records, provenance_rows, warnings, info


def _provenance(
    rows: dict, origin: dict, key: dict, key_origin: dict, sizing: dict, source: str, boot: int
) -> list[tuple]:
    """The boot's provenance rows (:data:`~kvplan.io.metadata.PROVENANCE_COLUMNS`): the ranks' values,
    then the key's and the sizing configuration's (rank ``NA``); the reader puts them in provenance
    order (:class:`~kvplan.io.metadata.ProvenanceRows`) when they are read."""
    provenance = [
        (source, line, boot, rank, column, rows[rank].get(column), raw)
        for (rank, column), (line, raw) in origin.items()
        if rank in rows and column in _LEDGER_COLUMN_SET
    ]
    provenance.extend(
        (source, line, boot, pd.NA, column, key[column], raw) for column, (line, raw) in key_origin.items()
    )
    provenance.extend(
        (source, line, boot, pd.NA, column, value, raw)
        for column, (value, line, raw, _family) in sizing.items()
    )
    return provenance


def _sort_events(
    boot: Boot, ranks_of: dict, row, origin: dict
) -> tuple[list, dict, list, dict, RankObservations]:
    """Put each event where it belongs: the lines of unattributed per-rank values, the worst failure per
    rank (None: engine or API server; OOM first, then the earliest; ``failed_in`` the last known vLLM frame
    its process printed before it), the lines of failures after startup, engine values by DP rank, and
    each rank's observations (:mod:`~kvplan.io.vllm.conflicts`); an old release's last line marks ``_done``."""
    done_line = boot.flags.get("startup_done", (None, None))[1]
    unattributed: list[int] = []
    failures: dict[int | None, _Failure] = {}
    serving_failures: list[int] = []
    engine_values: dict[int | None, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    seen = RankObservations()
    frames: dict = {}
    rank_of = {process_key: info.get("rank") for process_key, info in ranks_of.items()}
    for event in boot.events:
        scope = event.scope
        if scope == "rank":  # the most common: one rank's values
            rank = rank_of.get(event.key)
            if rank is None:
                unattributed.append(event.line)
                continue
            target = row(rank)
            if event.family in OLD_LAST_LINE_FAMILIES:
                target["_done"] = True
            values = event.values
            if "gpu_memory_utilization" in values:  # a key field, not the rank's
                values = {name: value for name, value in values.items() if name != "gpu_memory_utilization"}
            seen.add(rank, event.key, event.family, values, (event.line, event.raw))
            continue
        info = ranks_of.get(event.key, _NO_PROCESS)
        rank = info.get("rank")
        if scope == "frame":
            frames[event.key] = event.values["failed_in"]
            continue
        if scope == "outcome":
            after = done_line is not None and event.line > done_line
            if after:
                serving_failures.append(event.line)
            outcome = event.values["outcome"]
            failure = _Failure(
                0 if outcome == "oom" else event.values.get("priority", 1),
                event.line,
                outcome,
                event.values["text"],
                event.raw,
                info.get("process") or "a process without prefix",
                after,
                frames.get(event.key),
            )
            if rank not in failures or failures[rank].priority > failure.priority:
                failures[rank] = failure
            continue
        if scope == "engine":
            for name, value in event.values.items():
                engine_values[info.get("engine_dp")][name].append((value, event))
    return unattributed, failures, serving_failures, engine_values, seen


def _keep_safest(
    seen: RankObservations,
    rows: dict,
    flags: dict,
    origin: dict,
    source: str,
    boot: int,
    warnings: list,
    room_rule: RoomRule | None,
) -> None:
    """Each rank's values from its safest observation (the lowest room by ``room_rule``; without it the
    least free memory), with a note when several conflict."""
    for rank in seen.ranks():
        observations = completed(seen.of(rank))
        if len(observations) == 1:  # the common case: nothing conflicts
            chosen, note = observations[0], None
        else:
            room_of = _room_by(room_rule, rows[rank], rank, flags, source)
            chosen, note = safest(rank, observations, room_of, source, boot)
        rows[rank].update(chosen.values)
        origin.update({(rank, name): line_raw for name, line_raw in chosen.origin.items()})
        if note is not None:
            warnings.append(note)


def _room_by(room_rule: RoomRule | None, row: dict, rank: int, flags: dict, source: str):
    """``room_of`` for :func:`~kvplan.io.vllm.conflicts.safest`: the room one observation's values give
    on top of the rank's ``row`` by ``room_rule`` (None without a rule)."""

    def room_of(values: dict, where: dict) -> int | None:
        if room_rule is None:
            return None
        places = {(rank, name): line_raw for name, line_raw in where.items()}
        room = room_rule.room({**row, **values}, rank, flags, places, source, [])
        return None if room is None else room[0]

    return room_of


def _caveats(boot: Boot, source: str) -> list:
    """Notes for the lines that change what this boot's room means (families.ROOM_CAVEATS)."""
    return [
        place_note(name.removeprefix("caveat:"), source, value[1], value[0])
        for name, value in boot.flags.items()
        if name.startswith("caveat:")
    ]


def _attach_engine_values(
    engine_values: dict, rows: dict, sizes: tuple, origin: dict, source: str, warnings: list, row
) -> None:
    """Engine-level values onto ranks: one line per worker in rank order (0.9–0.11.0), else to all
    (``sizes``: the key's TP and PP sizes, None where not known)."""
    tp_pp = (sizes[0] or 1) * (sizes[1] or 1)
    for dp, columns in engine_values.items():
        targets = sorted(
            rank for rank, values in rows.items() if dp is None or values.get("dp_rank", rank // tp_pp) == dp
        )
        if not targets and tp_pp == 1 and (dp is None or sizes[0] is not None):
            row(dp or 0)
            targets = [dp or 0]
        for column, pairs in columns.items():
            if column not in ENGINE_COLUMNS:
                continue
            if len(pairs) == len(targets) > 1:
                assignment = list(zip(targets, pairs))
            else:
                chosen = min(pairs, key=lambda pair: pair[0])
                if len({value for value, _event in pairs}) > 1:
                    warnings.append(
                        place_note(
                            "engine-values-differ",
                            source,
                            chosen[1].line,
                            f"{len(pairs)} different '{column}' lines for "
                            f"{len(targets)} rank(s); the lowest is kept for every rank",
                        )
                    )
                assignment = [(rank, chosen) for rank in targets]
            for rank, (value, event) in assignment:
                if event.family == "api_num_gpu_blocks" and not _holds_the_minimum(rows, targets, rank):
                    continue  # the engine's block count after min-unification: the limiting rank's own
                rows[rank][column] = value
                origin[(rank, column)] = (event.line, event.raw)


def _holds_the_minimum(rows: dict, targets: list, rank: int) -> bool:
    """Whether ``rank`` logged the fewest KV tokens of ``targets`` (0.9–0.11.0 print each worker's own,
    before vLLM takes the minimum), or no rank logged tokens of its own."""
    tokens = [rows[other].get("kv_cache_tokens") for other in targets]
    shown = [value for value in tokens if value is not None]
    return not shown or rows[rank].get("kv_cache_tokens") == min(shown)


def _startup_done(boot: Boot, rows: dict, key: dict) -> bool:
    """Whether the boot got through startup, for all its ranks at once: its completion line, or
    (old releases that may print none) the last startup line of every rank of the world.
    """
    ranks = range(max(world_size(key) or 0, len(rows), 1))
    return "startup_done" in boot.flags or all(rows.get(rank, {}).get("_done") for rank in ranks)


def _boot_flags(boot: Boot, key: dict, version: tuple | None) -> dict:
    """Whether vLLM subtracted a CUDA-graph estimate before sizing KV, and whether graphs were off."""
    if "estimate_applied" in boot.flags:
        applied = bool(boot.flags["estimate_applied"][0])
    else:
        applied = version is not None and version >= (0, 20)
    return {"estimate_applied": applied, "eager": key.get("enforce_eager") is True, "version": version}


def group_ranks(values: dict, rank: int, sizes: tuple, key: dict, version: tuple | None) -> None:
    """Fill the group ranks a rank's row lacks (issue 26): TP, PP and DP from its global rank under the key's
    TP and PP ``sizes``; 0 for a group known to have one member (PCP before vLLM 0.12, DCP when the key
    states size 1) and for rank 0, first in every group; any other stays unknown.

    >>> row = {}
    >>> group_ranks(row, 5, (4, 1), {"decode_context_parallel_size": 1}, (0, 11, 0))
    >>> row
    {'tp_rank': 1, 'pp_rank': 0, 'dp_rank': 1, 'pcp_rank': 0, 'dcp_rank': 0}
    """
    tp_size, pp_size = sizes
    if tp_size is not None and pp_size is not None:
        values.setdefault("tp_rank", rank % tp_size)
        values.setdefault("pp_rank", rank // tp_size % pp_size)
        values.setdefault("dp_rank", rank // (tp_size * pp_size))
    if rank == 0:
        for column in GROUP_RANKS:
            values.setdefault(column, 0)
    if version is not None and version < (0, 12):
        values.setdefault("pcp_rank", 0)
    if key_size(key, "decode_context_parallel_size") == 1:
        values.setdefault("dcp_rank", 0)


def _fill_row(
    values: dict,
    rank: int,
    boot: Boot,
    source: str,
    failures: dict,
    flags: dict,
    origin: dict,
    warnings: list,
    room_rule: RoomRule | None,
) -> None:
    """Complete one rank's row: its outcome, error and room."""
    failure, engine = failures.get(rank), failures.get(None)
    # a Ray worker whose KV lines Ray collapsed into another worker's [repeated Nx across cluster] line
    # sized its KV cache like the rest: its outcome is the boot's, with no room of its own
    collapsed = bool(boot.ray_repeats) and ray_worker_name(str(values.get("process") or ""))
    sized = collapsed or any(values.get(column) is not None for column in KV_SIZED_COLUMNS)
    if failure is not None:
        text = failure.text
        if failure.after_startup:
            text = f"after startup completed, at {source}:{failure.line}: {text}"
        values.update(outcome=failure.outcome, error=text, failed_in=failure.failed_in)
        origin[(rank, "outcome")] = (failure.line, failure.raw)
    elif engine is not None:
        # the engine or API server failed; this rank logged no failure of its own
        phase = " after startup completed" if engine.after_startup else ""
        values.update(
            outcome="error",
            error=f"not this rank's own failure: {engine.process} failed{phase}, at {source}:{engine.line}: "
            f"{engine.text}",
            failed_in=engine.failed_in,
        )
        origin[(rank, "outcome")] = (engine.line, engine.raw)
    elif not sized:
        values.update(
            outcome="incomplete",
            error=f"the log stops before the KV cache was sized (last line read: {boot.last_line})",
        )
        origin[(rank, "outcome")] = (boot.last_line, "")
    elif flags["startup_done"]:
        values["outcome"] = "ok"
    else:
        values.update(
            outcome="incomplete",
            error="the log stops after the KV cache was sized but before startup completed: no "
            "'init engine … took' or 'Application startup complete' line "
            f"(last line read: {boot.last_line})",
        )
        origin[(rank, "outcome")] = (boot.last_line, "")
    room = None if room_rule is None else room_rule.room(values, rank, flags, origin, source, warnings)
    if room is not None:
        values["room_bytes"], values["room_source"], line_raw = room
        origin[(rank, "room_bytes")] = line_raw
