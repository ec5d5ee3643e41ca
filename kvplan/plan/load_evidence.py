"""Load-test evidence in a decision: the ``load`` section and load checks, one rule at approval and gate."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from kvplan.budget import kv_cache_flag
from kvplan.checks import Check
from kvplan.checks.gate import Approved
from kvplan.io.load import LoadFormatError, LoadReading, read_load_evidence, reading_of
from kvplan.load import load_checks, load_summary
from kvplan.load.checks import value_check
from kvplan.notes import Note
from kvplan.plan.inputs import LoadPolicy
from kvplan.plan.reading import renamed, require_files


def read_named_load(loads: Sequence[tuple[Path, str]], year: int | None = None) -> LoadReading:
    """Load evidence of ``(path, name)`` pairs read together, every row and warning naming ``name``."""
    names = {str(path): name for path, name in loads}
    try:
        reading = read_load_evidence([path for path, _ in loads], year=year)
    except ValueError as exc:
        raise LoadFormatError(renamed(str(exc), names)) from exc
    frame = reading.frame.assign(source=reading.frame["source"].replace(names))
    return reading_of(
        [frame],
        [
            Note(renamed(w, names), code=w.code, file=names.get(w.file or "", w.file), line=w.line)
            for w in reading.warnings
        ],
        [replace(s, source=names.get(s.source, s.source)) for s in reading.sources],
    )


def profiled_tokens(ledger: pd.DataFrame) -> int | None:
    """Lowest "GPU KV cache size" [tokens] that a profiled boot (no manual KV value) in the ledger logged.

    >>> profiled_tokens(pd.DataFrame({"kv_cache_tokens": [155_856, 157_280],
    ...                               "manual_kv_bytes": [None, 12_884_377_600]}))
    155856
    """
    if "kv_cache_tokens" not in ledger.columns:
        return None
    rows = ledger[ledger["manual_kv_bytes"].isna()] if "manual_kv_bytes" in ledger.columns else ledger
    tokens = rows["kv_cache_tokens"].dropna()
    return int(tokens.min()) if not tokens.empty else None


def load_section(
    reading: LoadReading,
    load_policy: LoadPolicy,
    approved_bytes: int,
    approved_tokens: int | None = None,
    profiled_kv_cache_tokens: int | None = None,
) -> tuple[dict, list[Check]]:
    """The ``load`` section of ``budget.json`` and the checks (capacity: the run's, else ``approved_tokens``)."""
    stated = reading.kv_cache_tokens
    tokens = stated if stated is not None else approved_tokens
    summary = load_summary(reading, kv_cache_tokens=tokens)
    manual = summary["kv_cache_memory_bytes"]
    checks = load_checks(
        reading,
        max_preemptions=load_policy.max_preemptions,
        kv_cache_tokens=tokens,
        profiled_kv_cache_tokens=profiled_kv_cache_tokens if manual is not None else None,
        max_capacity_loss_pct=load_policy.max_capacity_loss_pct,
    )
    other_value = value_check(reading, approved_bytes)
    if other_value is not None:  # evidence for another value fails (appended only then: bundles keep bytes)
        checks.append(other_value)
    notes = []
    if manual is None:
        notes.append(
            "the load run states no --kv-cache-memory-bytes (a profiled run): it is not evidence "
            "for the approved value"
        )
    elif manual != approved_bytes:
        notes.append(
            f"the load run used {kv_cache_flag(manual)}, not the approved "
            f"{approved_bytes}: it is evidence for another value"
        )
    if stated is not None and approved_tokens is not None and stated != approved_tokens:
        notes.append(
            f"the load run's KV cache holds {stated:,} tokens; the approved value holds {approved_tokens:,}"
        )
    section = {
        **summary,
        "approved_kv_cache_tokens": approved_tokens,
        "max_preemptions": load_policy.max_preemptions,
        "year": load_policy.year,
        "max_capacity_loss_pct": load_policy.max_capacity_loss_pct,
        "notes": notes,
    }
    return section, checks


def gate_load(
    approved: Approved, load_paths: Sequence[str | os.PathLike], load_policy: LoadPolicy | None = None
) -> tuple[dict, list[Check]]:
    """The load section and checks of a canary's load test against an approval (``gate --load``)."""
    paths = [Path(path) for path in load_paths]
    require_files(paths, "--load")
    load_policy = load_policy or LoadPolicy()
    reading = read_load_evidence(paths, year=load_policy.year)
    return load_section(
        reading, load_policy, approved.budget_bytes, approved.capacity_tokens, approved.logged_tokens
    )
