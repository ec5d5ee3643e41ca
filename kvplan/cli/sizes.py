"""Argument types: sizes in bytes and counts, parsed at the command line's edge.

Sizes are parsed by :func:`kvplan.units.parse_size` into ``int`` bytes; a value argparse cannot take
is an ``error: kvplan CMD: argument …`` line with exit 2.

>>> size_list("13GiB,14GiB") == [13 * 2**30, 14 * 2**30]
True
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from kvplan.capacity import VLLM_BLOCK_SIZES
from kvplan.units import parse_size, parse_size_list

T = TypeVar("T", int, float)


def size(text: str) -> int:
    """A size such as ``0.9GiB`` in bytes."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_list(text: str) -> list[int]:
    """Comma-separated sizes ≥ 0, one per rank in rank order [bytes]."""
    try:
        sizes = parse_size_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    negative = [position for position, size in enumerate(sizes) if size < 0]
    if negative:
        raise argparse.ArgumentTypeError(f"entry {negative[0]} of {text!r} is negative: memory sizes are ≥ 0")
    return sizes


def positive_size(text: str) -> int:
    """A size > 0 [bytes]."""
    value = size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number > 0."""
    return _whole_number_from_one(text, "must be positive")


def at_least_one(text: str) -> int:
    """A whole number ≥ 1 (hosts, sequences, tokens)."""
    return _whole_number_from_one(text, "must be ≥ 1")


def fraction(text: str) -> float:
    """A number in (0, 1], such as a share of hosts.

    >>> fraction("0.25")
    0.25
    """
    value = _number(text, float, "a number")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def labels(text: str) -> tuple[str, ...]:
    """Comma-separated names (hosts, labels), blanks dropped.

    >>> labels("gpu-1, gpu-2,")
    ('gpu-1', 'gpu-2')
    """
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated label names, got {text!r}")
    return names


def _whole_number_from_one(text: str, refusal: str) -> int:
    value = _number(text, int, "a whole number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{refusal}, got {value}")
    return value


def _number(text: str, convert: Callable[[str], T], what: str) -> T:
    """``convert(text)``, or argparse's refusal ``not {what}: 'text'``."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def block_size(text: str) -> int:
    """A ``--block-size`` vLLM accepts [tokens]."""
    value = positive_int(text)
    if value not in VLLM_BLOCK_SIZES:
        raise argparse.ArgumentTypeError(f"{value} is not a block size vLLM accepts {VLLM_BLOCK_SIZES}")
    return value
