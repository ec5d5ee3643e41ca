"""Fleet input: the hosts, each one's files and labels, from a folder of host folders (``FLEET/<host>/*.log``,
``nvidia-smi*.csv``, ``dcgm*.prom``) or a manifest CSV ``host,path,label...``, local or through fsspec."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

#: Manifest columns that are not labels.
MANIFEST_FIELDS = ("host", "path")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".csv")


class FleetInputError(ValueError):
    """A fleet that cannot be listed (unreachable storage, refused credential, bad manifest); names it."""


@dataclass(frozen=True)
class HostFiles:
    """One host's log and snapshot URLs, labels, and one text per missing file (which excludes the host)."""

    host: str
    logs: tuple[str, ...]
    snapshots: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()


def parse_storage_options(pairs: Sequence[str]) -> dict[str, object]:
    """``key=value`` texts as fsspec storage options; ``endpoint_url`` goes into ``client_kwargs``."""
    options: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise FleetInputError(f"--storage-option {pair!r}: expected KEY=VALUE")
        if name.strip() == "endpoint_url":
            options.setdefault("client_kwargs", {})["endpoint_url"] = value  # type: ignore[index]
        else:
            options[name.strip()] = {"true": True, "false": False}.get(value.lower(), value)
    return options


def filesystem(url: str, storage_options: Mapping[str, object] | None = None):
    """The fsspec filesystem of ``url`` and the path in it; ``AWS_ENDPOINT_URL`` is the default S3 endpoint."""
    import fsspec

    options = dict(storage_options or {})
    if url.startswith(("s3://", "s3a://")) and os.environ.get("AWS_ENDPOINT_URL"):
        options.setdefault("client_kwargs", {}).setdefault("endpoint_url", os.environ["AWS_ENDPOINT_URL"])
    return fsspec.core.url_to_fs(url, **options)


def _is_local(fs) -> bool:
    return (fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]) in ("file", "local")


def _url(fs, path: str) -> str:
    """A full URL for ``path`` on ``fs``: local paths stay plain, an http path is its URL already."""
    return path if _is_local(fs) else fs.unstrip_protocol(path)


def is_snapshot(name: str) -> bool:
    """Whether a file is a GPU snapshot (``nvidia-smi*.csv``, ``dcgm*.prom``) rather than a log."""
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    return (base.startswith("nvidia-smi") and base.endswith(".csv")) or (
        base.startswith("dcgm") and base.endswith(".prom")
    )


def with_dcgm_snapshots(
    hosts: Sequence[HostFiles], scrapes: Mapping[str, str], folder: str
) -> list[HostFiles]:
    """``hosts``, each with its DCGM scrape (text by ``Hostname``) as one more snapshot, ``folder/<host>/dcgm.prom``."""
    from kvplan.escape import safe_component

    found = []
    for files in hosts:
        if files.host in scrapes:
            path = Path(folder) / safe_component(files.host) / "dcgm.prom"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(scrapes[files.host], encoding="utf-8")
            files = dataclasses.replace(files, snapshots=(*files.snapshots, str(path)))
        found.append(files)
    return found


def list_fleet(url: str, storage_options: Mapping[str, object] | None = None) -> list[HostFiles]:
    """Every host of the fleet at ``url`` (a folder of host folders, or a manifest ``.csv``), by host name."""
    try:
        fs, path = filesystem(url, storage_options)
        fs.invalidate_cache()  # fsspec keeps one instance per options: list what is there now
        if not fs.exists(path):
            raise FileNotFoundError(path)
        if path.lower().endswith(".csv") and not fs.isdir(path):
            return _from_manifest(fs, path)
        return _from_folders(fs, path)
    except FleetInputError:
        raise
    except (FileNotFoundError, NotADirectoryError):
        raise FleetInputError(f"{url}: no such fleet folder or manifest") from None
    except Exception as exc:  # botocore/aiohttp errors are not OSError: name the URL, say what failed
        detail = (str(exc).strip().splitlines() or ["no detail"])[0]
        raise FleetInputError(f"{url}: cannot list the fleet ({type(exc).__name__}: {detail})") from None


