"""Reading a bundle's files safely: paths that stay inside it, regular files only, bounded sizes, read once.

A bundle is untrusted input. Every path it names must be a plain relative path (:func:`path_problem`);
a file is opened without following symlinks and without blocking (a FIFO or device is refused, never
waited on), checked to be a regular file by ``fstat`` on the open handle, and read at most to a bound.
Inputs are hashed while they are copied into a private folder (:func:`copy_hashed`), so what is
judged is exactly the bytes that were hashed.

>>> path_problem("inputs/boot.log") is None
True
>>> path_problem("../etc/passwd")
"'..' leaves the bundle"
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path, PurePosixPath

#: Read unit for hashing and copying [bytes].
_CHUNK_BYTES = 1 << 20
_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
)


class UnsafeFileError(ValueError):
    """A bundle path that is not a regular file inside the bundle, or a file above its size bound."""


def path_problem(name: object) -> str | None:
    """Why ``name`` is not a plain relative path inside a bundle (None when it is one).

    >>> path_problem("/etc/passwd"), path_problem("charts//x.png"), path_problem(3)
    ('an absolute path', "an empty or '.' part", 'not a string')
    """
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
        info = os.lstat(here)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
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
    kinds = {
        stat.S_ISLNK: "a symlink",
        stat.S_ISDIR: "a folder",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a device",
        stat.S_ISBLK: "a device",
    }
    return next((text for test, text in kinds.items() if test(mode)), "not a file")


def read_bounded(folder: Path, name: str, max_bytes: int) -> bytes:
    """The bytes of bundle file ``name``; :class:`UnsafeFileError` when unsafe or over ``max_bytes``.

    The size is checked on the open handle before anything is read, and the read stops at the bound.
    """
    descriptor = _open(folder, name)
    with os.fdopen(descriptor, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise UnsafeFileError(f"{name}: {size:,} bytes, above the bound of {max_bytes:,}")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(f"{name}: above the bound of {max_bytes:,} bytes")
    return data


def copy_hashed(folder: Path, name: str, target: Path, expected_size: object) -> tuple[str, int]:
    """Copy bundle file ``name`` to ``target`` while hashing it: its SHA-256 and size.

    A file whose size is not ``expected_size`` is refused before it is read (1 GB of padding is never
    read); the copy stops where the recorded size ends.
    """
    descriptor = _open(folder, name)
    with os.fdopen(descriptor, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if not isinstance(expected_size, int) or isinstance(expected_size, bool) or size != expected_size:
            raise UnsafeFileError(f"{name}: {size} bytes, recorded {expected_size!r}")
        digest, copied = hashlib.sha256(), 0
        with open(target, "wb") as out:
            while copied <= size:
                chunk = handle.read(min(_CHUNK_BYTES, size + 1 - copied))
                if not chunk:
                    break
                digest.update(chunk)
                out.write(chunk)
                copied += len(chunk)
    if copied != size:
        raise UnsafeFileError(f"{name}: changed while it was read ({copied} bytes, expected {size})")
    return digest.hexdigest(), size
