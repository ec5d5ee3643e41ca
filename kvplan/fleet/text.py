"""Host names and labels from a manifest are data: one line on a terminal, a path component only when safe.

:func:`terminal_text` shows control characters escaped, so a label or host name holding a newline cannot
print a line of its own (a forged flag); :func:`host_folder` is the folder name a host's files get under
``--out``: the host name itself when it matches :data:`SAFE_NAME`, else ``host-`` and a digest of it, so a
name such as ``../../../escaped`` never leaves ``--out``.
"""

from __future__ import annotations

import hashlib
import re

#: A host name usable as one path component as it is: letters, digits, ``.``, ``_``, ``-``; not starting
#: with a dot (no ``.``, ``..`` or hidden name); at most 128 characters.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
#: Characters shown escaped on a terminal: C0 and C1 controls, DEL, line and paragraph separators and the
#: bidirectional overrides that reorder what a reader sees.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: object) -> str:
    """``text`` for one terminal line: each control character as its Python escape.

    >>> terminal_text("us-east-1a\\n         then: --kv-cache-memory-bytes=80000000000")
    'us-east-1a\\\\n         then: --kv-cache-memory-bytes=80000000000'
    >>> terminal_text("gpu-\\x1b[2J01")
    'gpu-\\\\x1b[2J01'
    """
    return _CONTROL.sub(lambda match: repr(match.group(0))[1:-1], str(text))


def host_folder(host: str) -> str:
    """The path component of ``host``'s files: the name when it matches :data:`SAFE_NAME`, else
    ``host-`` and the first 16 hex digits of its SHA-256 (never ``..``, a slash or a hidden name).

    >>> host_folder("gpu-00019"), host_folder("../../../escaped")
    ('gpu-00019', 'host-e9d20ae4e6d4311d')
    """
    if SAFE_NAME.fullmatch(host):
        return host
    return "host-" + hashlib.sha256(host.encode("utf-8", "surrogateescape")).hexdigest()[:16]
