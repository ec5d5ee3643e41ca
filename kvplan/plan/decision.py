"""The one decision pipeline: evidence and policy in, one frozen :class:`Decision` out.

Every consumer calls :func:`decide`; none re-derives a room, a free-memory reference or a capacity. Its steps
name the function that computes each number: the key (:func:`kvplan.ledger.compatibility_key`), the KV spec
(:func:`kvplan.kvspec.kv_spec`), the worst room per rank (:func:`kvplan.ledger.room_per_rank`), the budget
(:func:`kvplan.budget.uniform_budget`), ``F_ref`` (:func:`kvplan.drift.reference_free_bytes`), the admission
plan (:func:`kvplan.plan.inputs.admission_plan`), the cross-check, the launch and the load section.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from kvplan.budget import Budget
from kvplan.checks import Check
from kvplan.checks.key import check_outcomes, check_ranks_present
from kvplan.checks.launch import launch_section
from kvplan.drift import reference_free_bytes
from kvplan.io.model_config import read_model_config
from kvplan.kvspec import KVSpec, cross_check, cross_check_verdict, kv_spec, options_for_logs
from kvplan.kvspec.capacity import capacity_rows
from kvplan.ledger import compatibility_key, is_known, logged_launch_settings, room_per_rank
from kvplan.plan.inputs import (
    AdmissionPlan,
    Decision,
    LoadPolicy,
    ModelLayout,
    Policy,
    admission_plan,
    decide_rooms,
    planned_lengths,
)
from kvplan.plan.load_evidence import load_section, profiled_tokens, read_named_load
from kvplan.plan.reading import Evidence, read_evidence
from kvplan.releases import version_tuple
from kvplan.room import budget_from_rooms, check_dropped_ranks, refuse_failed_boots
from kvplan.units import format_size

MODEL_CHECK = "model config matches the logs"


def layout_spec(layout: ModelLayout, key: dict, room_count: int | None = None) -> KVSpec:
    """The KV spec of the model config on the layout; unset layout, KV dtype, release and block size are
    the logs' (:func:`kvplan.kvspec.options_for_logs`). ``room_count`` (rooms given by hand) must fill
    whole replicas of TP × PP ranks.

    >>> layout_spec(ModelLayout("llama-3.1-8b", {"tp": 1}), {}, room_count=2).bytes_per_token  # 32×2×8×128×2 B
    131072
    """
    options = options_for_logs(layout.options, key)
    tp, pp = options.get("tp"), options.get("pp") or 1
    if tp is None:
        raise ValueError("--model needs --tp N: the tensor-parallel size the ranks run with")
    if room_count is not None and room_count % (tp * pp):
        raise ValueError(
            f"--room gives {room_count} rank(s), but --tp {tp} × --pp {pp} = "
            f"{tp * pp} ranks per replica: give one room per rank, rank order"
        )
    config = read_model_config(layout.config)
    if layout.name is not None:
        config["_path"] = layout.name
    return kv_spec(config, **options)


def launch_layout_spec(
    layout: ModelLayout,
    key: dict,
    ledger: pd.DataFrame,
    defaulted: frozenset[str] = frozenset(),
    room_count: int | None = None,
) -> KVSpec:
    """:func:`layout_spec` on the launch the logs show: the key's shown fields and the launch settings.

    Key fields the reader filled with vLLM's defaults (``defaulted``,
    :func:`kvplan.checks.key.defaulted_key_fields`) are left out (:func:`_shown_only`): :func:`decide` and
    the notebooks' :func:`kvplan.notebook.launch_spec` both take the spec from here.

    >>> frame = pd.DataFrame({"block_size": [16], "max_num_batched_tokens": [8192]})
    >>> launch_layout_spec(ModelLayout("llama-3.1-8b", {"tp": 1}), {"block_size": 16}, frame,
    ...                    frozenset({"block_size"})).block_bytes  # vLLM's default 16 × 131,072 B
    2097152
    """
    shown_key, _ = _shown_only(key, ledger.iloc[0:0], defaulted)
    return layout_spec(layout, {**shown_key, **logged_launch_settings(ledger)}, room_count)


OVERRIDE_CHECK = "num_gpu_blocks_override fits the budget"


def override_check(spec: KVSpec, budget_bytes: int) -> Check | None:
    """Whether the logged ``num_gpu_blocks_override`` blocks fit in the proposed budget (per rank).

    vLLM allocates the override's blocks whatever the memory (``kv_cache_planning.py``), so a launch
    with it at ``budget_bytes`` uses override × block bytes; more than the budget fails the check.
    None when the launch sets no override.

    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4, num_gpu_blocks_override=4096)
    >>> override_check(spec, 4 * 2**30).passed  # 4,096 × 1,310,720 B = 5 GiB > 4 GiB
    False
    """
    blocks = spec.num_gpu_blocks_override
    if blocks is None:
        return None
    override_bytes = blocks * spec.block_bytes
    detail = (
        f"num_gpu_blocks_override={blocks:,}: {blocks:,} blocks × {spec.block_bytes:,} B = "
        f"{override_bytes:,} B ({format_size(override_bytes)}) per rank, budget {budget_bytes:,} B "
        f"({format_size(budget_bytes)})"
    )
    if override_bytes > budget_bytes:
        return Check(
            OVERRIDE_CHECK,
            False,
            f"{detail}: vLLM allocates the override's blocks whatever the budget, so this launch "
            "would exceed the budget: lower num_gpu_blocks_override or drop it",
        )
    return Check(OVERRIDE_CHECK, True, detail)


def model_check(rows: pd.DataFrame, spec: KVSpec) -> Check:
    """The model config's predicted "GPU KV cache size" and concurrency agree with what the logs printed."""
    verdict = cross_check_verdict(rows)
    agrees = rows["agrees"].dropna() if "agrees" in rows else rows.iloc[0:0]
    if agrees.empty:
        return Check(MODEL_CHECK, None, verdict)
    if not agrees.astype(bool).all():
        first = rows.loc[agrees[~agrees.astype(bool)].index[0]]
        return Check(MODEL_CHECK, False, f"{first['source']}: {verdict}; {first['reason']}")
    return Check(
        MODEL_CHECK, True, f"{spec.arch.name}: {spec.bytes_per_token:,} B per token per rank; {verdict}"
    )


