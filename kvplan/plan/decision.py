"""The one decision pipeline: evidence and policy in, one frozen :class:`Decision` out (:func:`decide`); every
consumer calls it, none re-derives a room, a free-memory reference or a capacity."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
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
    """The KV spec of the model config on the layout (unset options: the logs'); ``room_count`` (rooms given by
    hand) must fill whole replicas of TP × PP ranks."""
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
    """:func:`layout_spec` on the launch the logs show (the key's shown fields, the launch settings): the spec
    of :func:`decide` and of the notebooks."""
    shown_key = {name: None if name in defaulted else value for name, value in key.items()}
    return layout_spec(layout, {**shown_key, **logged_launch_settings(ledger)}, room_count)


OVERRIDE_CHECK = "num_gpu_blocks_override fits the budget"


def override_check(spec: KVSpec, budget_bytes: int) -> Check | None:
    """Whether the logged ``num_gpu_blocks_override`` blocks fit the budget per rank (None: no override): vLLM
    allocates them whatever the memory (``kv_cache_planning.py``)."""
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
        why = (
            "vLLM allocates the override's blocks whatever the budget, so this launch would exceed the budget"
        )
        return Check(OVERRIDE_CHECK, False, f"{detail}: {why}: lower num_gpu_blocks_override or drop it")
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
    detail = f"{spec.arch.name}: {spec.bytes_per_token:,} B per token per rank; {verdict}"
    return Check(MODEL_CHECK, True, detail)


def decide(
    logs: Evidence | str | os.PathLike | Sequence[str | os.PathLike | tuple[str | os.PathLike, str]],
    policy: Policy,
    layout: ModelLayout | None = None,
    plan: AdmissionPlan | None = None,
    load_policy: LoadPolicy | None = None,
    block_bytes: int | None = None,
) -> Decision:
    """The decision of ``logs`` (:class:`~kvplan.plan.Evidence`, or logs to read) under ``policy``: ``layout`` sets
    the block bytes, capacity and cross-check (else ``block_bytes`` may round); ``load_policy`` judges load runs.

    >>> from kvplan import DATA_DIR
    >>> d = decide([DATA_DIR / "boots" / "four-rank" / "boot.log"], Policy(reserve_bytes=966_367_642),
    ...            ModelLayout("llama-3.1-70b", {"tp": 4}))
    >>> d.budget.flag, d.budget.limiting_rank, d.capacity[0]["tokens"]
    ('--kv-cache-memory-bytes=12884377600', 2, 157280)
    """
    evidence = logs if isinstance(logs, Evidence) else read_evidence(logs)
    ledger = evidence.ledger
    key = compatibility_key(ledger, evidence.lines) if evidence.rooms is None else {}
    room_count = None if evidence.rooms is None else len(evidence.rooms)
    defaulted = evidence.defaulted_key_fields
    spec = launch_layout_spec(layout, key, ledger, defaulted, room_count) if layout is not None else None
    block = spec.block_bytes if spec is not None else block_bytes
    if evidence.rooms is not None:
        given = decide_rooms(evidence.rooms, policy, block)
        found = replace(
            given, ledger=ledger, provenance_of=lambda: evidence.provenance, warnings=evidence.warnings
        )
    else:
        found = _decide_ledger(evidence, policy, key, spec, layout, block)
    budget, checks, notes, length = found.budget, list(found.checks), list(found.notes), _length(layout, key)
    capacity = at_max_len = None
    if spec is not None:
        capacity = capacity_rows(spec, budget.uniform_budget_bytes, planned_lengths(length, plan))
        at_max_len = spec.capacity(budget.uniform_budget_bytes, length) if length else None
        override = override_check(spec, budget.uniform_budget_bytes)
        if override is not None:
            checks.append(override)
            if not override.passed:
                notes.insert(0, override.detail)
    plan_record = admission_plan(plan, key, spec, budget) if plan else None
    if plan_record is not None and plan_record["fits"] is not None:
        checks.append(Check("admission plan fits", plan_record["fits"], plan_record["detail"]))
    load = None
    if evidence.loads:
        load, load_checks = _load(evidence, load_policy or LoadPolicy(), budget, capacity, length)
        checks += load_checks
    return replace(
        found,
        checks=tuple(checks),
        notes=tuple(notes),
        compatibility_key=key,
        spec=spec,
        capacity=capacity,
        plan=plan_record,
        load=load,
        max_model_len=length,
        capacity_at_max_len=at_max_len,
    )


def _length(layout: ModelLayout | None, key: dict) -> int | None:
    """The length capacity is computed at [tokens]: the layout's, else the logged ``max_model_len``."""
    logged: Any = key.get("max_model_len")
    return (layout.max_model_len if layout else None) or (int(logged) if is_known(logged) else None)


def _load(
    evidence: Evidence, load_policy: LoadPolicy, budget: Budget, capacity: tuple | None, length: int | None
) -> tuple[dict, list[Check]]:
    """The load section of the evidence's load runs at the approved value, and its checks."""
    at_length = [row["tokens"] for row in capacity or () if row["seq_len"] == length]
    reading = read_named_load(evidence.loads, load_policy.year)
    tokens = at_length[0] if at_length else None
    return load_section(
        reading, load_policy, budget.uniform_budget_bytes, tokens, profiled_tokens(evidence.ledger)
    )


def _decide_ledger(
    evidence: Evidence,
    policy: Policy,
    key: dict,
    spec: KVSpec | None,
    layout: ModelLayout | None,
    block: int | None,
) -> Decision:
    """The decision of a ledger's rooms: the refusals, the worst room per rank, the budget, ``F_ref``, the
    cross-check and the checks of the boots and of vLLM's start-up refusals."""
    ledger, lines = evidence.ledger, evidence.lines
    check_dropped_ranks(evidence.warnings)
    refuse_failed_boots(ledger, lines)
    rooms = room_per_rank(ledger, policy.assume_uniform, lines, key)
    budget = budget_from_rooms(rooms, policy.reserve_bytes, block, lines)
    notes = [*rooms.attrs["notes"], *_decision_notes(rooms, budget, key)]
    checks = [check_ranks_present(budget.ranks, ledger), check_outcomes(ledger)]
    rows = verdict = None
    if spec is not None:
        # the reader's filled-in defaults (block_size 16) must not reach kvspec: MLA and hybrid backends choose
        defaulted = evidence.defaulted_key_fields & set(ledger.columns)
        shown_ledger = ledger.assign(**dict.fromkeys(defaulted, pd.NA)) if defaulted else ledger
        rows = cross_check(shown_ledger, spec, max_model_len=layout.max_model_len if layout else None)
        verdict = cross_check_verdict(rows)
        if rows["agrees"].isin([False]).any():
            notes.insert(0, f"{verdict}. {PREDICTION_NOTE}")
        checks.append(model_check(rows, spec))
    utilization, launch_warning, launch_checks = launch_section(
        ledger, rooms, budget, spec, _length(layout, key), policy.guard_bytes
    )
    return Decision(
        ledger=ledger,
        provenance_of=lambda: evidence.provenance,
        metadata=evidence.metadata,
        warnings=evidence.warnings,
        budget=budget,
        compatibility_key=key,
        ref_free_bytes=reference_free_bytes(ledger, rooms),
        room_sources=tuple(None if not is_known(s) else str(s) for s in rooms["room_source"]),
        spec=spec,
        checks=tuple(checks + launch_checks),
        notes=tuple(notes),
        rooms=rooms,
        cross_check=rows,
        cross_check_verdict=verdict,
        gpu_memory_utilization=utilization,
        launch_warning=launch_warning,
    )


#: What a decision says when the model config's prediction disagrees with the logs.
PREDICTION_NOTE = (
    "The capacity below is the model config's prediction, not what these logs show vLLM allocating: fix the "
    "model config or the layout flags"
)


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
