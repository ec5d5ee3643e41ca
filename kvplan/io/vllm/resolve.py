"""One boot into ledger rows: events to ranks, engine values, outcomes, the compatibility key."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pandas as pd

from kvplan.columns import GROUP_RANKS, LEDGER_COLUMNS, SIZING_CONFIG, world_size
from kvplan.io.ledger_frame import EMPTY_ROW, check_row
from kvplan.io.metadata import RoomRule, place_note
from kvplan.io.vllm.boots import KV_SIZED_COLUMNS, Boot, boot_key
from kvplan.io.vllm.conflicts import RankObservations, completed, safest, two_launches
from kvplan.io.vllm.manual import exact_manual
from kvplan.io.vllm.ranks import PRINTING_SCOPES, attribute, key_size, ray_worker_name

ENGINE_COLUMNS = ("kv_cache_tokens", "max_concurrency", "num_gpu_blocks")
_LEDGER_COLUMN_SET = frozenset(LEDGER_COLUMNS)
#: The last startup line of a rank in 0.5.0–0.6.3, which may print no boot-level completion line (later
#: releases log more after graph capture: only "init engine … took" or "Application startup complete" says).
OLD_LAST_LINE_FAMILIES = ("graph_finished",)


@dataclass(frozen=True)
class _Failure:
    """An OOM or error line: how bad (0: OOM, first), where, what, who printed it, and when."""

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
) -> tuple[list[dict], list[tuple], list, dict]:
    """``(rows, provenance rows, warnings, summary)`` of one boot: a row per rank (its room with ``room_rule``)."""
    key, key_origin, version = boot_key(boot)
    printed = {event.key for event in boot.events if event.scope in PRINTING_SCOPES}
    ranks_of, notes = attribute(boot, key, version, source, printed)
    ranks = _Ranks(boot, source, room_rule, [*boot.warnings, *notes])
    ranks.name(ranks_of, printed)
    if boot.conflicts:
        raise two_launches(boot.conflicts, source)
    events = _sort_events(boot, ranks_of, ranks.row)
    ranks.event_notes(events)
    sizes = key_size(key, "tensor_parallel_size"), key_size(key, "pipeline_parallel_size")
    ranks.attach_engine_values(events.engine_values, sizes)
    rows, origin, warnings = ranks.rows, ranks.origin, ranks.warnings
    single = (sizes[0] or 1) * (sizes[1] or 1) == 1 and not events.unattributed
    if not rows and (events.failures or boot.events) and single:
        ranks.row(0)
    # whether vLLM subtracted a CUDA-graph estimate before sizing KV; the boot got through startup (its
    # completion line, or in old releases that may print none every rank's last startup line)
    applied = boot.flags.get("estimate_applied", (version is not None and version >= (0, 20),))[0]
    world = range(max(world_size(key) or 0, len(rows), 1))
    flags = {"estimate_applied": bool(applied), "eager": key.get("enforce_eager") is True, "version": version}
    flags["startup_done"] = "startup_done" in boot.flags or all(
        rows.get(rank, {}).get("_done") for rank in world
    )
    ranks.keep_safest(events.seen, flags)
    exact_manual(rows, boot.config, origin, source, warnings)
    for rank, values in rows.items():
        group_ranks(values, rank, sizes, key, version)
        ranks.fill_row(rank, events.failures, flags)
        check_row(values, rank, origin, source)
    for name, value in boot.flags.items():  # the lines that change what the room means (ROOM_CAVEATS)
        if name.startswith("caveat:"):
            warnings.append(place_note(name.removeprefix("caveat:"), source, value[1], value[0]))
    sizing = {column: boot.config[column] for column in SIZING_CONFIG if column in boot.config}
    if room_rule is not None:
        warnings += room_rule.boot_warnings(rows, key, flags, source, boot, origin)
    # the boot's key and sizing configuration fill what a rank's own values leave open
    shared = {column: value for column, (value, *_rest) in sizing.items()} | key
    for rank, values in rows.items():
        rows[rank] = {**EMPTY_ROW, **shared, **values, "source": source, "boot": boot.index}
    summary = {
        "source": source,
        "boot": boot.index,
        "first_line": boot.first_line,
        "last_line": boot.last_line,
        "vllm_version": key.get("vllm_version"),
        "compatibility_key": dict(key),
        "ranks": sorted(rows),
        "outcomes": {rank: rows[rank].get("outcome") for rank in sorted(rows)},
    }
    kept = ranks.provenance(key, key_origin, sizing) if provenance else []
    return [rows[rank] for rank in sorted(rows)], kept, warnings, summary


@dataclass
class _Events:
    """A boot's events sorted (:func:`_sort_events`): lines of per-rank values no rank was named for, the worst
    failure per rank (None: engine or API server), lines of failures after startup, engine values by DP rank
    (None: not given) as column → [(value, event)], and each rank's observations."""

    unattributed: list[int] = field(default_factory=list)
    failures: dict[int | None, _Failure] = field(default_factory=dict)
    serving: list[int] = field(default_factory=list)
    engine_values: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    seen: RankObservations = field(default_factory=RankObservations)


