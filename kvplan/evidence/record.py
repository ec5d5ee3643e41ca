"""The bundle record (``budget.json``, schema in ``docs/budget-json.md``): its bytes, digests and seal."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kvplan import __version__
from kvplan.checks.launch import LAUNCH_CHECKS
from kvplan.ledger import is_known
from kvplan.plan import AdmissionPlan, Decision, LoadPolicy, ModelLayout, Policy, decide, read_evidence
from kvplan.units import format_size

SCHEMA = "kvplan.budget"
SCHEMA_VERSION = 2
#: The key of ``decision`` that marks a bundle with its launch (issue 24); a bundle without it was approved
#: before and is recomputed as written (keys were added, none re-meant: the schema version stays 2).
LAUNCH_KEY = "launch_flags"
BUDGET_JSON = "budget.json"
INPUTS_DIR = "inputs"
CHARTS_DIR = "charts"
DIGEST_CHARS = 12
SEAL_KEY = "seal_sha256"
#: Keys older bundles lack (they verify as written): the text escaping rules' version (docs/safety.md) and the
#: checks accepted without a verdict (``--allow-unjudged``).
TEXT_ESCAPING_KEY, TEXT_ESCAPING = "text_escaping", 1
ALLOWED_UNJUDGED_KEY = "allowed_unjudged"
NVIDIA_SMI_ROLE = "nvidia-smi"
#: Input roles in the order a bundle lists them.
ROLES = ("log", NVIDIA_SMI_ROLE, "model config", "load")
#: Every top-level key approve writes, in order; ``load`` only with load evidence, the seal after 0.1.0.
KNOWN_KEYS = (
    *("schema", "schema_version", "kvplan_version", "created_utc", "approver", "note", "inputs_digest"),
    *("decision", "policy", "ranks", "summary", "stranded", "kv_spec", "model_options", "capacity"),
    *("admission_plan", "load", "compatibility_key", "checks", "warnings", TEXT_ESCAPING_KEY, "inputs"),
    *(ALLOWED_UNJUDGED_KEY, "ledger", "files", SEAL_KEY),
)
#: The keys of ``summary``, each the budget's attribute of that name.
SUMMARY_KEYS = ("min_safe_bytes", "median_safe_bytes", "max_safe_bytes", "min_median_ratio")
SUMMARY_KEYS += ("weak_rank_loss_fraction", "allocated_total_bytes")
#: The keys of each ``inputs[]`` entry.
INPUT_KEYS = ("path", "bundle_path", "sha256", "size_bytes", "role")
#: Read unit for hashing and copying [bytes].
HASH_CHUNK_BYTES = 1 << 20
#: Types :func:`json_value` returns as they are: never missing, already plain JSON.
_ALWAYS_KNOWN = frozenset({int, str, bool})
#: ``json.dumps``'s options of the digests' canonical JSON: sorted keys, no spaces, ASCII.
CANONICAL: dict[str, Any] = {"sort_keys": True, "separators": (",", ":")}


class BundleError(ValueError):
    """A bundle that cannot be read (missing folder, bad or unknown ``budget.json``)."""


class BundleExistsError(BundleError):
    """Approving into a folder that already holds a bundle: bundles are never overwritten."""


class BundleChangedError(BundleError):
    """A bundle that no longer verifies: a gate cannot judge a boot against it."""


class ApprovalError(ValueError):
    """A check at approval failed (e.g. the admission plan does not fit): no bundle is written."""


def sha256_of(pieces: Iterable[bytes]) -> str:
    """Hex SHA-256 of the concatenated ``pieces``, never joined."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    return digest.hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    with open(path, "rb") as handle:
        return sha256_of(iter(lambda: handle.read(HASH_CHUNK_BYTES), b""))


def canonical_json(value: object) -> bytes:
    """The bytes the digests are taken over (:data:`CANONICAL`).

    >>> canonical_json({"b": 1, "a": [True, None]})
    b'{"a":[true,null],"b":1}'
    """
    return json.dumps(value, **CANONICAL).encode()


