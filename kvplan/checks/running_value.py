"""The running value: every engine's ``vllm:cache_config_info`` against the approved KV value.

A canary that serves is judged by what its engines report, not only by its launch flags:
:func:`check_running_values` passes an engine whose ``kv_cache_memory_bytes`` equals the approved bytes and
whose ``num_gpu_blocks`` is at least the approved blocks (the approved bytes ÷ the bytes of one block, on
each GPU). An engine without ``--kv-cache-memory-bytes`` (the label says None) or with another value fails;
one whose release shows no such label (or a log line, which shows blocks only) is judged on its blocks and
cannot be judged on its bytes. The log line never shows the bytes (the launch checks judge them): it is
judged on its blocks alone, and is N/A where the approved blocks are unknown.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvplan.io.prometheus.vllm import ABSENT, RunningValue
from kvplan.verdict import Check

RUNNING_CHECK = "running value"


def approved_blocks(approved_bytes: int, block_bytes: int | None) -> int | None:
    """Whole KV blocks the approved value holds per GPU; ``None`` when the block size is unknown.

    >>> approved_blocks(12_884_377_600, 1_310_720)  # Llama-3.1-70B, TP 4: 16 tokens × 80 layers × K,V × 2 heads × 128 × 2 B
    9830
    >>> approved_blocks(12_884_377_600, None) is None  # a bundle without the model's layout
    True
    """
    return None if not block_bytes else approved_bytes // block_bytes


def _verdict(value: RunningValue, approved_bytes: int, blocks: int | None) -> tuple[bool | None, str]:
    """Whether one engine runs the approved value, and the evidence."""
    got = value.kv_cache_memory_bytes
    if got == ABSENT:
        bytes_ok, said = None, "shows no kv_cache_memory_bytes"
    elif got is None:
        bytes_ok, said = False, "runs without --kv-cache-memory-bytes (kv_cache_memory_bytes=None)"
    else:
        bytes_ok = got == approved_bytes
        said = f"kv_cache_memory_bytes={got} {'=' if bytes_ok else '≠'} the approved {approved_bytes}"
    if value.num_gpu_blocks is None or blocks is None:
        blocks_ok = None
        said += (
            f"; num_gpu_blocks={value.num_gpu_blocks or 'not shown'} (approved blocks {blocks or 'unknown'})"
        )
    else:
        blocks_ok = value.num_gpu_blocks >= blocks
        said += f"; num_gpu_blocks={value.num_gpu_blocks} {'≥' if blocks_ok else '<'} the approved {blocks}"
    if bytes_ok is False or blocks_ok is False:
        return False, said
    return (True if bytes_ok and blocks_ok else None), said


def check_running_values(
    values: Sequence[RunningValue], approved_bytes: int, block_bytes: int | None
) -> list[Check]:
    """One check per engine that reported a running value; none when nothing reported one.

    >>> v = RunningValue("canary.prom:12", "0", 16_106_127_360, 12_288)
    >>> check = check_running_values([v], 12_884_377_600, 1_310_720)[0]
    >>> check.passed, check.detail.split(";")[0]
    (False, 'canary.prom:12 engine 0: kv_cache_memory_bytes=16106127360 ≠ the approved 12884377600')
    >>> check.detail.split("; ")[1]  # 12,288 blocks ≥ 12,884,377,600 // 1,310,720 = 9,830
    'num_gpu_blocks=12288 ≥ the approved 9830'
    """
    blocks = approved_blocks(approved_bytes, block_bytes)
    checks = []
    for value in values:
        where = f"{value.where} engine {value.engine}"
        if value.shows_bytes:
            passed, said = _verdict(value, approved_bytes, blocks)
            checks.append(Check(RUNNING_CHECK, passed, f"{where}: {said}"))
        elif blocks is None:
            checks.append(Check(RUNNING_CHECK, None, f"{where}: the approved blocks are unknown", False))
        else:
            ok = (value.num_gpu_blocks or 0) >= blocks
            said = f"num_gpu_blocks={value.num_gpu_blocks} {'≥' if ok else '<'} the approved {blocks}"
            checks.append(Check(RUNNING_CHECK, ok, f"{where}: {said}"))
    return checks
