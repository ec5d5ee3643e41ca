"""Reading a bundle, an untrusted input: ``budget.json`` bounded, parsed and shape-checked; every other file
opened without following symlinks or blocking, bounded, and copied once while hashed (verify judges the copy)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd

import kvplan.evidence.record as rec
from kvplan.checks.gate import Approved
from kvplan.drift import per_rank
from kvplan.plan import AdmissionPlan, LoadPolicy, Policy, profiled_tokens

#: Largest ``budget.json`` read [bytes]; a bigger one is refused before it is read.
MAX_RECORD_BYTES = 64 << 20
#: Largest text file or chart of a bundle read [bytes].
MAX_ARTIFACT_BYTES = 512 << 20
#: Deepest nesting of JSON objects and lists in ``budget.json`` (approve writes 5).
MAX_DEPTH = 32
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
)


class UnsafeFileError(ValueError):
    """A bundle path that is not a regular file inside the bundle, or a file above its size bound."""


def path_problem(name: object) -> str | None:
    """Why ``name`` is not a plain relative path inside a bundle (None when it is one)."""
    if not isinstance(name, str):
        return "not a string"
    if not name or name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return "an absolute path" if name.startswith("/") or name[1:2] == ":" else "not a plain relative path"
    parts = name.split("/")
    if ".." in parts:
        return "'..' leaves the bundle"
    if any(part in ("", ".") for part in parts) or any(ord(c) < 32 for c in name):
        return "an empty or '.' part"
    return None


def _open(folder: Path, name: str) -> int:
    """A read-only descriptor of bundle file ``name``, every part checked not to be a symlink."""
    problem = path_problem(name)
    if problem is not None:
        raise UnsafeFileError(f"{name!r}: {problem}")
    parts = PurePosixPath(name).parts
    here = folder
    for part in parts[:-1]:
        here = here / part
        if not stat.S_ISDIR(os.lstat(here).st_mode):  # lstat: a symlink is no folder
            raise UnsafeFileError(
                f"{name}: {here.relative_to(folder).as_posix()} is not a folder of the bundle "
                "(a symlink or a file)"
            )
    target = here / parts[-1]
    info = os.lstat(target)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFileError(f"{name}: {_kind(info.st_mode)}, not a regular file")
    descriptor = os.open(target, _FLAGS)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # swapped after the lstat
        os.close(descriptor)
        raise UnsafeFileError(f"{name}: not a regular file")
    return descriptor


def _kind(mode: int) -> str:
    kinds = {stat.S_ISLNK: "a symlink", stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO"}
    kinds.update({stat.S_ISSOCK: "a socket", stat.S_ISCHR: "a device", stat.S_ISBLK: "a device"})
    return next((text for test, text in kinds.items() if test(mode)), "not a file")


def read_bounded(folder: Path, name: str, max_bytes: int) -> bytes:
    """The bytes of bundle file ``name``; :class:`UnsafeFileError` when unsafe or over ``max_bytes``."""
    with os.fdopen(_open(folder, name), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise UnsafeFileError(f"{name}: {size:,} bytes, above the bound of {max_bytes:,}")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{name}: above the bound of {max_bytes:,} bytes")
    return data


def copy_hashed(folder: Path, name: str, target: Path, sizes: Mapping[str, object]) -> str:
    """Copy bundle file ``name`` to ``target``: its SHA-256; refused unread at a size ``sizes`` does not record."""
    with os.fdopen(_open(folder, name), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if name in sizes:
            if type(sizes[name]) is not int or size != sizes[name]:
                raise UnsafeFileError(f"{name}: {size} bytes, recorded {sizes[name]!r}")
        elif size > MAX_ARTIFACT_BYTES:
            raise UnsafeFileError(f"{name}: {size:,} bytes, above the bound of {MAX_ARTIFACT_BYTES:,}")
        digest, copied = hashlib.sha256(), 0
        with open(target, "wb") as out:
            while copied <= size and (chunk := handle.read(min(rec.HASH_CHUNK_BYTES, size + 1 - copied))):
                digest.update(chunk)
                out.write(chunk)
                copied += len(chunk)
    if copied != size:
        raise UnsafeFileError(f"{name}: changed while it was read ({copied} bytes, expected {size})")
    return digest.hexdigest()


def read_bundle(bundle: str | os.PathLike) -> dict:
    """The ``budget.json`` record of a bundle; :class:`BundleError` when it cannot be read."""
    return load(Path(bundle))[0]


def load(folder: Path) -> tuple[dict, bytes]:
    """The record of ``folder`` and the bytes it was parsed from; :class:`BundleError` when unreadable."""
    path = folder / rec.BUDGET_JSON
    try:
        data = read_bounded(folder, rec.BUDGET_JSON, MAX_RECORD_BYTES)
    except FileNotFoundError:
        raise rec.BundleError(f"{path}: no such file: not an evidence bundle") from None
    except NotADirectoryError:
        raise rec.BundleError(f"{folder}: not a folder: not an evidence bundle") from None
    except (UnsafeFileError, OSError) as exc:
        raise rec.BundleError(f"{path}: unreadable: {exc}") from None
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise rec.BundleError(
            f"{path}: unreadable: {exc if not isinstance(exc, RecursionError) else 'too deep'}"
        ) from None
    if not isinstance(record, dict) or record.get("schema") != rec.SCHEMA:
        raise rec.BundleError(f"{path}: not a {rec.SCHEMA} record")
    if _depth(record) > MAX_DEPTH:
        raise rec.BundleError(f"{path}: nested deeper than {MAX_DEPTH} levels: not a record approve writes")
    if record.get("schema_version") != rec.SCHEMA_VERSION:
        raise rec.BundleError(
            f"{path}: schema version {record.get('schema_version')!r}; this kvplan reads "
            f"version {rec.SCHEMA_VERSION}"
        )
    required = ("decision", "policy", "ranks", "inputs", "files", "compatibility_key")
    missing = [key for key in required if key not in record]
    if missing:
        raise rec.BundleError(f"{path}: missing {', '.join(missing)}")
    return record, data


def _depth(value: object) -> int:
    """Nesting depth of a JSON value, without recursion (a hostile record cannot exhaust the stack)."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest, todo = 0, [(value, 1)]
    while todo:  # only containers are queued
        item, level = todo.pop()
        deepest = max(deepest, level)
        if level <= MAX_DEPTH:
            children = item.values() if isinstance(item, dict) else item
            todo += [(child, level + 1) for child in children if isinstance(child, (dict, list))]
    return deepest


