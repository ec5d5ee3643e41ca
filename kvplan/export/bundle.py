"""What an export reads from a verified bundle, never from one that does not verify: its launch and, per rank,
vLLM's startup plan.

:func:`verified_launch` verifies the bundle first (:func:`kvplan.evidence.verified_approval`: every hash,
the recomputed decision; a changed bundle raises :class:`~kvplan.evidence.BundleChangedError`) and reads the
launch from the record it verified: the approved bytes, the companion utilization (the recomputed decision's,
which equals the record's where the bundle records it; a bundle approved before issue 24 gets today's rule on
its own verified inputs) and the layout fields of the compatibility key the approved logs show.

vLLM 0.33 (``VLLM_ENABLE_STARTUP_PLAN=1``, ``v1/worker/startup_plan.py``) applies a rank's plan file when
its fingerprint matches and the rank's free memory at start-up is at least ``free_memory_baseline``; else it
profiles again and overwrites the file. kvplan writes, per rank r::

    {"schema": 1, "fingerprint": fp_r, "kv_cache_memory_bytes": B − G − D rounded down to whole blocks,
     "free_memory_baseline": F_ref,r − D}

with B the approved value, G the guard, D the tolerated drift and ``fp_r`` read from rank r's own "Saved
startup plan to …/startup_plan_<fp>.json" line in the approved boot (the fingerprint hashes vLLM's config,
the device and the rank: it cannot be computed outside vLLM). Whenever vLLM applies the plan, the rank lost
at most D of its free memory, so kvplan's drift rule gives it at least ``B − D − G``: the value vLLM applies
is never above kvplan's own drift-adjusted budget, and beyond D vLLM profiles again.

>>> plan_values(12_884_377_600, 0, 2**30, 1_310_720, 52_194_590_065)  # 9,830 − 819.2 blocks → 9,010
(11809587200, 51120848241)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kvplan.checks import Approved
from kvplan.evidence import Verified, verified_approval
from kvplan.export.formats import DIGEST_ANNOTATION, LAYOUT_FLAGS, Launch
from kvplan.io.startup_plan_lines import SAVED, StartupPlanLine, read_startup_plan_lines

#: What a value may hold to be written into a flag, a YAML scalar or an argument list unchanged.
_PLAIN = re.compile(r"[A-Za-z0-9_./:@+=-]{1,512}")


def verified_launch(bundle: str | os.PathLike, digest: str | None = None) -> tuple[Verified, Launch]:
    """The verified bundle and its :class:`Launch`; ``digest`` pins the bundle as ``gate --approved-digest``."""
    verified, approved = verified_approval(bundle, digest)
    decision = verified.decision
    defaulted = decision.defaulted_key_fields if decision is not None else frozenset()
    layout = {}
    for field, flag in LAYOUT_FLAGS.items():
        value = approved.compatibility_key.get(field)
        if value is None or field in defaulted:
            continue
        layout[flag] = _plain(field, value)
    utilization = decision.gpu_memory_utilization if decision is not None else None
    # the load policy as the verified decision recomputed it (no load evidence: none allowed)
    load = decision.load if decision is not None else None
    launch = Launch(
        verified.digest,
        approved.budget_bytes,
        utilization,
        layout,
        reserve_bytes=approved.reserve_bytes,
        max_preemptions=load["max_preemptions"] if load else 0,
    )
    return verified, launch


def _plain(field: str, value: object) -> object:
    """``value`` when it can be written as it is; a number stays a number. Text from the logs with spaces,
    quotes or control characters is refused: it would change an argument list or a file's structure.

    >>> _plain("model", "meta-llama/Llama-3.1-70B-Instruct"), _plain("max_model_len", 32768)
    ('meta-llama/Llama-3.1-70B-Instruct', 32768)
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f"the bundle's compatibility key {field} is {value!r}: not a value a launch flag takes"
        )
    if isinstance(value, str) and not _PLAIN.fullmatch(value):
        raise ValueError(
            f"the bundle's compatibility key {field} is {value!r}: it holds characters that would change the "
            "exported argument list or file (spaces, quotes, control characters); export refuses it"
        )
    return value


#: The ``schema`` of vLLM 0.33's plan files (``startup_plan.py`` ``PLAN_SCHEMA_VERSION``).
PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class StartupPlan:
    """One rank's plan file: where its fingerprint was read (``where``: file and line) and its values [bytes]."""

    rank: int
    fingerprint: str
    kv_cache_memory_bytes: int
    free_memory_baseline: int
    where: str
    digest: str

    @property
    def file_name(self) -> str:
        """``startup_plan_<fingerprint>.json``, the name vLLM looks for under ``{VLLM_CACHE_ROOT}/startup_plan``."""
        return f"startup_plan_{self.fingerprint}.json"

    @property
    def text(self) -> str:
        """The file as vLLM writes one (``json.dump``), plus the bundle's digest (a key vLLM does not read)."""
        return json.dumps(
            {
                "schema": PLAN_SCHEMA_VERSION,
                "fingerprint": self.fingerprint,
                "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
                "free_memory_baseline": self.free_memory_baseline,
                DIGEST_ANNOTATION: f"sha256:{self.digest}",
            }
        )


