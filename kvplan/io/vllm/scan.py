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
                yield from _scan(tail + b"\n", base, offset)[0]
                offset += len(tail)
                tail = b""
            continue
        # The line that spans the chunk boundary, then the whole lines of the block, scanned in place.
        yield from _scan(tail + block[: first + 1], base, offset)[0]
        offset += len(tail) + first + 1
        last = block.rfind(b"\n")
        found, newlines = _scan(memoryview(block)[first + 1 : last + 1], base + 1, offset)
        yield from found
        base += 1 + newlines
        offset += last - first
        tail = block[last + 1 :]
    if tail:
        stats.ended_mid_line = True
        yield from _scan(tail + b"\n", base, offset)[0]
        base += 1
    stats.lines = base


def _scan(body: bytes | memoryview, base: int, offset: int) -> tuple[list[tuple[int, int, bytes]], int]:
    """Candidate lines of ``body`` (which ends with a newline; ``base`` newlines and ``offset`` bytes
    precede it) and the number of lines in it.

    Two vectorised look-ups (the byte pairs at even and at odd offsets, read in place as
    little-endian 16-bit numbers) mark every position where a signature pair of an anchor starts
    (:data:`ANCHOR_PAIRS`); only lines holding such a pair are checked for the anchors themselves.
    """
    size = len(body)
    if size == 0:
        return [], 0
    even = np.frombuffer(body, dtype="<u2", count=size // 2)
    odd = np.frombuffer(body, dtype="<u2", offset=1, count=(size - 1) // 2)
    hits = np.concatenate((np.flatnonzero(_PAIR_TABLE[even]) * 2, np.flatnonzero(_PAIR_TABLE[odd]) * 2 + 1))
    newlines = np.flatnonzero(np.frombuffer(body, dtype=np.uint8) == 10)
    found = []
    for index in np.unique(np.searchsorted(newlines, hits)).tolist():
        start = int(newlines[index - 1]) + 1 if index else 0
        line = bytes(body[start : int(newlines[index])])
        if _ANCHOR_RE.search(line):
            found.append((base + index + 1, offset + start, line))
    return found, len(newlines)


def _pair_table() -> np.ndarray:
    """Pair → is a signature, indexed by the pair read as a little-endian 16-bit number."""
    table = np.zeros(1 << 16, dtype=bool)
    for pair in ANCHOR_PAIRS:
        table[pair[1] << 8 | pair[0]] = True
    return table


_PAIR_TABLE = _pair_table()
#: Any anchor, as one pattern: one C-level search per line that holds a signature pair.
_ANCHOR_RE = re.compile(b"|".join(re.escape(anchor) for anchor in ANCHORS))


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
