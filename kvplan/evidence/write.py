"""Writing a bundle: decide, assemble the folder under ``.<name>.<random>.partial``, fsync, and rename it onto
an empty ``mkdir`` claim of its name (a bundle written meanwhile is never replaced; a failure leaves nothing)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import kvplan.evidence.record as rec
from kvplan import __version__
from kvplan.escape import SURROGATE, terminal_text
from kvplan.evidence.render import artifact_pieces, chart_images
from kvplan.plan import AdmissionPlan, Decision, LoadPolicy, ModelLayout, Policy, renamed, require_files
from kvplan.units import format_size

#: A ``.partial`` folder older than this belongs to an approval that was killed [seconds].
STALE_PARTIAL_S = 3600
PARTIAL_SUFFIX = ".partial"


class CheckFailedError(rec.ApprovalError):
    """A check at approval failed (``kvplan approve`` exit 1): ``checks`` are the failed ones."""

    def __init__(self, message: str, checks: Sequence[object] = ()) -> None:
        super().__init__(message)
        self.checks = tuple(checks)


@dataclass(frozen=True)
class Request:
    """An approval as asked (``kvplan approve``'s arguments)."""

    log_paths: Sequence[str | os.PathLike]
    out_dir: str | os.PathLike
    policy: Policy
    approver: str
    note: str = ""
    layout: ModelLayout | None = None
    plan: AdmissionPlan | None = None
    now: datetime | None = None
    load_paths: Sequence[str | os.PathLike] = ()
    load_policy: LoadPolicy | None = None
    nvidia_smi_paths: Sequence[str | os.PathLike] = ()
    allow_unjudged: Sequence[str] = ()


def approve(*args: Any, **kwargs: Any) -> Path:
    """:func:`approve_bundle` of ``Request(*args, **kwargs)``: the new folder."""
    return approve_bundle(Request(*args, **kwargs))[0]


def approve_bundle(request: Request) -> tuple[Path, dict]:
    """Decide and write the bundle under ``out_dir``: the new folder and its ``budget.json`` record."""
    sources, roles, load_policy = _inputs(request)
    created = (request.now or datetime.now(timezone.utc)).replace(microsecond=0)
    options = dict(request.layout.options) if request.layout else None
    allowed = tuple(dict.fromkeys(request.allow_unjudged))
    approval = rec.Approval(request.policy, request.approver, request.note, __version__, allowed)
    approval = replace(approval, options=options, plan=request.plan, load_policy=load_policy)
    hashes = [rec.sha256_file(path) for path in sources]
    entries = [{"path": str(s), "role": role, "sha256": h} for s, role, h in zip(sources, roles, hashes)]
    digest = rec.stated_digest(approval, entries)
    out = Path(request.out_dir)
    enclosing = enclosing_bundle(out)
    if enclosing is not None:
        raise rec.BundleExistsError(
            f"{out}: inside the evidence bundle {enclosing}: writing there would change "
            "an approved bundle; give --out the folder that holds bundles, e.g. "
            f"{enclosing.parent}"
        )
    final = out / rec.bundle_name(created, digest)
    exists = rec.BundleExistsError(
        f"{final}: a bundle for these inputs already exists (same input files by the "
        "same paths, policy, approver and note on the same day); bundles are never "
        "overwritten (verify it with `kvplan verify`)"
    )
    _clean_stale(out, final.name)
    if final.exists():
        raise exists
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f".{final.name}.{secrets.token_hex(4)}{PARTIAL_SUFFIX}"
    staging.mkdir()  # mode 0o777 less the umask, like every file written into it
    try:
        names = rec.input_names(sources)
        inputs = _copy_inputs(sources, names, hashes, roles, staging)
        decision = _decide_copies(approval, sources, names, roles, staging)
        record = rec.build_record(decision, approval, created, inputs, digest)
        record["files"] = _write_artifacts(staging, decision, record, final.name)
        record[rec.SEAL_KEY] = rec.seal(record)
        _write_synced(staging / rec.BUDGET_JSON, rec.record_chunks(record))
        _sync(staging / rec.INPUTS_DIR)
        _sync(staging)
        _move_into_place(staging, final, exists)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final, record


def _inputs(request: Request) -> tuple[list[Path], list[str], LoadPolicy | None]:
    """Every input of ``request``, checked, with its role, and the load policy (None without load files)."""
    if not isinstance(request.approver, str) or not request.approver.strip():
        raise ValueError("an approval needs the approver's name (--approver)")
    if request.policy.guard_bytes < 0:
        raise ValueError(f"guard must not be negative, got {format_size(request.policy.guard_bytes)}")
    logs, loads = [Path(path) for path in request.log_paths], [Path(path) for path in request.load_paths]
    if not logs:
        raise ValueError("no log files: approve needs the logs of at least one profiled boot")
    if request.load_policy is not None and not loads:
        raise ValueError("a load policy (max preemptions, year) needs load-test files (--load)")
    configs = [Path(request.layout.config)] if request.layout else []
    snapshots = [Path(path) for path in request.nvidia_smi_paths]
    groups = (logs, snapshots, configs, loads)
    for paths, argument in zip(groups, ("LOG", "--nvidia-smi", "--model", "--load")):
        require_files(paths, argument)
        for path in paths:  # a bundle records every input by its name as UTF-8 text
            if SURROGATE.search(str(path)):
                raise ValueError(
                    f"{terminal_text(path)}: the file name is not UTF-8 ({argument}): a bundle records each "
                    "input by name as UTF-8 text; rename the file or link it under a UTF-8 name"
                )
    roles = [role for role, paths in zip(rec.ROLES, groups) for _ in paths]
    load_policy = (request.load_policy or LoadPolicy()) if loads else None
    return [path for paths in groups for path in paths], roles, load_policy


def _decide_copies(
    approval: rec.Approval, sources: Sequence[Path], names: Sequence[str], roles: Sequence[str], staging: Path
) -> Decision:
    """The decision of the bundle's own copies, every check passed; refusals name the user's files."""
    copied = {
        role: [(staging / name, name) for name, r in zip(names, roles) if r == role] for role in rec.ROLES
    }
    try:
        decision = rec.decide_copies(copied, approval)
        _refuse_failed_checks(decision, approval.allowed_unjudged)
    except ValueError as exc:  # name the user's files, not the copies in the unfinished bundle
        users = dict(zip(names, map(str, sources)))
        users.update({str(staging / name): source for name, source in users.items()})
        if isinstance(exc, CheckFailedError):
            raise CheckFailedError(renamed(str(exc), users), exc.checks) from exc
        raise rec.ApprovalError(renamed(str(exc), users)) from exc
    return decision


def enclosing_bundle(path: str | os.PathLike) -> Path | None:
    """The bundle folder that ``path`` (which need not exist yet) is or lies inside, resolved; else None."""
    resolved = Path(path).resolve()
    return next((folder for folder in (resolved, *resolved.parents) if _is_bundle(folder)), None)


def _is_bundle(folder: Path) -> bool:
    """Whether ``folder`` holds a kvplan ``budget.json`` record (not any file of that name)."""
    path = folder / rec.BUDGET_JSON
    try:
        if not path.is_file() or path.stat().st_size > 1 << 26:
            return False
        return json.loads(path.read_text(encoding="utf-8")).get("schema") == rec.SCHEMA
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def _clean_stale(out: Path, name: str) -> None:
    """Remove, with a warning, an empty claim of ``name`` and ``.partial`` folders that killed approvals left."""
    removed, claim = [], out / name
    with contextlib.suppress(OSError):
        if claim.is_dir() and not claim.is_symlink() and not any(claim.iterdir()):
            claim.rmdir()
            removed.append(claim)
    with contextlib.suppress(OSError):
        for folder in out.glob(f".*{PARTIAL_SUFFIX}"):
            if (
                folder.is_dir()
                and not folder.is_symlink()
                and time.time() - folder.stat().st_mtime > STALE_PARTIAL_S
            ):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    for path in removed:
        left = "an empty claim of a bundle name or an unfinished .partial folder"
        warnings.warn(f"{path}: removed what a killed approval left ({left})", stacklevel=2)


def _copy_inputs(
    sources: Sequence[Path], names: Sequence[str], hashes: Sequence[str], roles: Sequence[str], staging: Path
) -> list[dict]:
    (staging / rec.INPUTS_DIR).mkdir()
    entries = []
    for source, name, digest, role in zip(sources, names, hashes, roles):
        try:
            shutil.copyfile(source, staging / name)
        except OSError as exc:
            raise OSError(
                exc.errno, f"{staging / name}: cannot copy {source} into the bundle: {exc.strerror}"
            ) from None
        _sync(staging / name)
        if rec.sha256_file(staging / name) != digest:
            raise ValueError(f"{source}: changed while it was being copied; approve again")
        size = (staging / name).stat().st_size
        entries.append(dict(zip(rec.INPUT_KEYS, (str(source), name, digest, size, role))))
    return entries


def _refuse_failed_checks(decision: Decision, allowed: Sequence[str] = ()) -> None:
    """Refuse an approval with a failed check, or one that cannot be judged and is not ``allowed``."""
    names = [check.name for check in decision.checks]
    unknown = [name for name in allowed if name not in names]
    if unknown:
        raise rec.ApprovalError(
            f"--allow-unjudged {', '.join(map(repr, unknown))}: no check of that name at this approval; "
            f"its checks are: {', '.join(map(repr, names))}"
        )
    failed = [check for check in decision.checks if check.passed is False]
    if failed:
        text = "not approved: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)
        raise CheckFailedError(text, failed)
    unjudged = [c for c in decision.checks if c.applicable and c.passed is None and c.name not in allowed]
    if unjudged:
        raise rec.ApprovalError(
            "not approved: cannot judge "
            + "; ".join(f"{c.name}: {c.detail}" for c in unjudged)
            + ". An approval needs every check passed; to accept one as it is, name it with "
            + " ".join(f"--allow-unjudged {c.name!r}" for c in unjudged)
            + " (the bundle records it)"
        )


def _write_artifacts(staging: Path, decision: Decision, record: dict, name: str) -> dict[str, str]:
    """Write ledger.csv, SUMMARY.md, evidence.log and the charts, fsync'ed; returns their SHA-256 by name."""
    hashes = {
        file_name: _write_synced(staging / file_name, (piece.encode("utf-8") for piece in pieces))
        for file_name, pieces in artifact_pieces(decision, record, name).items()
    }
    images = chart_images(decision)
    (staging / rec.CHARTS_DIR).mkdir()
    hashes.update({file_name: _write_synced(staging / file_name, data) for file_name, data in images.items()})
    _sync(staging / rec.CHARTS_DIR)
    return hashes


def _write_synced(path: Path, data: bytes | Iterable[bytes]) -> str:
    """Write a new file (its bytes, or in pieces) and fsync it: its SHA-256; an error (a full disk) names it."""
    digest = hashlib.sha256()
    try:
        with open(path, "xb") as handle:
            for piece in [data] if isinstance(data, bytes) else data:
                digest.update(piece)
                handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise OSError(exc.errno, f"{path}: cannot write the bundle: {exc.strerror}") from None
    return digest.hexdigest()


def _sync(path: Path) -> None:
    """fsync a file or folder (a folder's entries reach the disk before the rename that publishes it)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _move_into_place(staging: Path, final: Path, exists: rec.BundleExistsError) -> None:
    """Rename ``staging`` onto an atomic ``mkdir`` claim of ``final`` (fails once anything else is there)."""
    try:
        final.mkdir()
    except FileExistsError:
        raise exists from None
    try:
        os.rename(staging, final)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            final.rmdir()  # our claim, if it is still empty
        if isinstance(exc, OSError):
            raise exists from None
        raise
    with contextlib.suppress(OSError):
        _sync(final.parent)