def decide(
    logs: Evidence | str | os.PathLike | Sequence[str | os.PathLike | tuple[str | os.PathLike, str]],
    policy: Policy,
    layout: ModelLayout | None = None,
    plan: AdmissionPlan | None = None,
    loads: Sequence[tuple[Path, str]] = (),
    load_policy: LoadPolicy | None = None,
    snapshots: Sequence[str | os.PathLike | tuple[str | os.PathLike, str]] = (),
    max_model_len: int | None = None,
    block_bytes: int | None = None,
) -> Decision:
    """The decision of ``logs`` under ``policy``: the one pipeline every consumer calls.

    ``logs`` is :class:`~kvplan.plan.Evidence` (e.g. :func:`~kvplan.plan.given_rooms`) or what
    :func:`~kvplan.plan.read_evidence` reads (paths, a folder, a glob, ``(path, name)`` pairs), with
    the nvidia-smi ``snapshots`` of the same boot. ``layout`` (a model config and layout options) sets
    the block bytes, the capacity table and the cross-check; without it ``block_bytes`` may round.
    ``max_model_len`` overrides the logged length for capacity. ``loads`` are ``(path, name)`` pairs of
    a load test at the approved value, judged with ``load_policy``.

    >>> from kvplan import DATA_DIR
    >>> d = decide([DATA_DIR / "boots" / "four-rank" / "boot.log"], Policy(reserve_bytes=966_367_642),
    ...            ModelLayout("llama-3.1-70b", {"tp": 4}))
    >>> d.budget.flag, d.budget.limiting_rank, d.capacity[0]["tokens"]
    ('--kv-cache-memory-bytes=12884377600', 2, 157280)
    """
    evidence = logs if isinstance(logs, Evidence) else read_evidence(logs, snapshots)
    ledger = evidence.ledger
    key = compatibility_key(ledger, evidence.lines) if evidence.rooms is None else {}
    room_count = None if evidence.rooms is None else len(evidence.rooms)
    defaulted = evidence.defaulted_key_fields
    _, shown_ledger = _shown_only(key, ledger, defaulted)
    spec = launch_layout_spec(layout, key, ledger, defaulted, room_count) if layout is not None else None
    block = spec.block_bytes if spec is not None else block_bytes
    notes: list[str] = []
    rooms = None
    if evidence.rooms is not None:
        given = decide_rooms(evidence.rooms, policy, block)
        budget, ref_free, sources = given.budget, given.ref_free_bytes, given.room_sources
    else:
        check_dropped_ranks(evidence.warnings)
        refuse_failed_boots(ledger, evidence.lines)
        rooms = room_per_rank(
            ledger, assume_uniform=policy.assume_uniform, lines=evidence.lines, notes=notes, key=key
        )
        budget = budget_from_rooms(
            ledger, rooms, policy.reserve_bytes, block_bytes=block, lines=evidence.lines
        )
        ref_free = reference_free_bytes(ledger, rooms)
        sources = tuple(None if not is_known(s) else str(s) for s in rooms["room_source"])
        notes += _decision_notes(rooms, budget, key)
    logged_len: Any = key.get("max_model_len")
    length = max_model_len or (int(logged_len) if is_known(logged_len) else None)
    capacity = at_max_len = rows = verdict = None
    if spec is not None:
        capacity = capacity_rows(spec, budget.uniform_budget_bytes, planned_lengths(length, plan))
        at_max_len = spec.capacity(budget.uniform_budget_bytes, length) if length else None
        if evidence.rooms is None:
            rows = cross_check(shown_ledger, spec, max_model_len=max_model_len)
            verdict = cross_check_verdict(rows)
            if rows["agrees"].isin([False]).any():
                notes.insert(
                    0,
                    f"{verdict}. The capacity below is the model config's prediction, not what "
                    "these logs show vLLM allocating: fix the model config or the layout flags",
                )
    plan_record = admission_plan(plan, key, spec, budget) if plan else None
    checks = []
    utilization, launch_warning = None, None
    if evidence.rooms is None:
        checks = [check_ranks_present(budget.ranks, ledger), check_outcomes(ledger)]
        if spec is not None:
            checks.append(model_check(rows, spec))
        flags, launch_checks = launch_section(ledger, rooms, budget, spec, length, policy.guard_bytes)
        checks += launch_checks
        utilization, launch_warning = flags.gpu_memory_utilization, flags.warning
    override = override_check(spec, budget.uniform_budget_bytes) if spec is not None else None
    if override is not None:
        checks.append(override)
        if not override.passed:
            notes.insert(0, override.detail)
    if plan_record is not None and plan_record["fits"] is not None:
        checks.append(Check("admission plan fits", plan_record["fits"], plan_record["detail"]))
    load = None
    if loads:
        load_policy = load_policy or LoadPolicy()
        at_length = [row["tokens"] for row in capacity or () if row["seq_len"] == length]
        reading = read_named_load(loads, load_policy.year)
        load, more_checks = load_section(
            reading,
            load_policy,
            budget.uniform_budget_bytes,
            at_length[0] if at_length else None,
            profiled_tokens(ledger),
        )
        checks += more_checks
    return Decision(
        checks=tuple(checks),
        notes=tuple(notes),
        ledger=ledger,
        provenance_of=lambda: evidence.provenance,
        metadata=evidence.metadata,
        warnings=evidence.warnings,
        budget=budget,
        compatibility_key=key,
        ref_free_bytes=ref_free,
        room_sources=sources,
        spec=spec,
        capacity=capacity,
        plan=plan_record,
        load=load,
        rooms=rooms,
        max_model_len=length,
        capacity_at_max_len=at_max_len,
        cross_check=rows,
        cross_check_verdict=verdict,
        gpu_memory_utilization=utilization,
        launch_warning=launch_warning,
    )


