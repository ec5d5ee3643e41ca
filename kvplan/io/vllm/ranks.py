"""Which rank printed a line: process prefixes, rank-assignment lines, V0 and Ray workers without one."""

from __future__ import annotations

import re
from functools import lru_cache

from kvplan.columns import GROUP_RANKS, world_size
from kvplan.io.ledger_frame import missing
from kvplan.io.metadata import place_note
from kvplan.io.vllm.boots import Boot
from kvplan.io.vllm.records import worker_groups

_FRONTEND_RE = re.compile(r"(?:APIServer|ApiServer|DPSupervisor|MainProcess|DPCoordinator)\w*")
_ENGINE_RE = re.compile(r"(?:EngineCore|DPEngineCoreActor)(?:_DP(\d+)|_(\d+))?")
_GROUP_RE = re.compile(r"(DP|PP|PCP|TP|DCP|EP)(\d+)")
#: Ray's name for a vLLM worker actor (V0 and V1): ``(RayWorkerWrapper pid=N, ip=A.B.C.D)``.
_RAY_WORKER_RE = re.compile(r"RayWorker\w*")


def key_size(key: dict, name: str) -> int | None:
    value = key.get(name)
    return None if missing(value) else int(value)


#: The groups of the world's layout, outermost first: vLLM lays its ranks out as
#: ``arange(world).reshape(-1, DP, PP, PCP, TP)`` (``distributed/parallel_state.py``; PCP from 0.12), so a
#: global rank is ``((dp·PP + pp)·PCP + pcp)·TP + tp``. DCP splits TP ranks and EP spans DP × PCP × TP:
#: neither moves a global rank.
LAYOUT_GROUPS = ("DP", "PP", "PCP", "TP")
#: Sizes of the layout's inner groups (PP, PCP, TP): what a global rank needs (None: not known).
Sizes = tuple[int | None, int | None, int | None]


@lru_cache(maxsize=1024)
def _rank_from_name(name: str, sizes: Sizes) -> tuple[tuple[str, int], ...]:
    """Rank and group ranks as ``(name, value)`` pairs from a process name (``Worker_PP1_TP0``, ``VllmWorker
    rank=2``) under the PP, PCP and TP ``sizes`` (None: unknown, then no global rank where it needs it)."""
    match = re.fullmatch(r"VllmWorker rank=(\d+)", name)
    if match:
        return (("rank", int(match.group(1))),)
    stated = worker_groups(name)
    pp_size, _pcp_size, tp_size = sizes
    if stated is None or name == "Worker" or (name == "VllmWorker" and (tp_size or 1) * (pp_size or 1) != 1):
        return ()
    groups = dict(stated)
    # a part the name lacks is a group of one member, rank 0 (issue 26: EP is named whenever it is on)
    info = {column: groups.get(column.removesuffix("_rank").upper(), 0) for column in GROUP_RANKS}
    rank = groups.get("DP", 0)
    for group, size in zip(LAYOUT_GROUPS[1:], sizes):
        index = groups.get(group, 0)
        if size is None and rank:  # an outer group's rank counts in units of this size: unknown
            return tuple(info.items())
        rank = index if size is None else rank * size + index
    info["rank"] = rank
    return tuple(info.items())


@lru_cache(maxsize=1024)
def layout_sizes(pp_tp_dp: tuple[int | None, ...], names: frozenset[str]) -> tuple[Sizes, dict[str, int]]:
    """The PP, PCP and TP sizes numbering the workers' global ranks, and those bounded (read only): the key's PP, TP
    and DP, else from the worker names (a group no name shows has one member, one they show its largest rank + 1)."""
    stated = {"PP": pp_tp_dp[0], "TP": pp_tp_dp[1]}
    seen = [dict(groups) for groups in map(worker_groups, names) if groups]
    sizes, bounded = [], {}
    dp_seen = [groups["DP"] for groups in seen if "DP" in groups]
    if dp_seen and pp_tp_dp[2] is None:  # a _DP part: DP > 1 (issue 26)
        bounded["DP"] = max(max(dp_seen) + 1, 2)
    for group in LAYOUT_GROUPS[1:]:
        size = stated.get(group)
        if size is None and seen:
            largest = max((groups[group] for groups in seen if group in groups), default=None)
            size = 1 if largest is None else largest + 1
            if size > 1:
                bounded[group] = size
        sizes.append(size)
    return (sizes[0], sizes[1], sizes[2]), bounded