def bundle_paths(record: Mapping, differences: list[str]) -> dict[str, str]:
    """Recorded SHA-256 by bundle path, files then inputs; unsafe paths become differences, never opened."""
    files = record["files"]
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise rec.BundleError("budget.json: files is not an object of SHA-256 strings by path")
    paths = {}
    for name, digest in [*files.items(), *((e["bundle_path"], e["sha256"]) for e in record["inputs"])]:
        problem = path_problem(name)
        if problem is None and name.split("/")[0] not in (rec.INPUTS_DIR, rec.CHARTS_DIR) and "/" in name:
            problem = "not under inputs/ or charts/"
        if problem is None and name == rec.BUDGET_JSON:
            problem = "budget.json hashes itself"
        if problem is not None:
            differences.append(f"{name!r}: {problem}: not opened")
        else:
            paths[name] = digest
    return paths


def read_files(
    folder: Path, private: Path, record: Mapping, paths: Mapping[str, str], differences: list[str]
) -> tuple[dict[str, Path], dict[str, tuple[Path, str]]]:
    """Copy each file into ``private`` once: the inputs' copies, and the other files' copies and SHA-256."""
    sizes = {e["bundle_path"]: e["size_bytes"] for e in record["inputs"]}
    copies, artifacts = {}, {}
    (private / rec.INPUTS_DIR).mkdir()
    for i, (name, recorded) in enumerate(sorted(paths.items())):
        target = private / name if name in sizes else private / f"{i}.copy"
        try:
            actual = copy_hashed(folder, name, target, sizes)
        except FileNotFoundError:
            differences.append(f"{name}: missing")
            continue
        except (UnsafeFileError, OSError) as exc:
            differences.append(str(exc) if str(exc).startswith(name) else f"{name}: {exc}")
            continue
        if name in sizes:
            copies[name] = target
        else:
            artifacts[name] = (target, actual)
        if actual != recorded:
            differences.append(f"{name}: SHA-256 {actual} differs from the recorded {recorded}")
        elif name.startswith(f"{rec.CHARTS_DIR}/") and not (
            name.endswith(".png") and target.read_bytes()[: len(PNG_SIGNATURE)] == PNG_SIGNATURE
        ):
            differences.append(f"{name}: not a PNG image")
    return copies, artifacts


def added_paths(folder: Path, expected: Mapping[str, str] | Sequence[str]) -> list[str]:
    """Paths under ``folder`` (folders end in ``/``) that are no ``expected`` file or folder holding one, sorted."""
    wanted = {rec.BUDGET_JSON, *expected}
    folders = {parent.as_posix() for name in wanted for parent in Path(name).parents} - {"."}
    added = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        here = Path(root).relative_to(folder)
        for name in dirs + files:
            path = (here / name).as_posix()
            is_dir = stat.S_ISDIR(os.lstat(Path(root) / name).st_mode)
            if is_dir and path not in folders:
                added.append(f"{path}/")
            elif not is_dir and path not in wanted:
                added.append(path)
    return sorted(added)


