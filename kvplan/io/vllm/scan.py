"""The streaming scan: read a log in blocks and keep only the lines holding one of the anchors.

A fast pre-filter picks the few lines worth reading, so a gigabyte of serving traffic costs little
time and memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

CHUNK_BYTES = 1 << 21
#: A "line" longer than this (no newline at all) is read in pieces rather than held whole.
MAX_LINE_BYTES = 1 << 24
#: Byte strings of which every line the reader uses contains at least one (the fast pre-filter).
ANCHORS: tuple[bytes, ...] = (
    b"emory",  # every memory line: profiling, available KV, free memory, graphs, OOM, suggestion
    b" took ",  # weights loaded, graphs captured, engine initialised
    b"KV cache size",
    b"Maximum concurrency",
    b" blocks: ",
    b" version ",
    b"with config",
    b"args: ",
    b"world",
    b"Error",
    b"block size",
    b"startup complete",
    b"Graph capturing",  # 0.5–0.6.3 "Graph capturing finished in N secs." has no other anchor
    b"fatal error",
    # failed boots (failure_lines.py): generic start failures, V0 worker exceptions, transfer errors,
    # traceback frames
    b"failed to start",  # lines of EngineCore / WorkerProc: their pairs "eC", "rP"
    b"hit an exception",
    b"Exception in worker",
    b"UCX",
    b"NIXL_ERR",
    b'", line ',
    # lines that change the arithmetic (sizing_lines.py)
    b"num_gpu_blocks",
    b"max_num_batched_tokens",
    b"num_blocks: ",
    b"Mamba cache mode",
    b"Asynchronous scheduling is",  # its pair "ch" is common: "yn" instead
    b"Async scheduling ",  # 0.27+: only turning it off is logged (pair "yn")
    b"CuMemAllocator: discarded",  # sleep mode's discard (pair "mA")
    b"ybrid",
    b"page sizes cannot be unified",
    b"group sizes",
    b"Weights are held outside",
    b"weights take",
    b"vLLM instance can use",
    b"HiSparse steady-state maximum",
)
#: One byte pair of each anchor, rare in serving traffic and prose, that the fast scan looks for.
ANCHOR_PAIRS: tuple[bytes, ...] = (
    b"ry",
    b"oo",
    b"ze",
    b"xi",
    b"s:",
    b" v",
    b"nf",
    b"gs",
    b"rl",
    b"Er",
    b"k ",
    b"tu",
    b"Gr",
    b"rr",
    b"eC",  # EngineCore failed to start / hit an exception
    b"rP",  # WorkerProc failed to start
    b"xc",
    b"CX",
    b"RR",
    b'",',
    b"_b",
    b"mb",
    b"yb",
    b"yn",
    b"ht",
    b"mA",
)


@dataclass
class ScanStats:
    """What the scan saw besides the candidate lines: total lines, a missing final newline."""

    lines: int = 0
    ended_mid_line: bool = False


def iter_candidate_lines(
    stream: IO[bytes], stats: ScanStats | None = None, chunk_bytes: int | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """``(line number from 1, byte offset of the line, raw bytes)`` of every line holding an anchor.

    Reads ``chunk_bytes`` (default :data:`CHUNK_BYTES`) at a time; memory stays at about two blocks
    however large the file.

    >>> import io
    >>> data = io.BytesIO(b"noise\\nAvailable KV cache memory: 1.0 GiB\\nnoise\\nAvailable KV")
    >>> list(iter_candidate_lines(data))
    [(2, 6, b'Available KV cache memory: 1.0 GiB')]
    """
    stats = stats if stats is not None else ScanStats()
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    base, tail, offset = 0, b"", 0  # lines before the tail, the unfinished line, its byte offset
    while True:
        block = stream.read(chunk_bytes)
        if not block:
            break
        first = block.find(b"\n")
        if first == -1:
            tail += block
            if len(tail) > MAX_LINE_BYTES:
                piece = tail + b"\n"
                yield from _scan(piece, 0, len(piece), base, offset)[0]
                offset += len(tail)
                tail = b""
            continue
        # The line that spans the chunk boundary, then the whole lines of the block, scanned in place.
        piece = tail + block[: first + 1]
        yield from _scan(piece, 0, len(piece), base, offset)[0]
        offset += len(tail) + first + 1
        last = block.rfind(b"\n")
        found, newlines = _scan(block, first + 1, last + 1, base + 1, offset)
        yield from found
        base += 1 + newlines
        offset += last - first
        tail = block[last + 1 :]
    if tail:
        stats.ended_mid_line = True
        piece = tail + b"\n"
        yield from _scan(piece, 0, len(piece), base, offset)[0]
        base += 1
    stats.lines = base


def _scan(
    block: bytes, start: int, stop: int, base: int, offset: int
) -> tuple[list[tuple[int, int, bytes]], int]:
    """Candidate lines of ``block[start:stop]`` (which ends with a newline; ``base`` newlines and
    ``offset`` bytes precede it) and the number of lines in it.

    Two vectorised look-ups (the byte pairs at even and at odd offsets, read in place as
    little-endian 16-bit numbers) mark every position where a signature pair (:data:`ANCHOR_PAIRS`)
    starts. An anchor holding a pair is checked at those positions only, byte by byte, all at once
    (:func:`_anchors_at`); one holding none is looked for by ``bytes.find``. A line is a candidate
    when it holds an anchor and a signature pair.

    >>> _scan(b"x\\nAvailable KV cache memory: 1 GiB\\nnoise\\n", 2, 41, 1, 2)
    ([(2, 2, b'Available KV cache memory: 1 GiB')], 2)
    """
    size = stop - start
    if size == 0:
        return [], 0
    body = np.frombuffer(block, dtype=np.uint8, count=size, offset=start)
    newlines = np.flatnonzero(body == 10)
    even = np.frombuffer(block, dtype="<u2", count=size // 2, offset=start)
    odd = np.frombuffer(block, dtype="<u2", count=(size - 1) // 2, offset=start + 1)
    at_even, at_odd = np.flatnonzero(_PAIR_TABLE[even]), np.flatnonzero(_PAIR_TABLE[odd])
    if not (at_even.size or at_odd.size):
        return [], len(newlines)
    positions = np.concatenate((at_even * 2, at_odd * 2 + 1))
    pairs = np.concatenate((even[at_even], odd[at_odd]))
    lines = np.searchsorted(newlines, _anchors_at(body, positions, pairs))
    loose = [at - start for anchor in _LOOSE_ANCHORS for at in _find_all(block, anchor, start, stop)]
    if loose:
        loose_lines = np.searchsorted(newlines, np.array(loose, dtype=np.int64)).tolist()
        paired = [index for index in loose_lines if _PAIR_RE.search(_line(block, start, newlines, index))]
        lines = np.concatenate((lines, np.array(paired, dtype=np.int64)))
    lines = _distinct(lines)
    begins = np.where(lines > 0, newlines[lines - 1] + 1, 0)
    texts = map(block.__getitem__, map(slice, (begins + start).tolist(), (newlines[lines] + start).tolist()))
    return list(zip((lines + (base + 1)).tolist(), (begins + offset).tolist(), texts)), len(newlines)


def _anchors_at(body: np.ndarray, positions: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Where in ``body`` an anchor holding a signature pair starts, given where each pair starts
    (``positions``) and which it is (``pairs``, as 16-bit numbers): each anchor is compared, all
    its bytes at once, at the positions of its pair less the pair's place in it (:data:`_BY_PAIR`).
    """
    starts = [np.empty(0, dtype=np.int64)]
    for pair, anchors in _BY_PAIR.items():
        at = positions[pairs == pair]
        if not at.size:
            continue
        for anchor, place in anchors:
            begin = at - place
            begin = begin[(begin >= 0) & (begin <= len(body) - len(anchor))]
            beside = place + 2 if place + 2 < len(anchor) else place - 1  # a byte next to the pair first
            begin = begin[body[begin + beside] == anchor[beside]]
            same = (body[begin[:, None] + np.arange(len(anchor))] == anchor).all(axis=1)
            starts.append(begin[same])
    return np.concatenate(starts)