def plan_values(
    budget_bytes: int, guard_bytes: int, drift_bytes: int, block_bytes: int | None, ref_free_bytes: int
) -> tuple[int, int]:
    """``(B − G − D rounded down to whole blocks, F_ref − D)`` [bytes]; refused when either is not positive."""
    value = budget_bytes - guard_bytes - drift_bytes
    if block_bytes:
        value = value // block_bytes * block_bytes
    baseline = ref_free_bytes - drift_bytes
    if value <= 0 or baseline <= 0:
        raise ValueError(
            f"--tolerate-drift {drift_bytes:,} B leaves no plan: value {value:,} B, baseline {baseline:,} B "
            "(both must be positive); tolerate less drift"
        )
    return value, baseline


def startup_plans(
    bundle: str | os.PathLike, drift_bytes: int = 0, digest: str | None = None
) -> list[StartupPlan]:
    """The plan of every approved rank of a verified bundle; ValueError naming the rank whose approved boot
    has no "Saved startup plan to" line (or two fingerprints), or no start-up free memory."""
    return plans_of(*verified_approval(bundle, digest), drift_bytes)


def plans_of(verified: Verified, approved: Approved, drift_bytes: int = 0) -> list[StartupPlan]:
    """:func:`startup_plans` of a bundle already verified (``kvplan gate`` has it)."""
    bundle = verified.folder
    decision = verified.decision
    if decision is None or decision.rooms is None or decision.ledger is None:
        raise ValueError(f"{bundle}: no approved boot logs to read the startup plan's fingerprints from")
    saved = _saved_lines(verified.folder, decision.ledger["source"].dropna().unique())
    plans = []
    for rank, ref_free in zip(approved.ranks, approved.ref_free_bytes):
        source, boot = decision.rooms.loc[rank, "source"], decision.rooms.loc[rank, "boot"]
        line = _rank_line(decision, saved, rank, str(source), int(boot))
        if ref_free is None:
            raise ValueError(f"rank {rank}: the approved boot shows no free memory at start-up: no baseline")
        value, baseline = plan_values(
            approved.budget_bytes, approved.guard_bytes, drift_bytes, approved.block_bytes, int(ref_free)
        )
        where = f"{source}:{line.line}"
        plans.append(StartupPlan(rank, str(line.fingerprint), value, baseline, where, verified.digest))
    return plans


def _saved_lines(folder: Path, sources: object) -> dict[str, list[StartupPlanLine]]:
    """The "Saved startup plan" lines of each approved log (bundle-relative names, read from the bundle)."""
    return {
        str(source): [line for line in read_startup_plan_lines(folder / str(source)) if line.kind == SAVED]
        for source in sources  # type: ignore[attr-defined]
    }


def _rank_line(decision, saved: dict, rank: int, source: str, boot: int) -> StartupPlanLine:
    """Rank ``rank``'s own "Saved startup plan" line in its approved boot (its process, that boot's lines)."""
    ledger = decision.ledger
    rows = ledger[(ledger["source"] == source) & (ledger["boot"] == boot) & (ledger["rank"] == rank)]
    pids = {int(pid) for pid in rows["pid"].dropna()} if "pid" in rows else set()
    bounds = [
        (entry["first_line"], entry["last_line"])
        for entry in (decision.metadata.boots if decision.metadata is not None else ())
        if entry["source"] == source and entry["boot"] == boot
    ]
    first, last = bounds[0] if bounds else (1, float("inf"))
    lines = [line for line in saved.get(source, []) if line.pid in pids and first <= line.line <= last]
    fingerprints = {line.fingerprint for line in lines}
    if not lines:
        raise ValueError(
            f"rank {rank}: no 'Saved startup plan to …/startup_plan_<fingerprint>.json' line of its process in "
            f"{source} (boot {boot}): profile the approved boot with VLLM_ENABLE_STARTUP_PLAN=1 (vLLM ≥ 0.33), "
            "whose every rank logs the fingerprint; kvplan cannot compute it"
        )
    if len(fingerprints) > 1:
        raise ValueError(
            f"rank {rank}: its process logged {len(fingerprints)} startup plan fingerprints in {source} "
            f"(lines {', '.join(str(line.line) for line in lines)}): which plan vLLM reads is not known"
        )
    return lines[-1]