def _shown_only(key: dict, ledger: pd.DataFrame, defaulted: frozenset[str]) -> tuple[dict, pd.DataFrame]:
    """The key and ledger without the fields the reader filled with vLLM's defaults (for kvspec).

    The reader fills ``block_size`` 16 when no line shows it; MLA (0.18+) and hybrid models let the
    attention backend choose, so a filled-in 16 must not reach :func:`kvplan.kvspec.kv_spec` as the
    block size the launch used (it then takes the logged group sizes, the GPU type, or refuses).

    >>> _shown_only({"block_size": 16, "model": "m"}, pd.DataFrame({"block_size": [16]}),
    ...             frozenset({"block_size"}))[0]
    {'block_size': None, 'model': 'm'}
    """
    if not defaulted:
        return key, ledger
    shown = ledger.copy()
    for column in defaulted & set(shown.columns):
        shown[column] = pd.NA
    return {name: None if name in defaulted else value for name, value in key.items()}, shown


def _decision_notes(rooms: pd.DataFrame, budget: Budget, key: dict) -> list[str]:
    """What the decision says about its own evidence: ranks assumed uniform, a release without the flag."""
    notes = []
    assumed = [int(rank) for rank, source in rooms["room_source"].items() if source == "assumed_uniform"]
    if assumed:
        notes.append(
            f"--assume-uniform: rank(s) {', '.join(map(str, assumed))} show no room of their "
            f"own and take the lowest room shown ({format_size(min(budget.room_bytes))})"
        )
    version = version_tuple(key.get("vllm_version"))
    if version is not None and version < (0, 10, 2):
        notes.append(
            f"vLLM {key['vllm_version']} has no --kv-cache-memory-bytes (added in "
            "0.10.2): the value is a planning figure for this release, not a flag it accepts"
        )
    return notes