def _distinct(numbers: np.ndarray) -> np.ndarray:
    """``numbers`` sorted, each once (as ``np.unique``, whose hashing is slower on these few).

    >>> _distinct(np.array([3, 1, 3, 2])).tolist()
    [1, 2, 3]
    """
    numbers = np.sort(numbers)
    return numbers[np.concatenate(([True], numbers[1:] != numbers[:-1]))] if numbers.size else numbers


def _line(block: bytes, start: int, newlines: np.ndarray, index: int) -> bytes:
    """Line ``index`` (from 0) of the body at ``block[start:]`` whose newlines are at ``newlines``."""
    begin = int(newlines[index - 1]) + 1 if index else 0
    return block[start + begin : start + int(newlines[index])]


def _find_all(block: bytes, needle: bytes, start: int, stop: int) -> Iterator[int]:
    """Every position of ``needle`` in ``block[start:stop]`` (positions in ``block``)."""
    at = block.find(needle, start, stop)
    while at != -1:
        yield at
        at = block.find(needle, at + 1, stop)


def _pair_table() -> np.ndarray:
    """Pair → is a signature, indexed by the pair read as a little-endian 16-bit number."""
    table = np.zeros(1 << 16, dtype=bool)
    for pair in ANCHOR_PAIRS:
        table[_pair_number(pair)] = True
    return table


def _pair_number(pair: bytes) -> int:
    """A byte pair as a little-endian 16-bit number (as the scan reads it in place)."""
    return pair[1] << 8 | pair[0]


def _by_pair() -> tuple[dict[int, list[tuple[np.ndarray, int]]], tuple[bytes, ...]]:
    """Each signature pair (as a number) → the anchors checked where it occurs, with its place in
    each (the first signature pair an anchor holds); and the anchors holding none."""
    by_pair: dict[int, list[tuple[np.ndarray, int]]] = {}
    loose = []
    for anchor in ANCHORS:
        if b"\n" in anchor:
            raise ValueError(f"anchor {anchor!r} holds a newline: a line could not hold it")
        held = [(anchor.find(pair), pair) for pair in ANCHOR_PAIRS if pair in anchor]
        if not held:
            loose.append(anchor)
            continue
        place, pair = held[0]
        by_pair.setdefault(_pair_number(pair), []).append((np.frombuffer(anchor, dtype=np.uint8), place))
    return by_pair, tuple(loose)


_PAIR_TABLE = _pair_table()
#: Any signature pair (for the lines of an anchor that holds none).
_PAIR_RE = re.compile(b"|".join(re.escape(pair) for pair in ANCHOR_PAIRS))
_BY_PAIR, _LOOSE_ANCHORS = _by_pair()


class Prepend:
    """A binary stream with ``head`` put back in front (what the NUL check read); with ``cr_only``,
    every ``\r`` read as ``\n``."""

    def __init__(self, head: bytes, stream: IO[bytes], cr_only: bool = False) -> None:
        self.head, self.stream, self.cr_only = head, stream, cr_only

    def read(self, size: int) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            block = head + self.stream.read(max(0, size - len(head)))
        else:
            block = self.stream.read(size)
        return block.replace(b"\r", b"\n") if self.cr_only else block