PRINTING_SCOPES = frozenset(("rank", "assign", "outcome"))


def attribute(boot: Boot, key: dict, version: tuple | None, source: str, printed: set) -> tuple[dict, list]:
    """Process ``(pid, ip)`` (None: no prefix) → rank, group ranks, roles; and the notes on how ranks were told.
    ``printed``: the processes with an event of :data:`PRINTING_SCOPES`."""
    world = world_size(key)
    all_names = {name for names in boot.names.values() for name in names}
    stated = key_size(key, "pipeline_parallel_size"), key_size(key, "tensor_parallel_size")
    sizes, bounded = layout_sizes((*stated, key_size(key, "data_parallel_size")), frozenset(all_names))
    notes = [_bounded_note(bounded, boot, source)] if bounded else []
    v0 = (
        boot.flags.get("v1") is False
        or "VllmWorkerProcess" in all_names
        or (boot.flags.get("v1") is None and version is not None and version < (0, 8))
    )
    info, has_workers = _processes(boot, key, sizes)
    if "VllmWorkerProcess" in all_names:
        notes += _v0_workers(info, boot, world, source)
    if any(map(ray_worker_name, all_names)):
        given, ray_notes = _ray_workers(info, boot, world, 1 if v0 else 0, source)
        has_workers, notes = given or has_workers, notes + ray_notes
    info[None] = {"engine": True, "engine_dp": None}
    if v0 or (not has_workers and (world is None or world == 1)):
        info[None].update(dict.fromkeys(("rank", *GROUP_RANKS), 0))
    return info, notes + _claims(info, boot, world, printed, source)


def _processes(boot: Boot, key: dict, sizes: Sizes) -> tuple[dict, bool]:
    """Each process's names and rank lines, whether a worker has a rank; an engine may take its DP rank's."""
    tp_size, pp_size = key_size(key, "tensor_parallel_size"), key_size(key, "pipeline_parallel_size")
    tp_pp = None if tp_size is None or pp_size is None else tp_size * pp_size
    assigned = {
        event.key: event.values for event in boot.events if event.scope == "assign" and event.key is not None
    }
    info: dict = {}
    for process_key, names in boot.names.items():
        item = {"pid": process_key[0], **_named(tuple(names), sizes)}
        values = assigned.get(process_key)
        if values:
            item.update({name: values[name] for name in ("rank", *GROUP_RANKS) if name in values})
        info[process_key] = item
    has_workers = any(item.get("rank") is not None for item in info.values())
    for item in info.values():
        if (
            item.get("engine")
            and item.get("rank") is None
            and (tp_pp == 1 or (tp_pp is None and not has_workers))
        ):
            item["rank"] = item["dp_rank"] = item.get("engine_dp") or 0
    return info, has_workers


def _claims(info: dict, boot: Boot, world: int | None, printed: set, source: str) -> list:
    """The notes on ranks claimed outside the world (dropped) or by two processes (both kept as evidence)."""
    notes, used = [], {}
    for process_key, item in info.items():
        rank = item.get("rank")
        if rank is None or process_key not in printed:
            continue
        if world is not None and rank >= world:
            text = (
                f"process {item.get('process') or '(no prefix)'} claims rank {rank} "
                f"but the world size is {world}; its lines are left out"
            )
            notes.append(place_note("rank-out-of-world", source, first_line(boot, process_key), text))
            item["rank"] = None
        elif rank in used:
            text = (
                f"two processes claim rank {rank} in one boot (pids {used[rank][0]} and "
                f"{process_key[0] if process_key else 'none'}); both are kept as evidence and the lower room is used"
            )
            notes.append(place_note("rank-claimed-twice", source, first_line(boot, process_key), text))
        else:
            used[rank] = process_key or (None,)
    return notes


