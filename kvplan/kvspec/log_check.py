"""The model config against the logs: :func:`kv_spec` options completed from the compatibility key, and the
predicted against the logged "GPU KV cache size", "Maximum concurrency" and GPU blocks, with a likely cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvplan.columns import is_known
from kvplan.kvspec.arch import KVSpecError, parse_vllm_version
from kvplan.kvspec.spec import KVSpec
from kvplan.releases import KV_CACHE_MEMORY_BYTES_FROM, PER_WORKER_KV_LINES_FROM, PER_WORKER_KV_LINES_UNTIL
from kvplan.units import GIB_2DP_HALF_STEP_BYTES

#: Why a HiSparse boot's figures are not cross-checked (:func:`kvplan.kvspec.launch.host_pool_bound`).
HOST_POOL_NOT_COMPARED = (
    "the logged 'GPU + host KV cache size' counts HiSparse's host pool too (vLLM's concurrency is the lower "
    "of the GPU and host pools'), not a GPU-only figure: not compared, the host pool is not modelled"
)


def _first(values: pd.Series):
    present = values.dropna()
    return present.iloc[0] if len(present) else None


def _diagnose(
    spec: KVSpec, available_bytes: int, logged_tokens: int | None, predicted_tokens: int
) -> tuple[str, str]:
    """The likely cause of a mismatch, and which setting the gap points to."""
    if not logged_tokens or not predicted_tokens:
        return "block size or max_model_len", (
            "the logged blocks or concurrency differ: check --block-size and max_model_len"
        )
    ratio = logged_tokens / predicted_tokens
    implied = available_bytes / logged_tokens * spec.dcp
    hint = (
        f"the log implies ≈{implied:,.0f} bytes per token per rank, the config and layout give "
        f"{spec.bytes_per_token:,} (logged/predicted tokens = {ratio:.3f})"
    )
    dtype = (
        "KV dtype",
        "a factor 2: KV dtype (fp8 = 1 byte, bf16/fp16 = 2 bytes) or the KV-head split across TP",
    )
    candidates = [(2.0, *dtype), (0.5, *dtype)]
    if spec.tp > 1:
        tp = ("TP", "a factor TP: check --tp (KV heads per rank)")
        candidates += [(spec.tp, *tp), (1 / spec.tp, *tp)]
    layers = spec.limiting_stage.layers_per_group
    for other in {spec.arch.num_layers, *(s.layers_per_group for s in spec.stages)} - {layers}:
        reason = f"the layer count: {other} KV layers per rank fit, not {layers} (check --pp or the config)"
        candidates.append((layers / other, "layer count", reason))
    if spec.dcp > 1:
        candidates.append((1 / spec.dcp, "DCP", "a factor DCP: check --dcp"))
    for factor, cause, reason in candidates:
        if abs(ratio - factor) <= 0.02 * factor:
            return cause, f"{reason}; {hint}"
    if abs(ratio - 1) <= 0.02:
        return "block size or max_model_len", (
            f"tokens agree but blocks or concurrency do not: check --block-size and max_model_len; {hint}"
        )
    return "model config or layout", f"check the layer count, KV dtype, block size or layout; {hint}"


#: The ledger columns a cross-check reads (None where the ledger lacks one).
_CHECKED_COLUMNS = [
    "source",
    "boot",
    "dp_rank",
    "rank",
    "pp_rank",
    "vllm_version",
    "block_size",
    "max_model_len",
    "available_kv_bytes",
    "kv_in_use_bytes",
    "manual_kv_bytes",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "kv_cache_pools",
]


def cross_check(
    ledger: pd.DataFrame,
    spec: KVSpec,
    *,
    max_model_len: int | None = None,
    available_tolerance_bytes: int | None = None,
) -> pd.DataFrame:
    """Predicted against logged "GPU KV cache size", "Maximum concurrency" and GPU blocks, one row per check
    (per worker in 0.9.0–0.11.0, else per engine). A 2-decimal GiB figure makes the prediction a range
    (``available_tolerance_bytes=0``: exact); ``agrees`` is False only outside it, with a ``likely_cause``."""
    rows = ledger.reset_index(drop=True).copy()
    for column in _CHECKED_COLUMNS:
        if column not in rows:
            rows[column] = None
    # vLLM 0.10.2 prints "Current kv cache memory in use is N bytes": exact, so it goes first there.
    in_use_exact = (
        rows["vllm_version"].map(
            lambda v: is_known(v) and parse_vllm_version(str(v)) == KV_CACHE_MEMORY_BYTES_FROM
        )
        & rows["kv_in_use_bytes"].notna()
    )
    rows["_available"] = (
        rows["manual_kv_bytes"]
        .combine_first(rows["kv_in_use_bytes"].where(in_use_exact))
        .combine_first(rows["available_kv_bytes"])
        .combine_first(rows["kv_in_use_bytes"])
    )
    rows["_exact"] = rows["manual_kv_bytes"].notna() | in_use_exact
    # DP ranks are separate engines: each logs its own figures and none takes a minimum across them
    rows["_key"] = list(zip(*(rows[c].astype(str) for c in ("source", "boot", "dp_rank"))))
    units: list[pd.DataFrame] = []
    for _key, boot in rows.groupby("_key", sort=False):
        version = _first(boot["vllm_version"]) or spec.vllm_version
        per_worker = PER_WORKER_KV_LINES_FROM <= parse_vllm_version(version) <= PER_WORKER_KV_LINES_UNTIL
        units += [boot.loc[[i]] for i in boot.index] if per_worker else [boot]
    return pd.DataFrame([_check_unit(unit, spec, max_model_len, available_tolerance_bytes) for unit in units])


def _check_unit(unit: pd.DataFrame, spec: KVSpec, max_model_len: int | None, tolerance: int | None) -> dict:
    """One check of a boot's rows (or one worker's row): predicted and logged figures, the verdict."""
    version = _first(unit["vllm_version"]) or spec.vllm_version
    block_size = _first(unit["block_size"])
    row_spec = spec.with_settings(
        block_size=None if block_size is None else int(block_size), vllm_version=str(version)
    )
    length = _first(unit["max_model_len"]) or max_model_len
    result = {
        "source": _first(unit["source"]),
        "boot": _first(unit["boot"]),
        "dp_rank": _first(unit["dp_rank"]),
        "rank": _first(unit["rank"]) if len(unit) == 1 else None,
        "vllm_version": str(version),
        "block_size": row_spec.block_size,
        "available_kv_bytes": None,
        "tolerance_bytes": None,
    }
    for name in ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency"):
        result.update({f"predicted_{name}": None, f"logged_{name}": _first(unit[name])})
    result.update(agrees=None, likely_cause=None, reason="")
    known = unit.dropna(subset=["_available"])
    if "host" in str(_first(unit["kv_cache_pools"]) or ""):
        result["reason"] = HOST_POOL_NOT_COMPARED
    elif known.empty or length is None:
        result["reason"] = "no available KV memory in the log" if known.empty else "max_model_len unknown"
    else:
        result.update(_compare(result, row_spec, known, len(unit), int(length), tolerance))
    return result


def _compare(
    logged: dict, spec: KVSpec, known: pd.DataFrame, ranks: int, length: int, tolerance: int | None
) -> dict:
    """The predictions from the ``known`` rows' available memory (a range within the printed tolerance), and
    whether the ``logged`` figures lie in it."""

    def blocks_at(offset: int) -> int:
        if spec.num_gpu_blocks_override is not None:
            return spec.num_gpu_blocks_override  # vLLM allocates exactly these, whatever the memory
        per_row = []
        for _index, row in known.iterrows():
            stage = spec.limiting_stage
            if row["pp_rank"] is not None and not pd.isna(row["pp_rank"]):
                stage = spec.stage(int(row["pp_rank"]))
            per_row.append(max(0, (int(row["_available"]) + offset) // stage.block_bytes))
        return min(per_row)

    tol = 0 if known["_exact"].all() else (GIB_2DP_HALF_STEP_BYTES if tolerance is None else tolerance)
    blocks, low, high = blocks_at(0), blocks_at(-tol), blocks_at(tol)
    found: dict[str, object] = {
        "available_kv_bytes": int(known["_available"].min()),
        "tolerance_bytes": tol,
        "predicted_num_gpu_blocks": blocks,
        "predicted_kv_cache_tokens": spec.kv_cache_tokens(blocks, length),
        "predicted_max_concurrency": spec.max_concurrency(blocks, length),
    }
    result = {**logged, **found}
    checks: dict[str, bool] = {}
    if result["logged_num_gpu_blocks"] is not None:
        checks["blocks"] = low <= int(result["logged_num_gpu_blocks"]) <= high
    if result["logged_kv_cache_tokens"] is not None:
        fewest, most = spec.kv_cache_tokens(low, length), spec.kv_cache_tokens(high, length)
        checks["tokens"] = fewest <= int(result["logged_kv_cache_tokens"]) <= most
    if result["logged_max_concurrency"] is not None:
        lowest, highest = (round(spec.max_concurrency(b, length), 2) for b in (low, high))
        checks["concurrency"] = lowest <= round(float(result["logged_max_concurrency"]), 2) <= highest
    if not checks:
        return {**found, "reason": "the log printed no KV cache size, concurrency or block count"}
    found["agrees"] = all(checks.values())
    notes = []
    if len(known) < ranks:
        notes.append(f"available memory known for {len(known)} of {ranks} ranks")
    if spec.approximate:
        notes.append(f"approximate: {spec.approximate_reason}")
    if not found["agrees"]:
        found["likely_cause"], reason = _cause(result, spec, checks)
        notes.insert(0, f"differs by more than block rounding: {reason}")
    return {**found, "reason": "; ".join(notes)}


def _cause(result: dict, spec: KVSpec, checks: dict[str, bool]) -> tuple[str, str]:
    """The likely cause of a disagreement: the block count alone, else :func:`_diagnose`'s."""
    others = [ok for name, ok in checks.items() if name != "blocks"]
    if not checks.get("blocks", True) and others and all(others):
        return "block size", (
            f"the GPU block count differs ({result['logged_num_gpu_blocks']} logged, "
            f"{result['predicted_num_gpu_blocks']} predicted) while tokens and concurrency agree: check --block-size"
        )
    logged_tokens = result["logged_kv_cache_tokens"]
    if logged_tokens is None and result["logged_num_gpu_blocks"] is not None:
        logged_tokens = int(result["logged_num_gpu_blocks"]) * spec.block_size
    return _diagnose(
        spec,
        result["available_kv_bytes"],
        None if logged_tokens is None else int(logged_tokens),
        result["predicted_kv_cache_tokens"],
    )