def json_chunks(value: object, **options: Any) -> Iterator[bytes]:
    """``json.dumps(value, **options)`` in pieces, never whole (``budget.json``: 40 MB at 5,000 boots)."""
    pieces = json.JSONEncoder(**options).iterencode(value)
    while batch := "".join(itertools.islice(pieces, 4096)):
        yield batch.encode()


def inputs_digest(file_hashes: Sequence[str], settings: Mapping[str, object]) -> str:
    """Hex SHA-256 over the inputs' hashes (in order) and the settings, as canonical JSON."""
    return hashlib.sha256(canonical_json({"files": list(file_hashes), "settings": settings})).hexdigest()


def seal(record: Mapping) -> str:
    """Hex SHA-256 of the canonical JSON of ``record`` without its seal: every key and value."""
    return sha256_of(json_chunks({k: v for k, v in record.items() if k != SEAL_KEY}, **CANONICAL))


def record_chunks(record: Mapping) -> Iterator[bytes]:
    """The bytes of ``budget.json``: ``json.dumps(record, indent=2)`` (ASCII) and a newline, in pieces."""
    yield from json_chunks(record, indent=2)
    yield b"\n"


def bundle_digest(data: bytes) -> str:
    """The bundle's digest: the SHA-256 of its ``budget.json`` bytes (which list every other file's)."""
    return hashlib.sha256(data).hexdigest()


def bundle_name(created: datetime, digest: str) -> str:
    """Folder name of a bundle: UTC date and the first 12 hex digits of its inputs digest."""
    return f"{created.astimezone(timezone.utc):%Y-%m-%d}-{digest[:DIGEST_CHARS]}"


def input_names(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Bundle names of the input copies, numbered when names clash; a control character or ``\\`` becomes ``_``."""
    names = [re.sub(r"[\x00-\x1f\\]", "_", Path(path).name) for path in paths]  # see reading.path_problem
    if len(set(names)) == len(names):
        return [f"{INPUTS_DIR}/{name}" for name in names]
    return [f"{INPUTS_DIR}/{i}-{name}" for i, name in enumerate(names, start=1)]


@dataclass(frozen=True)
class Approval:
    """What an approval states: who, with which kvplan, its policy and settings; ``launch`` False: no
    :data:`LAUNCH_KEY` or start-up checks (issue 24); ``escaping`` False: no :data:`TEXT_ESCAPING_KEY`."""

    policy: Policy
    approver: str
    note: str = ""
    version: str = __version__
    allowed_unjudged: tuple[str, ...] = ()
    launch: bool = True
    escaping: bool = True
    options: Mapping[str, object] | None = None
    plan: AdmissionPlan | None = None
    load_policy: LoadPolicy | None = None


def stated_digest(approval: Approval, inputs: Sequence[Mapping[str, object]]) -> str:
    """:func:`inputs_digest` of the inputs (``path``, ``role``, ``sha256``) and what ``approval`` states."""
    stated: dict = {"approver": approval.approver, "note": approval.note, "kvplan_version": approval.version}
    if approval.allowed_unjudged:
        stated[ALLOWED_UNJUDGED_KEY] = list(approval.allowed_unjudged)
    options, plan, load = approval.options, approval.plan, approval.load_policy
    settings = {
        "policy": asdict(approval.policy),
        "model_options": None if options is None else dict(options),
        "plan": asdict(plan) if plan else None,
        "inputs": [{"path": entry["path"], "role": entry["role"]} for entry in inputs],
        "approval": stated,
        **({"load": asdict(load)} if load is not None else {}),
    }
    return inputs_digest([str(entry["sha256"]) for entry in inputs], settings)


def decide_copies(copies: Mapping[str, list[tuple[Path, str]]], approval: Approval) -> Decision:
    """The decision over a bundle's copies of its inputs, ``(path, bundle path)`` by role."""
    configs, options = copies["model config"], approval.options
    layout = (
        ModelLayout(configs[0][0], options, name=configs[0][1]) if configs and options is not None else None
    )
    evidence = read_evidence(copies["log"], copies[NVIDIA_SMI_ROLE], copies["load"])
    return decide(evidence, approval.policy, layout, approval.plan, approval.load_policy)


def created_time(text: object) -> datetime | None:
    """The time of ``created_utc`` as :func:`utc_text` writes it, else None."""
    try:
        created = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return created if utc_text(created) == text else None


def utc_text(created: datetime) -> str:
    """``created_utc``: ISO 8601 UTC to the second with ``Z``."""
    return created.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_record(
    decision: Decision, approval: Approval, created: datetime, inputs: Sequence[Mapping], digest: str
) -> dict:
    """The ``budget.json`` record without ``files`` and the seal, which approve adds last."""
    policy, budget, launch, options = approval.policy, decision.budget, approval.launch, approval.options
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kvplan_version": approval.version,
        "created_utc": utc_text(created),
        "approver": approval.approver,
        "note": approval.note,
        "inputs_digest": digest,
        "decision": {
            "kv_cache_memory_bytes": budget.uniform_budget_bytes,
            "flag": budget.flag,
            "human": format_size(budget.uniform_budget_bytes),
            "limiting_rank": budget.limiting_rank,
            "num_blocks": budget.num_blocks,
            **({LAUNCH_KEY: list(decision.launch_flags)} if launch else {}),
            **({"gpu_memory_utilization": decision.gpu_memory_utilization} if launch else {}),
        },
        "policy": {
            "reserve_bytes": policy.reserve_bytes,
            "guard_bytes": policy.guard_bytes,
            "assume_uniform": policy.assume_uniform,
            "rounding": {
                "block_bytes": budget.block_bytes,
                "rule": "down to whole KV blocks" if budget.block_bytes else "none (no model given)",
            },
        },
        **_budget_keys(decision),
        "model_options": dict(options) if options is not None else None,
        "capacity": [dict(row) for row in decision.capacity] if decision.capacity is not None else None,
        "admission_plan": decision.plan,
        **({"load": decision.load} if decision.load is not None else {}),
        "compatibility_key": {k: json_value(v) for k, v in decision.compatibility_key.items()},
        "checks": [check.to_dict() for check in decision.checks if launch or check.name not in LAUNCH_CHECKS],
        "warnings": list(decision.warnings),
        **({TEXT_ESCAPING_KEY: TEXT_ESCAPING} if approval.escaping else {}),
        "inputs": [dict(entry) for entry in inputs],
        "ledger": [
            {str(k): json_value(v) for k, v in row.items()}
            for row in decision.ledger.to_dict(orient="records")
        ],
        "files": {},
        **({ALLOWED_UNJUDGED_KEY: list(approval.allowed_unjudged)} if approval.allowed_unjudged else {}),
    }


