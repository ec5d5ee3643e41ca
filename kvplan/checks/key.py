"""Whether a boot is the approved launch: the compatibility key, every approved rank present, no OOM or error."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

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
#: Key fields vLLM prints as ``None`` at their default: unknown means "None" where the logs show the model.
NONE_WHEN_CONFIG_SHOWN = ("quantization", "revision")
#: How the log reader's provenance marks a key value it filled with vLLM's default (no log line).
DEFAULT_PROVENANCE = "default of vLLM"
#: The key fields not compared, by kind, as the check lists them.
_UNCOMPARED = {
    "boot only": "not recorded at approval (not compared)",
    "neither": "not shown on either side (not compared)",
    "ignored": "not used by a manual-value boot",
}


def _explicit_defaults(key: Mapping[str, object]) -> dict[str, object]:
    if plain_value(key.get("model")) is None:
        return dict(key)
    return {**key, **{f: "None" for f in NONE_WHEN_CONFIG_SHOWN if plain_value(key.get(f)) is None}}


def defaulted_key_fields(provenance: pd.DataFrame) -> frozenset[str]:
    """Key fields the reader filled with vLLM's default (no line, raw text ``default of vLLM <release>``)."""
    if provenance.empty or not {"column", "line", "raw"} <= set(provenance.columns):
        return frozenset()
    filled = provenance["line"].isna() & provenance["raw"].astype(str).str.startswith(DEFAULT_PROVENANCE)
    return frozenset(str(column) for column in provenance.loc[filled, "column"])


def read_defaulted_key_fields(metadata: ReadMetadata) -> frozenset[str]:
    """:func:`defaulted_key_fields` from the reader's compact provenance rows, without building the frame."""
    found = set()
    for part in metadata.provenance_parts:
        defaults = part[part["line"].isna()]
        for source, column, raw in zip(defaults["source"], defaults["column"], defaults["raw"]):
            text = metadata.raw_lines.lines(source, [raw])[raw] if isinstance(raw, int) else str(raw)
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
    """Every key field shown on both sides is equal (each difference listed); a field the approval recorded but
    the boot does not show (or only as vLLM's default, ``*_defaults``) leaves the check unjudged.
    """
    kinds = _field_kinds(
        _explicit_defaults(approved_key),
        _explicit_defaults(boot_key),
        manual_boot,
        approved_defaults,
        boot_defaults,
    )
    note = "".join(f"; {what}: {', '.join(kinds[kind])}" for kind, what in _UNCOMPARED.items() if kinds[kind])
    if kinds["differs"]:
        return Check(KEY_CHECK, False, "; ".join(kinds["differs"]) + note)
    equal = len(kinds["equal"])
    unchanged = f"{equal} field{'s' if equal != 1 else ''} unchanged"
    approved_only = kinds["approved only"]
    if not approved_only:
        return Check(KEY_CHECK, True, unchanged + note)
    assumed_here = [field for field in approved_only if field in boot_defaults]
    default_note = (
        f"; this boot does not show {', '.join(assumed_here)} (the reader assumed vLLM's default, which is "
        "not evidence)"
        if assumed_here
        else ""
    )
    why = (
        f"the approval recorded {', '.join(approved_only)}, which this boot does not show "
        f"(for gpu_name and driver_version, give the canary's --nvidia-smi snapshots){default_note}; "
        f"{unchanged}{note}"
    )
    return Check(KEY_CHECK, None, why)


def _field_kinds(
    approved_key: Mapping[str, object],
    boot_key: Mapping[str, object],
    manual_boot: bool,
    approved_defaults: Collection[str],
    boot_defaults: Collection[str],
) -> dict[str, list[str]]:
    """Each key field by how it compares (a difference is listed as its text)."""
    kinds: dict[str, list[str]] = defaultdict(list)
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
    """The boot shows exactly the approved ranks."""
    boot = sorted({int(rank) for rank in boot_ledger["rank"].dropna()})
    approved = sorted(int(rank) for rank in approved_ranks)
    missing = [rank for rank in approved if rank not in boot]
    extra = [rank for rank in boot if rank not in approved]
    problems = [
        f"{what} rank{'s' if len(ranks) > 1 else ''} {rank_list(ranks)}"
        for what, ranks in (("missing", missing), ("unapproved", extra))
        if ranks
    ]
    if problems:
        seen = f"the boot shows rank {rank_list(boot) or 'none'} of approved {_rank_span(approved)}"
        return Check(RANKS_CHECK, False, f"{', '.join(problems)} ({seen})")
    return Check(RANKS_CHECK, True, f"ranks {_rank_span(boot)} of {len(approved)}")


def check_outcomes(boot_ledger: pd.DataFrame) -> Check:
    """No rank ran out of memory or stopped with an error; an incomplete boot cannot be judged."""
    failed, unknown = [], []
    for row in boot_ledger.itertuples(index=False):
        outcome = plain_value(getattr(row, "outcome", None))
        where = (
            f"{getattr(row, 'source', '?')} rank {'?' if plain_value(row.rank) is None else int(row.rank)}"
        )
        if outcome in ("oom", "error"):
            failed.append(f"{where}: {outcome}: {plain_value(getattr(row, 'error', None)) or 'no text'}")
        elif outcome != "ok":
            unknown.append(f"{where}: {outcome or 'no outcome'}")
    if failed:
        return Check(OUTCOME_CHECK, False, "; ".join(failed + unknown))
    if unknown:
        return Check(
            OUTCOME_CHECK, None, f"{'; '.join(unknown)} (the log stops before the KV cache is sized)"
        )
    return Check(OUTCOME_CHECK, True, f"{len(boot_ledger)} rank rows ok")


def rank_list(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)


def _rank_span(ranks: Sequence[int]) -> str:
    """``0-3`` for a contiguous run, else the list."""
    if len(ranks) > 1 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return rank_list(ranks)