class _Ranks:
    """The rows of one boot's ranks as they are filled, each value's ``(rank, column) → (line, raw)``, warnings."""

    def __init__(self, boot: Boot, source: str, room_rule: RoomRule | None, warnings: list) -> None:
        self.boot, self.source, self.room_rule, self.warnings = boot, source, room_rule, warnings
        self.rows: dict[int, dict] = {}
        self.origin: dict[tuple[int, str], tuple[int, int | str]] = {}

    def row(self, rank: int) -> dict:
        if rank not in self.rows:
            self.rows[rank] = {"rank": rank}
        return self.rows[rank]

    def name(self, ranks_of: dict, printed: set) -> None:
        """Start the row of each process that printed for a rank, with its group ranks, name and pid."""
        for process_key, info in ranks_of.items():
            if info.get("rank") is not None and process_key in printed:
                named = (name for name in (*GROUP_RANKS, "process", "pid") if info.get(name) is not None)
                self.row(info["rank"]).update({name: info[name] for name in named})

    def event_notes(self, events: _Events) -> None:
        """The notes on values no rank could be named for and on failures after startup."""
        if events.unattributed:
            text = (
                f"{len(events.unattributed)} line(s) with per-rank values carry no process prefix that names a "
                "rank; they are left out of the ledger (first shown)"
            )
            self.warnings.append(place_note("unattributed-values", self.source, events.unattributed[0], text))
        if events.serving:
            text = (
                f"out-of-memory or error after startup completed ({len(events.serving)} line(s)): the boot is "
                "marked oom/error, so no budget or gate passes on it; the value may be too high for live traffic"
            )
            self.warnings.append(place_note("failure-after-startup", self.source, events.serving[0], text))

    def provenance(self, key: dict, key_origin: dict, sizing: dict) -> list[tuple]:
        """The provenance rows (:data:`~kvplan.io.metadata.PROVENANCE_COLUMNS`) of the ranks', key's and sizing
        configuration's (rank ``NA``) values, by line (a default first), rank as text, column."""
        source, boot, rows = self.source, self.boot.index, self.rows
        found = [
            *(
                (source, line, boot, rank, column, rows[rank].get(column), raw)
                for (rank, column), (line, raw) in self.origin.items()
                if rank in rows and column in _LEDGER_COLUMN_SET
            ),
            *(
                (source, line, boot, pd.NA, column, key[column], raw)
                for column, (line, raw) in key_origin.items()
            ),
            *(
                (source, line, boot, pd.NA, column, value, raw)
                for column, (value, line, raw, _f) in sizing.items()
            ),
        ]
        return sorted(found, key=lambda row: (-1 if row[1] is pd.NA else row[1], str(row[3]), row[4]))

    def keep_safest(self, seen: RankObservations, flags: dict) -> None:
        """Each rank's values from its safest observation (:func:`~kvplan.io.vllm.conflicts.safest`)."""
        for rank in seen.ranks():
            observations = completed(seen.of(rank))
            if len(observations) == 1:  # the common case: nothing conflicts
                chosen, note = observations[0], None
            else:
                chosen, note = safest(
                    rank, observations, self._room_by(rank, flags), self.source, self.boot.index
                )
            self.rows[rank].update(chosen.values)
            self.origin.update({(rank, name): line_raw for name, line_raw in chosen.origin.items()})
            if note is not None:
                self.warnings.append(note)

    def _room_by(self, rank: int, flags: dict):
        """``room_of`` for :func:`~kvplan.io.vllm.conflicts.safest`: the room of an observation's values on top of
        the rank's row (None without a room rule)."""
        room_rule, row, source = self.room_rule, self.rows[rank], self.source

        def room_of(values: dict, where: dict) -> int | None:
            if room_rule is None:
                return None
            places = {(rank, name): line_raw for name, line_raw in where.items()}
            room = room_rule.room({**row, **values}, rank, flags, places, source, [])
            return None if room is None else room[0]

        return room_of

    def attach_engine_values(self, engine_values: dict, sizes: tuple) -> None:
        """Engine-level values onto ranks: one line per worker in rank order (0.9–0.11.0), else to all; ``sizes``
        the key's TP and PP sizes (None: not known)."""
        rows, tp_pp = self.rows, (sizes[0] or 1) * (sizes[1] or 1)
        for dp, columns in engine_values.items():
            targets = sorted(
                rank
                for rank, values in rows.items()
                if dp is None or values.get("dp_rank", rank // tp_pp) == dp
            )
            if not targets and tp_pp == 1 and (dp is None or sizes[0] is not None):
                self.row(dp or 0)
                targets = [dp or 0]
            for column, pairs in columns.items():
                if column not in ENGINE_COLUMNS:
                    continue
                for rank, (value, event) in self._assignment(column, pairs, targets):
                    if event.family == "api_num_gpu_blocks" and not _holds_the_minimum(rows, targets, rank):
                        continue  # the engine's block count after min-unification: the limiting rank's own
                    rows[rank][column] = value
                    self.origin[(rank, column)] = (event.line, event.raw)

    def _assignment(self, column: str, pairs: list, targets: list) -> list:
        """``(rank, (value, event))`` of one engine column: a line per rank in order, else the lowest for all."""
        if len(pairs) == len(targets) > 1:
            return list(zip(targets, pairs))
        chosen = min(pairs, key=lambda pair: pair[0])
        if len({value for value, _event in pairs}) > 1:
            text = (
                f"{len(pairs)} different '{column}' lines for {len(targets)} rank(s); the lowest is kept for "
                "every rank"
            )
            self.warnings.append(place_note("engine-values-differ", self.source, chosen[1].line, text))
        return [(rank, chosen) for rank in targets]

    def fill_row(self, rank: int, failures: dict, flags: dict) -> None:
        """Complete one rank's row: its outcome, error and room."""
        values = self.rows[rank]
        outcome, line_raw = self._outcome(values, failures.get(rank), failures.get(None), flags)
        values.update(outcome)
        if line_raw is not None:
            self.origin[(rank, "outcome")] = line_raw
        if self.room_rule is None:
            return
        room = self.room_rule.room(values, rank, flags, self.origin, self.source, self.warnings)
        if room is not None:
            values["room_bytes"], values["room_source"], self.origin[(rank, "room_bytes")] = room

    def _outcome(self, values: dict, failure, engine, flags: dict) -> tuple[dict, tuple | None]:
        """A rank's outcome and error (its own failure, the engine's, or how far the log goes), and their (line, raw)."""
        source, last = self.source, self.boot.last_line
        if failure is not None:
            text = failure.text
            if failure.after_startup:
                text = f"after startup completed, at {source}:{failure.line}: {text}"
            return dict(outcome=failure.outcome, error=text, failed_in=failure.failed_in), (
                failure.line,
                failure.raw,
            )
        if engine is not None:  # the engine or API server failed; this rank logged no failure of its own
            phase = " after startup completed" if engine.after_startup else ""
            text = f"not this rank's own failure: {engine.process} failed{phase}, at {source}:{engine.line}: {engine.text}"
            return dict(outcome="error", error=text, failed_in=engine.failed_in), (engine.line, engine.raw)
        # a Ray worker whose KV lines Ray collapsed into another worker's [repeated Nx across cluster] line
        # sized its KV cache like the rest: its outcome is the boot's, with no room of its own
        collapsed = bool(self.boot.ray_repeats) and ray_worker_name(str(values.get("process") or ""))
        if not collapsed and all(values.get(column) is None for column in KV_SIZED_COLUMNS):
            error = f"the log stops before the KV cache was sized (last line read: {last})"
            return dict(outcome="incomplete", error=error), (last, "")
        if flags["startup_done"]:
            return {"outcome": "ok"}, None
        error = (
            "the log stops after the KV cache was sized but before startup completed: no 'init engine … took' or "
            f"'Application startup complete' line (last line read: {last})"
        )
        return dict(outcome="incomplete", error=error), (last, "")


def _sort_events(boot: Boot, ranks_of: dict, row) -> _Events:
    """Each event where it belongs (:class:`_Events`): the worst failure per rank (OOM, then the earliest; its
    ``failed_in`` the last vLLM frame its process printed), each rank's values as observations."""
    done_line = boot.flags.get("startup_done", (None, None))[1]
    sorted_ = _Events()
    frames: dict = {}
    rank_of = {process_key: info.get("rank") for process_key, info in ranks_of.items()}
    for event in boot.events:
        scope = event.scope
        if scope == "rank":  # the most common: one rank's values
            rank = rank_of.get(event.key)
            if rank is None:
                sorted_.unattributed.append(event.line)
                continue
            target = row(rank)
            if event.family in OLD_LAST_LINE_FAMILIES:
                target["_done"] = True
            values = event.values
            if "gpu_memory_utilization" in values:  # a key field, not the rank's
                values = {name: value for name, value in values.items() if name != "gpu_memory_utilization"}
            sorted_.seen.add(rank, event.key, event.family, values, (event.line, event.raw))
            continue
        info = ranks_of.get(event.key, {})
        if scope == "frame":
            frames[event.key] = event.values["failed_in"]
        elif scope == "outcome":
            after = done_line is not None and event.line > done_line
            if after:
                sorted_.serving.append(event.line)
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
            held = sorted_.failures.get(info.get("rank"))
            if held is None or held.priority > failure.priority:
                sorted_.failures[info.get("rank")] = failure
        elif scope == "engine":
            for name, value in event.values.items():
                sorted_.engine_values[info.get("engine_dp")][name].append((value, event))
    return sorted_


def _holds_the_minimum(rows: dict, targets: list, rank: int) -> bool:
    """Whether ``rank`` logged the fewest KV tokens of ``targets`` (0.9–0.11.0 print each worker's own, before
    vLLM takes the minimum), or none did."""
    tokens = [rows[other].get("kv_cache_tokens") for other in targets]
    shown = [value for value in tokens if value is not None]
    return not shown or rows[rank].get("kv_cache_tokens") == min(shown)


def group_ranks(values: dict, rank: int, sizes: tuple, key: dict, version: tuple | None) -> None:
    """Fill the group ranks a row lacks (issue 26): TP, PP and DP from its global rank under the TP and PP
    ``sizes``; 0 for a group of one member (PCP before 0.12, DCP of size 1) and for rank 0; else unknown."""
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