def _budget_keys(decision: Decision) -> dict:
    """The record's ``ranks``, ``summary``, ``stranded`` and ``kv_spec``, in that order."""
    budget = decision.budget
    columns = {"room_bytes": budget.room_bytes, "room_source": decision.room_sources}
    columns |= {"safe_bytes": budget.safe_bytes, "stranded_bytes": budget.stranded_bytes}
    columns["init_free_bytes"] = decision.ref_free_bytes
    limiting = budget.limiting_rank
    ranks = [
        {"rank": rank, **{key: column[i] for key, column in columns.items()}, "limiting": rank == limiting}
        for i, rank in enumerate(budget.ranks)
    ]
    summary = {key: getattr(budget, key) for key in SUMMARY_KEYS}
    stranded = {"total_bytes": budget.stranded_total_bytes, "rounding_loss_bytes": budget.rounding_loss_bytes}
    stranded["per_rank_bytes"] = list(budget.stranded_bytes)
    spec = decision.spec.to_dict() if decision.spec else None
    return {"ranks": ranks, "summary": summary, "stranded": stranded, "kv_spec": spec}


def json_value(value: object) -> object:
    """Plain JSON value: None for missing, int for whole numbers, float, bool or str otherwise."""
    if type(value) in _ALWAYS_KNOWN:  # the common cells, without pd.isna (no change in the answer)
        return value
    if type(value) is float:
        return value if value == value else None
    if not is_known(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def int_or_none(value: object) -> int | None:
    """``int(value)``, None where it is unknown."""
    return int(value) if is_known(value) else None
