"""Byte sizes at the edges: inside kvplan every size is an ``int`` of bytes; text becomes bytes only here
(:func:`parse_size`) and bytes text only here (:func:`format_size`, :func:`bytes_to_gib`)."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10

_BINARY = {"kib": KiB, "mib": MiB, "gib": GiB, "tib": 1 << 40}
_SI = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# vLLM's `human_readable_int`: upper case is binary, lower case decimal, integers only with binary.
_VLLM_BINARY = {"K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}
#: The binary units text shows, largest first.
_UNITS = (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB))
_VLLM_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
#: Units whose case decides: bytes, then vLLM's single letters.
_FACTORS = {"": 1, "B": 1, "b": 1, **_VLLM_BINARY, **_VLLM_DECIMAL}

#: Far above any accelerator's memory (the largest today hold well under 1 TiB): beyond is absurd.
MAX_DEVICE_BYTES = 1 << 44
#: The largest size kvplan takes: the ledger holds bytes as 64-bit integers (8 EiB − 1 B).
MAX_SIZE_BYTES = 2**63 - 1
#: Half of the 0.01 GiB step of a 2-decimal GiB figure: how far such a figure can be from the truth.
GIB_2DP_HALF_STEP_BYTES = GiB // 200

_SIZE_RE = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str | int) -> int:
    """Bytes in a size written as ``12GiB``, ``0.9 GiB``, ``512MiB``, ``12GB`` or ``12G`` (a single letter: vLLM's
    ``--kv-cache-memory-bytes`` rule, ``12G`` = 12·2^30, ``12g`` = 12·10^9); beyond :data:`MAX_SIZE_BYTES` refused.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        return _within_range(text, text)
    match = _SIZE_RE.fullmatch(str(text))
    if match is None:
        raise ValueError(f"not a size: {text!r} (expected e.g. 12GiB, 512MiB, 12GB, 12G or bytes)")
    number, unit = match.groups()
    value = Decimal(number)  # the regex admits only numbers
    if unit in _VLLM_BINARY and "." in number:
        raise ValueError(
            f"not a size: {text!r}: decimals are not allowed with binary suffixes like {unit} "
            f"(vLLM refuses them); write {number}{unit}iB or {number}{unit.lower()}"
        )
    factor = _FACTORS.get(unit) or _BINARY.get(unit.lower()) or _SI.get(unit.lower())
    if factor is None:
        raise ValueError(f"not a size: {text!r}: unknown unit {unit!r} (use B, KiB, MiB, GiB, GB, G)")
    if factor == 1 and value != value.to_integral_value():
        raise ValueError(f"not a size: {text!r}: a byte count must be a whole number")
    return _within_range(int((value * factor).to_integral_value(rounding=ROUND_HALF_EVEN)), text)


def _within_range(num_bytes: int, text: object) -> int:
    if abs(num_bytes) > MAX_SIZE_BYTES:
        raise ValueError(f"not a size: {text!r}: beyond 8 EiB, the largest size kvplan holds")
    return num_bytes


def format_size(num_bytes: int, decimals: int = 2) -> str:
    """Human text for a byte count (``17.9 GiB``), in the largest binary unit that keeps it ≥ 1, zeros dropped."""
    magnitude = abs(num_bytes)
    for unit, factor in _UNITS:
        if magnitude >= factor:
            text = f"{num_bytes / factor:.{decimals}f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{num_bytes} B"


def format_budget(num_bytes: int, decimals: int = 2) -> str:
    """A budget as text never above its bytes (:func:`format_size` floored): typed back, it never eats the reserve.

    >>> format_budget(10_735_351_296), format_size(10_735_351_296)  # 9.998 GiB
    ('9.99 GiB', '10 GiB')
    """
    magnitude = abs(num_bytes)
    for unit, factor in _UNITS:
        if magnitude >= factor:
            hundredths = num_bytes * 10**decimals // factor  # floor, in integers: exact at any size
            sign = "-" if hundredths < 0 else ""
            whole, part = divmod(abs(hundredths), 10**decimals)
            text = f"{whole}.{part:0{decimals}d}".rstrip("0").rstrip(".") if decimals else str(whole)
            return f"{sign}{text} {unit}"
    return f"{num_bytes} B"


def format_policy_size(num_bytes: int) -> str:
    """A policy size (reserve, guard) as the user would have typed it (``0.9 GiB``, not ``921.6 MiB``), when a short
    text reads back exactly.
    """
    units = _UNITS[::-1]
    natural = max((i for i, (_, factor) in enumerate(units) if abs(num_bytes) >= factor), default=None)
    if natural is None:
        return format_size(num_bytes)
    tries = [
        (units[natural], 0),
        *((units[i], d) for i in (natural + 1, natural) if i < len(units) for d in (1, 2)),
    ]
    for (unit, factor), decimals in tries:
        text = f"{num_bytes / factor:.{decimals}f}"
        if parse_size(f"{text}{unit}") == num_bytes:
            return f"{text} {unit}"
    return format_size(num_bytes)


def bytes_to_gib(num_bytes: int) -> float:
    """GiB (2^30 bytes) as a float, for axes and tables only."""
    return num_bytes / GiB


def parse_size_list(text: str) -> list[int]:
    """Bytes for a comma-separated list of sizes (``18.8GiB, 12GiB``), one per rank in rank order."""
    items = [item.strip() for item in str(text).split(",")]
    if not text or not any(items):
        raise ValueError("empty size list: give one size per rank, comma-separated")
    sizes = []
    for position, item in enumerate(items):
        if not item:
            raise ValueError(f"empty entry at position {position} in size list {text!r}")
        try:
            sizes.append(parse_size(item))
        except ValueError as exc:
            raise ValueError(f"entry {position} of {text!r}: {exc}") from None
    return sizes