def _bounded_note(bounded: dict[str, int], boot: Boot, source: str):
    named = {"DP": "data_parallel_size", "PP": "pipeline_parallel_size", "TP": "tensor_parallel_size"}
    sizes = ", ".join(f"{group} ≥ {size}" for group, size in bounded.items())
    stated = [named[group] for group in bounded if group in named]
    where = (
        f"the engine-config line ('Initializing a V1 LLM engine … with config: … {stated[0]}=N') states it"
        if stated
        else "no vLLM line states the PCP size"
    )
    text = (
        f"boot {boot.index}: the log does not state the parallel size(s) its worker names use; the workers' "
        f"global ranks are numbered with {sizes} (the largest group ranks their names show + 1) and their "
        f"group ranks kept: {where}. A budget needs every rank present, so it needs those sizes stated"
    )
    return place_note("parallel-size-bounded", source, boot.first_line, text)


def _v0_workers(info: dict, boot: Boot, world: int | None, source: str) -> list:
    """V0 ``VllmWorkerProcess`` workers without a rank line: ranks 1.. in pid (spawn) order; the note."""
    pending = sorted(
        k for k, item in info.items() if item.get("rank") is None and "VllmWorkerProcess" in boot.names[k]
    )
    free = _give_ranks(info, pending, world, 1)
    if len(pending) < 2:
        return []
    text = (
        f"vLLM V0 does not log which rank a VllmWorkerProcess is; ranks {free[: len(pending)]} were given to "
        f"pids {[k[0] for k in pending]} in pid (spawn) order. VLLM_LOGGING_LEVEL=DEBUG logs 'world_size=… "
        "rank=…' per worker."
    )
    return [place_note("v0-rank-order", source, first_line(boot, pending[0]), text)]


def _ray_workers(info: dict, boot: Boot, world: int | None, first: int, source: str) -> tuple[bool, list]:
    """Ray workers without a rank line: the free ranks from ``first`` (1 under V0: its driver is rank 0) by first
    appearance; whether one was given a rank, and the note."""
    pending = [
        k
        for k, item in info.items()  # in order of first appearance (boot.names is filled line by line)
        if item.get("rank") is None and not item.get("engine") and any(map(ray_worker_name, boot.names[k]))
    ]
    if not pending:
        return False, []
    free = _give_ranks(info, pending, world, first)
    if len(pending) < 2 and len(free) < 2:
        return bool(free), []
    given = ", ".join(f"pid {key[0]} → rank {rank}" for key, rank in zip(pending, free))
    text = (
        "no 'rank R in world size W is assigned as …' or 'world_size=… rank=…' line ties the Ray workers to "
        f"ranks, so their rank numbers are by order of first appearance ({given}), not vLLM's own rank: the "
        "per-rank table may name ranks differently, while the uniform budget (a minimum over all ranks) is "
        "unaffected. VLLM_LOGGING_LEVEL=DEBUG logs 'world_size=… rank=…' per worker."
    )
    return bool(free), [place_note("ray-rank-order", source, first_line(boot, pending[0]), text)]


def _give_ranks(info: dict, pending: list, world: int | None, first: int) -> list[int]:
    """The ranks from ``first`` that no process has, given to the ``pending`` processes in order."""
    taken = {item.get("rank") for item in info.values()}
    limit = world if world is not None else len(pending) + first
    free = [rank for rank in range(first, limit) if rank not in taken]
    for process_key, rank in zip(pending, free):
        info[process_key]["rank"] = rank
    return free


@lru_cache(maxsize=1024)
def _named(names: tuple[str, ...], sizes: Sizes) -> dict:
    """What the names one process printed under say of it: its best name, roles and rank fields (read only)."""
    specific = [name for name in names if _GROUP_RE.search(name) or "rank=" in name or "_DP" in name]
    item: dict = {"process": (specific or names)[-1]}  # the last name that names its rank or group
    for name in names:
        if _FRONTEND_RE.fullmatch(name):
            item["frontend"] = True
        engine = _ENGINE_RE.fullmatch(name)
        if engine:  # its DP index (None: not given)
            index = engine.group(1) or engine.group(2)
            item["engine"], item["engine_dp"] = True, None if index is None else int(index)
        for name_key, value in _rank_from_name(name, sizes):
            item.setdefault(name_key, value)
    return item


@lru_cache(maxsize=1024)
def ray_worker_name(name: str) -> bool:
    """Whether a process name is Ray's for a vLLM worker."""
    return _RAY_WORKER_RE.fullmatch(name) is not None


def first_line(boot: Boot, process_key: tuple | None) -> int:
    return next((event.line for event in boot.events if event.key == process_key), boot.first_line)