def _from_folders(fs, path: str) -> list[HostFiles]:
    """Hosts of a folder of host folders; symbolic links followed (a dangling one is a missing file of its host)."""
    if not fs.isdir(path):
        raise FleetInputError(f"{_url(fs, path)}: not a folder of host folders or a manifest .csv")
    hosts = []
    for folder in [name for name, kind in _entries(fs, path) if kind == "directory"]:
        entries = _entries(fs, folder)
        files = [name for name, kind in entries if kind == "file"]
        dangling = tuple(f"{_url(fs, n)}: a dangling symbolic link" for n, k in entries if k == "dangling")
        name = folder.rstrip("/").rsplit("/", 1)[-1]
        logs = [_url(fs, f) for f in files if not is_snapshot(f) and f.lower().endswith(LOG_SUFFIXES)]
        snapshots = [_url(fs, f) for f in files if is_snapshot(f)]
        hosts.append(HostFiles(name, tuple(logs), tuple(snapshots), missing=dangling))
    if not hosts:
        raise FleetInputError(f"{_url(fs, path)}: no host folders (expected FLEET/<host>/*.log)")
    return hosts


def _entries(fs, path: str) -> list[tuple[str, str]]:
    """``(name, type)`` of each entry of the folder ``path``, by name; on local disk from ``os.scandir``."""
    if not _is_local(fs):
        return sorted((item["name"], item["type"]) for item in fs.ls(path, detail=True))
    with os.scandir(path) as found:
        return sorted((entry.path, _kind(entry)) for entry in found)


def _kind(entry: os.DirEntry) -> str:
    if entry.is_dir():
        return "directory"
    if entry.is_file():
        return "file"
    return "dangling" if entry.is_symlink() and not os.path.exists(entry.path) else "other"


def _from_manifest(fs, path: str) -> list[HostFiles]:
    """Hosts of a manifest, one row per file (relative to its folder); a file under two hosts is refused."""
    with fs.open(path, "rb") as stream:
        rows = list(csv.reader(io.StringIO(stream.read().decode("utf-8-sig"))))
    where = _url(fs, path)
    if not rows or [name.strip() for name in rows[0][:2]] != list(MANIFEST_FIELDS):
        raise FleetInputError(f"{where}:1: expected the header host,path[,label...]")
    header = [name.strip() for name in rows[0]]
    base = path.rsplit("/", 1)[0] if "/" in path else ""
    by_host: dict[str, dict] = {}
    owner: dict[str, tuple[str, int]] = {}
    for number, row in enumerate(rows[1:], start=2):
        at = f"{where}:{number}"
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise FleetInputError(f"{at}: expected {len(header)} fields ({','.join(header)}), got {len(row)}")
        values = dict(zip(header, (cell.strip() for cell in row)))
        host, file = values["host"], values["path"]
        if not host or not file:
            raise FleetInputError(f"{at}: empty host or path")
        entry = by_host.setdefault(host, {"logs": [], "snapshots": [], "missing": [], "labels": {}})
        labels = {name: value for name, value in values.items() if name not in MANIFEST_FIELDS}
        if entry["labels"] and entry["labels"] != labels:
            raise FleetInputError(f"{at}: host {host!r} has other labels than on its earlier rows")
        entry["labels"] = labels
        file_fs, file_path = _entry(fs, base, file, at)
        url = _url(file_fs, file_path)
        first_host, first_line = owner.setdefault(url, (host, number))
        if first_host != host:
            why = f"and, on line {first_line}, under host {first_host!r}: a file is the evidence of one host"
            raise FleetInputError(f"{at}: {file!r} is listed under host {host!r} {why}")
        if not file_fs.exists(file_path):
            entry["missing"].append(f"manifest line {number}: {file}: no such file")
            continue
        entry["snapshots" if is_snapshot(file_path) else "logs"].append(url)
    if not by_host:
        raise FleetInputError(f"{where}: no host rows after the header (expected host,path[,label...] rows)")
    return [
        HostFiles(host, tuple(e["logs"]), tuple(e["snapshots"]), e["labels"], tuple(e["missing"]))
        for host, e in sorted(by_host.items())
    ]


def _entry(fs, base: str, file: str, where: str):
    """``(filesystem, path)`` of a manifest row's file; a remote manifest's stays under its scheme and bucket."""
    if _is_local(fs) and "://" in file:
        return filesystem(file, getattr(fs, "storage_options", None))
    if _is_local(fs):
        return fs, file if file.startswith("/") else f"{base}/{file}" if base else file
    scheme, rest = _url(fs, base).split("://", 1)
    root = f"{scheme}://{rest.split('/', 1)[0]}/"
    full = file if "://" in file else _url(fs, f"{base.rstrip('/')}/{file}")
    if ".." in [unquote(part) for part in full.split("://", 1)[-1].split("/")] or not full.startswith(root):
        why = f"a manifest at {root} names only objects under {root} (no other scheme or bucket, no '..')"
        raise FleetInputError(f"{where}: {file!r}: {why}")
    return fs, type(fs)._strip_protocol(full)
