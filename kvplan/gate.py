"""Gate a canary boot against an approved budget: each check with its verdict and evidence.

Every check is a pure function of the approved decision (:class:`Approved`) and the boot's ledger
(one row per boot × rank, glossary columns from :mod:`kvplan.columns`). A check passes (``True``),
fails (``False``) or cannot be judged from the evidence given (``None``); :func:`gate_verdict` folds
them into one answer. A check with nothing to look at in this gate (no admission plan was approved;
no observation of the reserve after warm-up) is *not applicable* (``applicable=False``, ``passed``
None): it is listed as ``N/A`` with the reason and neither passes, fails nor blocks the verdict.
The budget check takes, per rank, the lower of :func:`kvplan.drift.adjusted_budget_bytes` applied to
the rank's safe budget at approval (``safe_ref − max(0, F_ref − F_boot)``) and the boot's own room less
the reserve, then subtracts the guard: that must be ≥ the approved value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from kvplan.budget import kv_cache_flag, round_down_to_blocks
from kvplan.drift import adjusted_budget_bytes
from kvplan.ledger import plain_value
from kvplan.units import format_size
from kvplan.verdict import Check

KEY_CHECK = "compatibility key"
RANKS_CHECK = "every rank present"
OUTCOME_CHECK = "no OOM or error"
BUDGET_CHECK = "approved value fits every rank"
RESERVE_CHECK = "reserve present after warm-up"
TOKENS_CHECK = "tokens cover the admission plan"


@dataclass(frozen=True)
class Approved:
    """What a gate needs from an approval (sizes in bytes, one entry per approved rank).

    ``ref_free_bytes`` is each rank's startup free memory at approval (None where the approved
    logs did not show it); ``tokens_required`` is the admission plan in tokens (None: no plan);
    ``logged_tokens`` the lowest "GPU KV cache size" the approved profiled boots logged (boots at a
    manual value left out); ``capacity_tokens`` the tokens the approved value holds at
    ``max_model_len`` (None without a model); ``defaulted_key_fields`` the key fields the approved logs
    did not show, filled with vLLM's default by the reader (:func:`defaulted_key_fields`).
    """

    budget_bytes: int
    ranks: tuple[int, ...]
    safe_bytes: tuple[int, ...]
    ref_free_bytes: tuple[int | None, ...]
    reserve_bytes: int
    guard_bytes: int
    block_bytes: int | None
    compatibility_key: Mapping[str, object]
    tokens_required: int | None = None
    logged_tokens: int | None = None
    capacity_tokens: int | None = None
    defaulted_key_fields: frozenset[str] = frozenset()


#: Key fields a manual-value boot does not use: with ``--kv-cache-memory-bytes`` vLLM sizes the KV cache
#: from that value, and its own hint says to replace ``--gpu-memory-utilization`` by it.
MANUAL_BOOT_IGNORES = ("gpu_memory_utilization",)
#: Key fields vLLM leaves out or prints as ``None`` when they are at their default (no quantization,
#: the default revision): on a side whose logs show the model's configuration, unknown means "None".
NONE_WHEN_CONFIG_SHOWN = ("quantization", "revision")
#: How the log reader's provenance marks a key value it filled with vLLM's default (no log line).
DEFAULT_PROVENANCE = "default of vLLM"


def _explicit_defaults(key: Mapping[str, object]) -> dict[str, object]:
    if plain_value(key.get("model")) is None:
        return dict(key)
    return {**key, **{f: "None" for f in NONE_WHEN_CONFIG_SHOWN if plain_value(key.get(f)) is None}}


def defaulted_key_fields(provenance: pd.DataFrame) -> frozenset[str]:
    """Key fields the reader filled with vLLM's default because the logs did not show them.

    The log reader records such a value with no line and the raw text ``default of vLLM <release>``
    (e.g. ``block_size`` 16, which MLA and hybrid models do not use).

    >>> defaulted_key_fields(pd.DataFrame({"column": ["block_size", "model"], "line": [None, 3],
    ...                                    "raw": ["default of vLLM 0.26.0", "model=m"]}))
    frozenset({'block_size'})
    """
    if provenance.empty or not {"column", "line", "raw"} <= set(provenance.columns):
        return frozenset()
    filled = provenance["line"].isna() & provenance["raw"].astype(str).str.startswith(DEFAULT_PROVENANCE)
    return frozenset(str(column) for column in provenance.loc[filled, "column"])


def check_compatibility_key(
    approved_key: Mapping[str, object],
    boot_key: Mapping[str, object],
    manual_boot: bool = False,
    approved_defaults: Collection[str] = (),
    boot_defaults: Collection[str] = (),
) -> Check:
    """Every key field shown on both sides is equal; each difference is listed.

    A field unknown on both sides, or shown by the boot only, cannot be compared: the detail names it
    and it is not counted as unchanged. A field the approval recorded but the boot does not show (e.g.
    ``gpu_name`` from an nvidia-smi snapshot at approval, none given to the gate) leaves the check
    unjudged (``passed`` None) unless another field differs. A value the reader filled with vLLM's
    default (``approved_defaults``, ``boot_defaults``: :func:`defaulted_key_fields`) is not shown: equal
    to a shown value it is not compared (a boot's default against a shown approved value leaves the
    check unjudged); a default on both sides is the same release's rule and compares; a different value
    is a difference either way. A ``manual_boot`` (one run with ``--kv-cache-memory-bytes``) is not
    compared on :data:`MANUAL_BOOT_IGNORES`. A side that shows the model's configuration reads an unknown
    :data:`NONE_WHEN_CONFIG_SHOWN` field as ``None`` (vLLM's default), so adding quantization fails.

    >>> check_compatibility_key({"model": "m", "block_size": 16}, {"model": "m", "block_size": 32}).detail
    'block_size: approved 16, boot 32'
    >>> check_compatibility_key({"model": "m", "gpu_name": None}, {"model": "m", "gpu_name": None}).detail
    '3 fields unchanged; not shown on either side (not compared): gpu_name'
    >>> check_compatibility_key({"model": "m"}, {"model": "m", "quantization": "fp8"}).detail
    'quantization: approved None, boot fp8'
    >>> check_compatibility_key({"model": "m", "gpu_name": "H100"}, {"model": "m"}).passed is None
    True
    >>> key = {"model": "m", "block_size": 16}
    >>> check_compatibility_key(key, key, boot_defaults={"block_size"}).passed is None
    True
    """
    approved_key, boot_key = _explicit_defaults(approved_key), _explicit_defaults(boot_key)
    differences, boot_only, approved_only, neither, equal, ignored = [], [], [], [], 0, []
    for field in sorted(set(approved_key) | set(boot_key)):
        approved, boot = plain_value(approved_key.get(field)), plain_value(boot_key.get(field))
        assumed = (field in approved_defaults, field in boot_defaults)
        if manual_boot and field in MANUAL_BOOT_IGNORES:
            ignored.append(field)
        elif approved is None and boot is None:
            neither.append(field)
        elif approved is not None and boot is not None and str(approved) != str(boot):
            differences.append(f"{field}: approved {approved}, boot {boot}")
        elif approved is None or assumed == (True, False):
            boot_only.append(field)
        elif boot is None or assumed == (False, True):
            approved_only.append(field)
        else:
            equal += 1
    notes = [f"not recorded at approval (not compared): {', '.join(boot_only)}" if boot_only else "",
             f"not shown on either side (not compared): {', '.join(neither)}" if neither else "",
             f"not used by a manual-value boot: {', '.join(ignored)}" if ignored else ""]
    note = "".join(f"; {part}" for part in notes if part)
    if differences:
        return Check(KEY_CHECK, False, "; ".join(differences) + note)
    unchanged = f"{equal} field{'s' if equal != 1 else ''} unchanged"
    if approved_only:
        assumed_here = [field for field in approved_only if field in boot_defaults]
        default_note = (f"; this boot does not show {', '.join(assumed_here)} (the reader assumed vLLM's "
                        "default, which is not evidence)") if assumed_here else ""
        return Check(KEY_CHECK, None, (
            f"the approval recorded {', '.join(approved_only)}, which this boot does not show (for gpu_name "
            f"and driver_version, give the canary's --nvidia-smi snapshots){default_note}; "
            f"{unchanged}{note}"))
    return Check(KEY_CHECK, True, unchanged + note)


def check_ranks_present(approved_ranks: Sequence[int], boot_ledger: pd.DataFrame) -> Check:
    """The boot shows exactly the approved ranks.

    >>> check_ranks_present([0, 1], pd.DataFrame({"rank": [0]})).detail
    'missing rank 1 (the boot shows rank 0 of approved 0-1)'
    """
    boot = sorted({int(rank) for rank in boot_ledger["rank"].dropna()})
    approved = sorted(int(rank) for rank in approved_ranks)
    missing = [rank for rank in approved if rank not in boot]
    extra = [rank for rank in boot if rank not in approved]
    problems = []
    if missing:
        problems.append(f"missing rank{'s' if len(missing) > 1 else ''} {_rank_list(missing)}")
    if extra:
        problems.append(f"unapproved rank{'s' if len(extra) > 1 else ''} {_rank_list(extra)}")
    seen = f"the boot shows rank {_rank_list(boot) or 'none'} of approved {_rank_span(approved)}"
    if problems:
        return Check(RANKS_CHECK, False, f"{', '.join(problems)} ({seen})")
    return Check(RANKS_CHECK, True, f"ranks {_rank_span(boot)} of {len(approved)}")


def check_outcomes(boot_ledger: pd.DataFrame) -> Check:
    """No rank ran out of memory or stopped with an error; an incomplete boot cannot be judged.

    >>> frame = pd.DataFrame({"source": ["c.log"], "rank": [2], "outcome": ["oom"],
    ...                       "error": ["CUDA out of memory"]})
    >>> check_outcomes(frame).detail
    'c.log rank 2: oom: CUDA out of memory'
    """
    failed, unknown = [], []
    for row in boot_ledger.itertuples(index=False):
        outcome = plain_value(getattr(row, "outcome", None))
        where = f"{getattr(row, 'source', '?')} rank {_rank_text(row.rank)}"
        if outcome in ("oom", "error"):
            failed.append(f"{where}: {outcome}: {plain_value(getattr(row, 'error', None)) or 'no text'}")
        elif outcome != "ok":
            unknown.append(f"{where}: {outcome or 'no outcome'}")
    if failed:
        return Check(OUTCOME_CHECK, False, "; ".join(failed + unknown))
    if unknown:
        detail = "; ".join(unknown) + " (the log stops before the KV cache is sized)"
        return Check(OUTCOME_CHECK, None, detail)
    return Check(OUTCOME_CHECK, True, f"{len(boot_ledger)} rank rows ok")


def check_budget_fits(approved: Approved, boot_ledger: pd.DataFrame, guard_bytes: int) -> Check:
    """Per rank, the lowest estimate of what this boot can allocate, less the guard, is ≥ the approved value.

    Two estimates, the lower wins (more evidence can only lower a budget): the drift rule
    ``safe_ref − max(0, F_ref − F_boot)`` (``F_boot`` the rank's lowest startup free memory in the boot
    ledger) and, where the boot logs its own room, ``room_boot − reserve`` (a canary that changed what is
    not in the key, e.g. ``max_num_batched_tokens``, shows its smaller room only there). A rank with
    neither cannot be judged. A boot that ran a manual ``--kv-cache-memory-bytes`` value above the approved
    one fails: it is not a canary of the approved value. A rank left with no room at all fails (it is not
    bad input: the boot is judged, with every check printed). On failure the detail names the lower value
    that fits (rounded down to whole blocks), as ``kvplan drift`` does.

    >>> GiB = 1 << 30
    >>> a = Approved(30 * GiB, (0,), (30 * GiB,), (42 * GiB,), GiB, 0, None, {})
    >>> frame = pd.DataFrame({"rank": [0], "init_free_bytes": [42 * GiB], "room_bytes": [30 * GiB]})
    >>> check_budget_fits(a, frame, 0).detail.split("; ")[1]
    "rank 0: the boot's own room 30 GiB − reserve 1 GiB − 0 B = 29 GiB < 30 GiB"
    """
    boot_free = _per_rank(boot_ledger, "init_free_bytes", "min")
    room = _per_rank(boot_ledger, "room_bytes", "min")
    manual = _per_rank(boot_ledger, "manual_kv_bytes", "max")
    budget = approved.budget_bytes
    drift_lines, room_lines, estimates = [], [], {}
    reprofile = False
    for rank, safe, ref in zip(approved.ranks, approved.safe_bytes, approved.ref_free_bytes):
        if ref is not None and rank in boot_free:
            adjusted = adjusted_budget_bytes(safe, int(ref), boot_free[rank], guard_bytes)
            reprofile = reprofile or boot_free[rank] > int(ref)
            estimates[rank] = adjusted
            drift_lines.append(
                f"rank {rank}: {format_size(safe)} − max(0, {format_size(int(ref))} − "
                f"{format_size(boot_free[rank])}) − {format_size(guard_bytes)} = {format_size(adjusted)} "
                f"{'≥' if adjusted >= budget else '<'} {format_size(budget)}")
        if rank in room:
            own = room[rank] - approved.reserve_bytes - guard_bytes
            estimates[rank] = min(own, estimates.get(rank, own))
            room_lines.append(
                f"rank {rank}: the boot's own room {format_size(room[rank])} − reserve "
                f"{format_size(approved.reserve_bytes)} − {format_size(guard_bytes)} = {format_size(own)} "
                f"{'≥' if own >= budget else '<'} {format_size(budget)}")
    above = [f"rank {rank} ran {kv_cache_flag(value)}, above the approved {format_size(budget)}: not a "
             "canary of the approved value" for rank, value in sorted(manual.items()) if value > budget]
    failed = bool(above) or any(value < budget for value in estimates.values())
    unjudged = [rank for rank in approved.ranks if rank not in estimates]
    if unjudged and not failed:
        not_approved = [rank for rank, ref in zip(approved.ranks, approved.ref_free_bytes)
                        if ref is None and rank in unjudged]
        not_booted = [rank for rank in unjudged if rank not in boot_free]
        where = [f"rank {_rank_list(ranks)} {place}" for ranks, place in
                 ((not_approved, "at approval"), (not_booted, "in this boot")) if ranks]
        return Check(BUDGET_CHECK, None, f"startup free memory not shown for {' and '.join(where)}")
    lines = drift_lines + room_lines
    if reprofile:
        lines.append("some rank has more free memory than at approval: re-profile to raise the value")
    lines += above
    if failed:
        if unjudged:
            lines.append(f"rank {_rank_list(unjudged)}: no startup free memory or room shown")
        if estimates:
            lowest = min(estimates.values())
            limiting = next(rank for rank in approved.ranks if estimates.get(rank) == lowest)
            lines.append(_lower_value_text(lowest, limiting, approved.block_bytes))
    return Check(BUDGET_CHECK, not failed, "; ".join(lines))


def check_reserve_after_warmup(
    approved: Approved,
    boot_ledger: pd.DataFrame,
    free_after_warmup_bytes: Mapping[int, int] | None = None,
) -> Check:
    """The reserve is still free on every rank once the KV cache is allocated and graphs captured.

    Only an observation of this boot counts: free memory per rank in a snapshot taken after warm-up
    (``free_after_warmup_bytes``, e.g. from nvidia-smi) must be ≥ the reserve; without a snapshot, a
    boot that ran a manual ``--kv-cache-memory-bytes`` value and logged its room after warm-up must
    keep ``room − manual value`` ≥ the reserve. A profiled boot's KV cache is not the approved value,
    so ``room − approved`` would be arithmetic, not an observation (the budget check already covers
    ``room − reserve ≥ approved``): with no rank observed the check is not applicable.

    >>> frame = pd.DataFrame({"rank": [0], "room_bytes": [31 << 30], "manual_kv_bytes": [None]})
    >>> a = Approved(30 << 30, (0,), (30 << 30,), (42 << 30,), 1 << 30, 0, None, {})
    >>> check_reserve_after_warmup(a, frame).applicable
    False
    """
    room = _per_rank(boot_ledger, "room_bytes", "min")
    manual = _per_rank(boot_ledger, "manual_kv_bytes", "max")
    lines, passed = [], True
    for rank in approved.ranks:
        if free_after_warmup_bytes is not None and rank in free_after_warmup_bytes:
            left, how = free_after_warmup_bytes[rank], "free after warm-up (snapshot)"
        elif rank in room and rank in manual:
            left = room[rank] - manual[rank]
            how = f"room {format_size(room[rank])} − KV {format_size(manual[rank])}"
        else:
            continue
        ok = left >= approved.reserve_bytes
        passed = passed and ok
        lines.append(f"rank {rank}: {how} = {format_size(left)} {'≥' if ok else '<'} reserve "
                     f"{format_size(approved.reserve_bytes)}")
    if not lines:
        return Check(RESERVE_CHECK, None, "not applicable: no observation after warm-up (give an nvidia-smi "
                                          "snapshot taken after warm-up with --nvidia-smi, or gate a boot "
                                          "that ran the manual value and logged its room)", applicable=False)
    return Check(RESERVE_CHECK, passed, "; ".join(lines))


def check_tokens(approved: Approved, boot_ledger: pd.DataFrame) -> Check:
    """The boot's logged "GPU KV cache size" in tokens covers the admission plan recorded at approval.

    Without a recorded plan the check is not applicable (it neither passes nor blocks).

    >>> a = Approved(1, (0,), (1,), (1,), 0, 0, None, {}, tokens_required=49_152)
    >>> check_tokens(a, pd.DataFrame({"rank": [0], "kv_cache_tokens": [40_000]})).passed
    False
    """
    if approved.tokens_required is None:
        return Check(TOKENS_CHECK, None, "not applicable: no admission plan recorded at approval (approve "
                                         "with --target-concurrency and --seq-len)", applicable=False)
    if "kv_cache_tokens" not in boot_ledger.columns or boot_ledger["kv_cache_tokens"].dropna().empty:
        return Check(TOKENS_CHECK, None, "the boot did not log its GPU KV cache size")
    tokens = int(boot_ledger["kv_cache_tokens"].dropna().min())
    passed = tokens >= approved.tokens_required
    return Check(TOKENS_CHECK, passed, f"GPU KV cache size {tokens:,} tokens {'≥' if passed else '<'} "
                                       f"plan {approved.tokens_required:,} tokens")


def gate_checks(
    approved: Approved,
    boot_ledger: pd.DataFrame,
    boot_key: Mapping[str, object],
    guard_bytes: int | None = None,
    free_after_warmup_bytes: Mapping[int, int] | None = None,
    boot_defaults: Collection[str] = (),
) -> list[Check]:
    """Every gate check of a boot against an approval, in a fixed order.

    ``guard_bytes`` None uses the guard recorded in the approval's policy; ``boot_defaults`` are the key
    fields the boot's logs do not show (:func:`defaulted_key_fields` of the boot's provenance).
    """
    guard = approved.guard_bytes if guard_bytes is None else guard_bytes
    if guard < 0:
        raise ValueError(f"guard must not be negative, got {guard} bytes")
    return [
        check_compatibility_key(approved.compatibility_key, boot_key, manual_boot=_is_manual(boot_ledger),
                                approved_defaults=approved.defaulted_key_fields, boot_defaults=boot_defaults),
        check_ranks_present(approved.ranks, boot_ledger),
        check_outcomes(boot_ledger),
        check_budget_fits(approved, boot_ledger, guard),
        check_reserve_after_warmup(approved, boot_ledger, free_after_warmup_bytes),
        check_tokens(approved, boot_ledger),
    ]


def _is_manual(boot_ledger: pd.DataFrame) -> bool:
    """Whether the boot ran a manual ``--kv-cache-memory-bytes`` value (its ledger shows one)."""
    return "manual_kv_bytes" in boot_ledger and bool(boot_ledger["manual_kv_bytes"].notna().any())


def _lower_value_text(uniform_bytes: int, limiting_rank: int, block_bytes: int | None) -> str:
    value = uniform_bytes if block_bytes is None or uniform_bytes <= 0 else round_down_to_blocks(
        uniform_bytes, block_bytes)
    if value <= 0:
        return f"no value fits rank {limiting_rank}: re-profile this deployment"
    rounding = " (whole blocks)" if block_bytes else ""
    return (f"a lower value fits: {format_size(value)}{rounding}, {kv_cache_flag(value)} "
            f"(limiting rank {limiting_rank})")


def _per_rank(ledger: pd.DataFrame, column: str, pick: str) -> dict[int, int]:
    """The ``pick`` (``"min"`` or ``"max"``) non-missing value of ``column`` per rank, over every row.

    The worst boot wins: the lowest free memory or room, the highest manual KV value a rank ran.

    >>> _per_rank(pd.DataFrame({"rank": [0, 0], "room_bytes": [5, 3]}), "room_bytes", "min")
    {0: 3}
    """
    if column not in ledger.columns:
        return {}
    values = ledger[["rank", column]].dropna()
    return {int(rank): int(value) for rank, value in values.groupby("rank")[column].agg(pick).items()}


def _rank_text(rank: object) -> str:
    return "?" if plain_value(rank) is None else str(int(rank))


def _rank_list(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)


def _rank_span(ranks: Sequence[int]) -> str:
    """``0-3`` for a contiguous run, else the list.

    >>> _rank_span([0, 1, 2, 3]), _rank_span([0, 2])
    ('0-3', '0, 2')
    """
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return _rank_list(ranks)
