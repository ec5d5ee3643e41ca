"""Whether a boot is the approved launch: the compatibility key, every approved rank present, no OOM or error."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from kvplan.checks import Check
from kvplan.ledger import plain_value

if TYPE_CHECKING:
    from kvplan.io.metadata import ReadMetadata

KEY_CHECK = "compatibility key"
RANKS_CHECK = "every rank present"
OUTCOME_CHECK = "no OOM or error"

#: Key fields a manual-value boot does not use (vLLM sizes the KV cache from ``--kv-cache-memory-bytes``).
MANUAL_BOOT_IGNORES = ("gpu_memory_utilization",)
#: Key fields vLLM leaves out or prints as ``None`` at their default: unknown means "None" where the logs show
#: the model's configuration.
NONE_WHEN_CONFIG_SHOWN = ("quantization", "revision")
#: How the log reader's provenance marks a key value it filled with vLLM's default (no log line).
DEFAULT_PROVENANCE = "default of vLLM"


def _explicit_defaults(key: Mapping[str, object]) -> dict[str, object]:
    if plain_value(key.get("model")) is None:
        return dict(key)
    return {**key, **{f: "None" for f in NONE_WHEN_CONFIG_SHOWN if plain_value(key.get(f)) is None}}


def defaulted_key_fields(provenance: pd.DataFrame) -> frozenset[str]:
    """Key fields the reader filled with vLLM's default (no line, raw text ``default of vLLM <release>``).

    >>> defaulted_key_fields(pd.DataFrame({"column": ["block_size", "model"], "line": [None, 3],
    ...                                    "raw": ["default of vLLM 0.26.0", "model=m"]}))
    frozenset({'block_size'})
    """
    if provenance.empty or not {"column", "line", "raw"} <= set(provenance.columns):
        return frozenset()
    filled = provenance["line"].isna() & provenance["raw"].astype(str).str.startswith(DEFAULT_PROVENANCE)
    return frozenset(str(column) for column in provenance.loc[filled, "column"])


def read_defaulted_key_fields(metadata: ReadMetadata) -> frozenset[str]:
    """:func:`defaulted_key_fields` from the reader's compact provenance rows, without building the frame.

    >>> from kvplan.io.metadata import ReadMetadata
    >>> rows = [("a.log", pd.NA, 0, pd.NA, "block_size", 16, "default of vLLM 0.26.0"),
    ...         ("a.log", 3, 0, pd.NA, "model", "m", 120)]
    >>> read_defaulted_key_fields(ReadMetadata(provenance_rows=rows))
    frozenset({'block_size'})
    """
    found = set()
    for source, line, _, _, column, _, raw in metadata.provenance_rows:
        if type(line) is int or not pd.isna(line):
            continue
        text = metadata.raw_lines.line(source, raw) if isinstance(raw, int) else str(raw)
        if text.startswith(DEFAULT_PROVENANCE):
            found.add(str(column))
    return frozenset(found)


def check_compatibility_key(
    approved_key: Mapping[str, object],
    boot_key: Mapping[str, object],
    manual_boot: bool = False,
    approved_defaults: Collection[str] = (),
    boot_defaults: Collection[str] = (),
) -> Check:
    """Every key field shown on both sides is equal; each difference is listed. A field shown on neither side,
    by the boot only, or filled with vLLM's default (``*_defaults``) is not compared; one the approval recorded
    but the boot does not show leaves the check unjudged.

    >>> check_compatibility_key({"model": "m", "block_size": 16}, {"model": "m", "block_size": 32}).detail
    'block_size: approved 16, boot 32'
    >>> check_compatibility_key({"model": "m", "gpu_name": None}, {"model": "m", "gpu_name": None}).detail
    '3 fields unchanged; not shown on either side (not compared): gpu_name'
    >>> check_compatibility_key({"model": "m"}, {"model": "m", "quantization": "fp8"}).detail
    'quantization: approved None, boot fp8'
    >>> check_compatibility_key({"model": "m", "gpu_name": "H100"}, {"model": "m"}).passed is None
    True
    """
    kinds = _field_kinds(
        _explicit_defaults(approved_key),
        _explicit_defaults(boot_key),
        manual_boot,
        approved_defaults,
        boot_defaults,
    )
    differences, boot_only, approved_only = kinds["differs"], kinds["boot only"], kinds["approved only"]
    neither, ignored, equal = kinds["neither"], kinds["ignored"], len(kinds["equal"])
    notes = [
        f"not recorded at approval (not compared): {', '.join(boot_only)}" if boot_only else "",
        f"not shown on either side (not compared): {', '.join(neither)}" if neither else "",
        f"not used by a manual-value boot: {', '.join(ignored)}" if ignored else "",
    ]
    note = "".join(f"; {part}" for part in notes if part)
    if differences:
        return Check(KEY_CHECK, False, "; ".join(differences) + note)
    unchanged = f"{equal} field{'s' if equal != 1 else ''} unchanged"
    if approved_only:
        assumed_here = [field for field in approved_only if field in boot_defaults]
        default_note = (
            f"; this boot does not show {', '.join(assumed_here)} (the reader assumed vLLM's default, which is "
            "not evidence)"
            if assumed_here
            else ""
        )
        return Check(
            KEY_CHECK,
            None,
            (
                f"the approval recorded {', '.join(approved_only)}, which this boot does not show "
                f"(for gpu_name and driver_version, give the canary's --nvidia-smi snapshots){default_note}; "
                f"{unchanged}{note}"
            ),
        )
    return Check(KEY_CHECK, True, unchanged + note)


def _field_kinds(
    approved_key: Mapping[str, object],
    boot_key: Mapping[str, object],
    manual_boot: bool,
    approved_defaults: Collection[str],
    boot_defaults: Collection[str],
) -> dict[str, list[str]]:
    """Each key field by how it compares (a difference is listed as its text)."""
    kinds: dict[str, list[str]] = {
        k: [] for k in ("differs", "boot only", "approved only", "neither", "ignored", "equal")
    }
    for field in sorted(set(approved_key) | set(boot_key)):
        approved, boot = plain_value(approved_key.get(field)), plain_value(boot_key.get(field))
        assumed = (field in approved_defaults, field in boot_defaults)
        if manual_boot and field in MANUAL_BOOT_IGNORES:
            kinds["ignored"].append(field)
        elif approved is None and boot is None:
            kinds["neither"].append(field)
        elif approved is not None and boot is not None and str(approved) != str(boot):
            kinds["differs"].append(f"{field}: approved {approved}, boot {boot}")
        elif approved is None or assumed == (True, False):
            kinds["boot only"].append(field)
        elif boot is None or assumed == (False, True):
            kinds["approved only"].append(field)
        elif assumed == (True, True):  # issue 25: filled in on both sides, shown on neither
            kinds["neither"].append(field)
        else:
            kinds["equal"].append(field)
    return kinds


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
        problems.append(f"missing rank{'s' if len(missing) > 1 else ''} {rank_list(missing)}")
    if extra:
        problems.append(f"unapproved rank{'s' if len(extra) > 1 else ''} {rank_list(extra)}")
    seen = f"the boot shows rank {rank_list(boot) or 'none'} of approved {_rank_span(approved)}"
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


def _rank_text(rank: Any) -> str:
    return "?" if plain_value(rank) is None else str(int(rank))


def rank_list(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)


def _rank_span(ranks: Sequence[int]) -> str:
    """``0-3`` for a contiguous run, else the list.

    >>> _rank_span([0, 1, 2, 3]), _rank_span([0, 2])
    ('0-3', '0, 2')
    """
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return rank_list(ranks)