def _compared_figure(row: pd.Series) -> str:
    """``predicted X, logged Y`` of the first figure the log printed."""
    for name, unit in (("kv_cache_tokens", " tokens"), ("num_gpu_blocks", " GPU blocks")):
        if is_known(row[f"logged_{name}"]):
            return f"predicted {int(row[f'predicted_{name}']):,}{unit}, logged {int(row[f'logged_{name}']):,}"
    return (
        f"predicted {row['predicted_max_concurrency']:.2f}x concurrency, "
        f"logged {float(row['logged_max_concurrency']):.2f}x"
    )


def cross_check_verdict(rows: pd.DataFrame) -> str:
    """One line of :func:`cross_check` rows: the rounding allowed, or the first disagreement's cause."""
    judged = rows[rows["agrees"].notna()] if "agrees" in rows else rows.iloc[0:0]
    if judged.empty:
        reason = rows["reason"].iloc[0] if len(rows) and rows["reason"].iloc[0] else "no boot to compare"
        return f"nothing to cross-check: {reason}"
    wrong = judged[~judged["agrees"].astype(bool)]
    count = ""
    if len(judged) > 1:
        count = f" ({len(wrong)} of {len(judged)} checks)" if len(wrong) else f" ({len(judged)} checks)"
    if len(wrong):
        first = wrong.iloc[0]
        return (
            f"model config DISAGREES with the log: {_compared_figure(first)}; "
            f"likely cause: {first['likely_cause']}{count}"
        )
    tolerances = {int(t) for t in judged["tolerance_bytes"]}
    if tolerances == {0}:
        allowed = "exact bytes"
    elif tolerances <= {0, GIB_2DP_HALF_STEP_BYTES}:
        allowed = "within 2-decimal GiB rounding"
    else:
        allowed = f"within ±{max(tolerances):,} B of available memory"
    approximate = "; the spec is approximate" if judged["reason"].str.contains("approximate:").any() else ""
    figure = _compared_figure(judged.iloc[0])
    return f"model config agrees with the log: {figure} ({allowed}){count}{approximate}"


