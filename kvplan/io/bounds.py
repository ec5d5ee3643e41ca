"""Physical bounds of what a vLLM log can show: values outside them are refused with file and line.

vLLM reads free and total memory from ``cudaMemGetInfo`` and prints them rounded: free memory is never
below zero nor above the GPU's total, and neither are the weights, the requested memory or a room. A
parallel size is a positive count of GPUs. A log that shows otherwise was edited, corrupted or
mis-assembled; taking its numbers could give a budget above what any rank has, so it is refused
(issue 11: a 900 GB room on an 80 GB card, a negative free memory, ``tensor_parallel_size=0`` or
``99999999999``, which would also cost memory to enumerate ranks).
"""

from __future__ import annotations

from kvplan.units import format_size

#: Far above any accelerator's memory (the largest today hold well under 1 TiB): beyond is absurd.
MAX_DEVICE_BYTES = 1 << 44
#: The largest parallel degree accepted: 65,536 GPUs in one launch.
MAX_PARALLEL_SIZE = 1 << 16
#: Columns that cannot be below zero in any release (cudaMemGetInfo, a weight size, total × util).
NEVER_NEGATIVE = (
    "total_bytes",
    "init_free_bytes",
    "profiled_free_bytes",
    "requested_bytes",
    "weights_bytes",
    "manual_kv_bytes",
    "external_weights_bytes",
)
#: Columns that cannot exceed the GPU's total memory.
AT_MOST_TOTAL = (
    "init_free_bytes",
    "profiled_free_bytes",
    "requested_bytes",
    "weights_bytes",
    "room_bytes",
    "suggested_full_bytes",
    "suggested_fit_bytes",
    "available_kv_bytes",
    "kv_in_use_bytes",
)


class ImpossibleValue(ValueError):
    """A value no vLLM release can print; the message names the file and line."""


def possible_parallel_size(value: object) -> bool:
    """Whether ``value`` can be a parallel size (a count from 1 to :data:`MAX_PARALLEL_SIZE`; a value
    that is not a whole number is not judged here).

    >>> possible_parallel_size(8), possible_parallel_size(0), possible_parallel_size("8")
    (True, False, True)
    """
    return not isinstance(value, int) or 1 <= value <= MAX_PARALLEL_SIZE


def check_parallel_size(column: str, value: object, source: str, line: object) -> None:
    """Refuse a parallel size that is not a count of GPUs from 1 to :data:`MAX_PARALLEL_SIZE`.

    >>> check_parallel_size("tensor_parallel_size", 4, "a.log", 1)
    >>> try:
    ...     check_parallel_size("tensor_parallel_size", 0, "a.log", 1)
    ... except ImpossibleValue as refused:
    ...     print(str(refused)[:50])
    a.log:1: tensor_parallel_size=0 is impossible: a p
    """
    if not possible_parallel_size(value):
        raise ImpossibleValue(
            f"{source}:{line}: {column}={value} is impossible: a parallel size is a count of GPUs from 1 to "
            f"{MAX_PARALLEL_SIZE}"
        )


def check_row(values: dict, rank: int, origin: dict, source: str) -> None:
    """Refuse a rank's row whose memory values no GPU can show (``origin[(rank, column)]`` = (line, raw)).

    >>> check_row({"total_bytes": 80 << 30, "init_free_bytes": 79 << 30}, 0, {}, "a.log")
    >>> try:
    ...     row = {"total_bytes": 80 << 30, "room_bytes": 900 << 30}
    ...     check_row(row, 1, {(1, "room_bytes"): (3, "")}, "a")
    ... except ImpossibleValue as refused:
    ...     print(refused)
    a:3: rank 1: room_bytes 900 GiB is impossible: above the GPU's total memory 80 GiB
    """

    def where(column: str) -> str:
        line = origin.get((rank, column), (None, None))[0]
        return f"{source}:{line}" if isinstance(line, int) else source

    # the few whole numbers below zero or beyond any GPU first (one pass, no call per value)
    doubtful = [
        column
        for column, value in values.items()
        if type(value) is int and not 0 <= value <= MAX_DEVICE_BYTES
    ]
    for column in doubtful:
        value = values[column]
        if not column.endswith("_bytes"):
            continue
        if abs(value) > MAX_DEVICE_BYTES:
            raise ImpossibleValue(
                f"{where(column)}: rank {rank}: {column} {format_size(value)} is impossible: beyond "
                f"{format_size(MAX_DEVICE_BYTES)}, far above any GPU's memory"
            )
        if value < 0 and column in NEVER_NEGATIVE:
            raise ImpossibleValue(
                f"{where(column)}: rank {rank}: {column} {format_size(value)} is impossible: vLLM cannot "
                "print it below zero"
            )
    total = values.get("total_bytes")
    if not isinstance(total, int) or total <= 0:
        return
    for column in AT_MOST_TOTAL:
        value = values.get(column)
        if isinstance(value, int) and value > total:
            raise ImpossibleValue(
                f"{where(column)}: rank {rank}: {column} {format_size(value)} is impossible: above the GPU's "
                f"total memory {format_size(total)}"
            )