def stated_settings(folder: Path, record: Mapping) -> tuple[list, rec.Approval]:
    """The inputs and the :class:`Approval` a record states; :class:`BundleError` when malformed."""
    path, allowed = folder / rec.BUDGET_JSON, record.get(rec.ALLOWED_UNJUDGED_KEY, ())
    if rec.ALLOWED_UNJUDGED_KEY in record and not (
        isinstance(allowed, list) and allowed and all(isinstance(name, str) for name in allowed)
    ):
        raise rec.BundleError(f"{path}: {rec.ALLOWED_UNJUDGED_KEY} is not a list of check names")
    try:
        entries = list(record["inputs"])
        raw, stated, load = record["policy"], record.get("admission_plan"), record.get("load")
        policy = Policy(
            _typed(raw["reserve_bytes"]), _typed(raw["guard_bytes"]), _typed(raw["assume_uniform"], bool)
        )
        plan = (
            AdmissionPlan(_typed(stated["target_concurrency"]), _typed(stated["seq_len"])) if stated else None
        )
        roles = [entry.get("role") for entry in entries if isinstance(entry, dict)]
        load_policy = LoadPolicy() if "load" in roles else None
        if load_policy is not None and load is not None:
            load_policy = LoadPolicy(
                _typed(load["max_preemptions"]),
                rec.int_or_none(load["year"]),
                load.get("max_capacity_loss_pct"),
            )
        options = record.get("model_options")
        if options is not None and not isinstance(options, dict):
            raise TypeError("model_options is not an object")
        identity = [str(record[key]) for key in ("approver", "note", "kvplan_version")]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise rec.BundleError(f"{path}: malformed policy, plan, load, approval or inputs: {exc!r}") from None
    launch = isinstance(record.get("decision"), dict) and rec.LAUNCH_KEY in record["decision"]
    approval = rec.Approval(
        policy, *identity, tuple(allowed), launch, rec.TEXT_ESCAPING_KEY in record, plan=plan
    )
    options = options if "model config" in roles else None
    return entries, replace(approval, options=options, load_policy=load_policy)


def _typed(value: object, kind: type = int) -> Any:
    """``value`` when it is of JSON type ``kind`` (int or bool), else :class:`TypeError`."""
    if type(value) is not kind:
        raise TypeError(f"expected {'a whole number' if kind is int else 'true or false'}, got {value!r}")
    return value


def entry_differences(entries: Sequence[object]) -> list[str]:
    """Each ``inputs[]`` entry is of :data:`INPUT_KEYS` (else :class:`BundleError`) and named as approve names it."""
    for i, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or sorted(entry) != sorted(rec.INPUT_KEYS)
            or not all(isinstance(entry[k], str) for k in ("path", "bundle_path", "sha256", "role"))
            or entry["role"] not in rec.ROLES
        ):
            raise rec.BundleError(
                f"budget.json: inputs[{i}] is not an input entry ({', '.join(rec.INPUT_KEYS)}; role "
                f"one of {', '.join(rec.ROLES)})"
            )
    out = []
    for entry, name in zip(entries, rec.input_names([entry["path"] for entry in entries])):
        if entry["bundle_path"] != name:
            out.append(f"inputs: {entry['path']} is copied as {name}, recorded {entry['bundle_path']}")
    return out


def approved_from_record(record: Mapping, defaulted_key_fields: frozenset[str] = frozenset()) -> Approved:
    """The gate's view of a record, with the key fields its logs did not show; :class:`BundleError` if malformed."""
    try:
        plan = record.get("admission_plan") or {}
        max_model_len = rec.int_or_none(record["compatibility_key"].get("max_model_len"))
        at_max_len = [
            int(row["tokens"]) for row in record.get("capacity") or () if row["seq_len"] == max_model_len
        ]
        ledger = pd.DataFrame(record.get("ledger") or [])
        totals = per_rank(ledger, "total_bytes", "max") if "rank" in ledger else {}
        utilization = record["decision"].get("gpu_memory_utilization")
        return Approved(
            budget_bytes=int(record["decision"]["kv_cache_memory_bytes"]),
            ranks=tuple(int(r["rank"]) for r in record["ranks"]),
            safe_bytes=tuple(int(r["safe_bytes"]) for r in record["ranks"]),
            ref_free_bytes=tuple(rec.int_or_none(r.get("init_free_bytes")) for r in record["ranks"]),
            reserve_bytes=int(record["policy"]["reserve_bytes"]),
            guard_bytes=int(record["policy"]["guard_bytes"]),
            block_bytes=rec.int_or_none(record["policy"]["rounding"]["block_bytes"]),
            compatibility_key=dict(record["compatibility_key"]),
            tokens_required=rec.int_or_none(plan.get("tokens_required")),
            logged_tokens=profiled_tokens(ledger),
            capacity_tokens=at_max_len[0] if at_max_len else None,
            defaulted_key_fields=frozenset(defaulted_key_fields),
            gpu_memory_utilization=float(utilization) if utilization is not None else None,
            total_bytes=tuple(totals.get(int(r["rank"])) for r in record["ranks"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise rec.BundleError(f"budget.json lacks or garbles what a gate needs: {exc!r}") from None