_LOGGED_OPTIONS = dict(
    tp="tensor_parallel_size", pp="pipeline_parallel_size", dcp="decode_context_parallel_size"
)
_LOGGED_OPTIONS.update((name, name) for name in ("kv_cache_dtype", "dtype", "max_num_batched_tokens"))
#: Launch settings the logs show (ledger columns of the same name), taken when not given.
_LAUNCH_OPTIONS = {
    "async_scheduling": bool,
    "mamba_cache_mode": str,
    "hybrid_kv_cache_manager": bool,
    "num_gpu_blocks_override": int,
    "kv_cache_group_block_sizes": str,
    "gpu_name": str,
    "host_pool": tuple,
}
#: Defaults of the layout options when neither the caller nor the logs give them.
_OPTION_DEFAULTS = {"pp": 1, "dcp": 1, "kv_cache_dtype": "auto"}
#: Spellings of one KV cache dtype: vLLM's "fp8" is e4m3 on CUDA.
_KV_DTYPE_ALIASES = {"fp8_e4m3": "fp8"}


def _same_setting(name: str, given: Any, logged: Any) -> bool:
    if name in ("tp", "pp", "dcp", "max_num_batched_tokens"):
        return int(given) == int(logged)
    if name == "dtype":
        return str(given).removeprefix("torch.") == str(logged).removeprefix("torch.")
    return _KV_DTYPE_ALIASES.get(str(given), str(given)) == _KV_DTYPE_ALIASES.get(str(logged), str(logged))


def options_for_logs(options: Mapping[str, object], key: Mapping[str, object]) -> dict:
    """:func:`kv_spec` options completed from the logs' compatibility key: a given layout option must equal
    the logs' (:class:`KVSpecError` names both: it would size another deployment)."""
    completed = dict(options)
    for name, column in _LOGGED_OPTIONS.items():
        given: Any = completed.get(name)
        logged: Any = key.get(column)
        if not is_known(logged):
            if given is None and name in _OPTION_DEFAULTS:
                completed[name] = _OPTION_DEFAULTS[name]
            continue
        if given is not None and not _same_setting(name, given, logged):
            raise KVSpecError(f"{name} {given!r} given, but the logs show {column} {logged!r}")
        if given is None:
            completed[name] = str(logged) if name in ("kv_cache_dtype", "dtype") else int(logged)
    for name, kind in (("vllm_version", str), ("block_size", int), *_LAUNCH_OPTIONS.items()):
        if completed.get(name) is None and is_known(key.get(name)):
            completed[name] = kind(key[name])
    if is_known(key.get("model")):
        completed["logged_model"] = str(key["model"])
    return completed
