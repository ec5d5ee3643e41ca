"""What kvplan knows of vLLM releases: version strings, and which releases print which rank's room.

>>> version_tuple("v0.11.0"), local_rank0_only((0, 14, 0))
((0, 11, 0), True)
"""

from __future__ import annotations

import re


def version_tuple(version: object) -> tuple[int, ...] | None:
    """``(major, minor, patch)`` of a vLLM version string, None when unknown.

    >>> version_tuple("0.6.6.post1"), version_tuple("0.11.1rc2"), version_tuple(None)
    ((0, 6, 6), (0, 11, 1), None)
    """
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(version)) if isinstance(version, str) else None
    if match is None:
        return None
    return tuple(int(part or 0) for part in match.groups())


def local_rank0_only(version: tuple[int, ...] | None) -> bool:
    """True when a release (None: unknown) may print 'Available KV cache memory' on local rank 0 alone
    and the --kv-cache-memory suggestion at DEBUG only: 0.11.1 up to 0.26.

    >>> local_rank0_only((0, 11, 0)), local_rank0_only((0, 14, 0)), local_rank0_only((0, 26, 0))
    (False, True, False)
    """
    return version is None or (0, 11, 1) <= version < (0, 26)


#: Why lines of other ranks may be missing from a complete log: Ray's log deduplication.
RAY_DEDUP_HINT = (
    "; under Ray, a '[repeated Nx across cluster]' line means Ray deduplicated the other ranks' lines: "
    "rerun with RAY_DEDUP_LOGS=0 for per-rank numbers"
)


def rank0_only_advice(version: tuple[int, ...] | None, ray_hint: bool = True) -> str:
    """Why a log shows the room of local rank 0 only, and how to get every rank's, for a release.

    ``ray_hint`` names Ray's log deduplication as a cause too (False: the caller knows it is not).

    >>> rank0_only_advice((0, 26, 0)).startswith("vLLM 0.26.0 prints the --kv-cache-memory suggestion")
    True
    >>> "RAY_DEDUP_LOGS=0" in rank0_only_advice((0, 7, 2)), "Ray" in rank0_only_advice((0, 7, 2), False)
    (True, False)
    """
    ray = RAY_DEDUP_HINT if ray_hint else ""
    shown = ".".join(map(str, version)) if version else None
    if local_rank0_only(version):
        release = f"vLLM {shown}" if shown else "vLLM 0.11.1–0.25 (the log does not say which)"
        return (
            f"{release} prints 'Available KV cache memory' on local rank 0 alone; for per-rank numbers "
            "rerun with VLLM_LOGGING_LEVEL=DEBUG or vLLM ≥ 0.26 (suggestion line on every rank), or accept "
            "rank 0 for all ranks explicitly with --assume-uniform"
        )
    if version >= (0, 26):
        return (
            f"vLLM {shown} prints the --kv-cache-memory suggestion on every rank at INFO, so the other "
            "ranks' lines are missing: the log was cut off or filtered; give the whole log of every rank"
            f"{ray}"
        )
    return (
        f"vLLM {shown} prints 'Available KV cache memory' on every rank, so the other ranks' lines are "
        f"missing: the log was cut off or filtered; give the whole log of every rank{ray}"
    )
