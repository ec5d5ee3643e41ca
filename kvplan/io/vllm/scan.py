"""The streaming scan, a sealed engine: Hyperscan finds the lines holding an anchor (its one specification:
``tests/test_io_vllm_scan.py``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import hyperscan

#: Bytes read and scanned at a time.
CHUNK_BYTES = 1 << 19
#: A "line" longer than this (no newline at all) is read in pieces rather than held whole.
MAX_LINE_BYTES = 1 << 24
#: Byte strings of which every line the reader uses contains at least one.
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
    # failed boots (families.FAILURE_FAMILIES): generic start failures, V0 worker exceptions, transfer errors,
    # traceback frames
    b"failed to start",
    b"hit an exception",
    b"Exception in worker",
    b"UCX",
    b"NIXL_ERR",
    b'", line ',
    # lines that change the arithmetic (families.SIZING_FAMILIES)
    b"num_gpu_blocks",
    b"max_num_batched_tokens",
    b"num_blocks: ",
    b"Mamba cache mode",
    b"Asynchronous scheduling is",
    b"Async scheduling ",  # 0.27+: only turning it off is logged
    b"CuMemAllocator: discarded",  # sleep mode's discard
    b"ybrid",
    b"page sizes cannot be unified",
    b"group sizes",
    b"Weights are held outside",
    b"weights take",
    b"vLLM instance can use",
    b"HiSparse steady-state maximum",
)


def _database() -> hyperscan.Database:
    """Hyperscan's database: one pattern, an anchor and the rest of its line (a line is reported once)."""
    if any(b"\n" in anchor for anchor in ANCHORS):
        raise ValueError("an anchor holds a newline: a line could not hold it")
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    expression = b"(?:" + b"|".join(map(re.escape, ANCHORS)) + b")[^\\n]*\\n"
    database.compile(expressions=[expression], ids=[0], elements=1)
    return database


_DATABASE = _database()


@dataclass
class ScanStats:
    """What the scan saw besides the candidate lines: total lines, a missing final newline."""

    lines: int = 0
    ended_mid_line: bool = False


def iter_candidate_lines(
    stream: IO[bytes], stats: ScanStats | None = None, chunk_bytes: int | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """``(line number from 1, byte offset, bytes)`` of every line holding an anchor, ``chunk_bytes`` at a time.

    >>> import io
    >>> data = io.BytesIO(b"noise\\nAvailable KV cache memory: 1.0 GiB\\nnoise\\nAvailable KV")
    >>> list(iter_candidate_lines(data))
    [(2, 6, b'Available KV cache memory: 1.0 GiB')]
    """
    stats = stats if stats is not None else ScanStats()
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    scratch = hyperscan.Scratch(_DATABASE)  # one per scan: a scratch serves one thread at a time
    base, tail, offset = 0, b"", 0  # lines before the tail, the unfinished line, its byte offset
    while True:
        block = stream.read(chunk_bytes)
        if not block:
            break
        last = block.rfind(b"\n")
        if last == -1:
            tail += block
            if len(tail) > MAX_LINE_BYTES:
                yield from _scan(tail + b"\n", base, offset, scratch)
                offset += len(tail)
                tail = b""
            continue
        # the line that spans the block boundary and the block's whole lines, scanned as one piece
        piece = tail + block[: last + 1]
        yield from _scan(piece, base, offset, scratch)
        base += piece.count(b"\n")
        offset += len(piece)
        tail = block[last + 1 :]
    if tail:
        stats.ended_mid_line = True
        yield from _scan(tail + b"\n", base, offset, scratch)
        base += 1
    stats.lines = base


def _scan(block: bytes, base: int, offset: int, scratch: hyperscan.Scratch) -> list[tuple[int, int, bytes]]:
    """Candidate lines of ``block`` (whole lines; ``base`` newlines and ``offset`` bytes precede it)."""
    ends: list[int] = []
    _DATABASE.scan(block, match_event_handler=_collect, context=ends, scratch=scratch)
    ends.sort()
    found = []
    number, counted = base + 1, 0
    for end in ends:
        stop = end - 1  # the line's newline
        begin = block.rfind(b"\n", 0, stop) + 1
        number += block.count(b"\n", counted, begin)
        counted = begin
        found.append((number, begin + offset, block[begin:stop]))
    return found


def _collect(_id: int, _start: int, end: int, _flags: int, ends: Any) -> None:
    """Hyperscan's match handler: keep where the line ends (after its newline)."""
    ends.append(end)


class Prepend:
    """A binary stream with ``head`` put back in front; with ``cr_only``, every ``\r`` read as ``\n``."""

    def __init__(self, head: bytes, stream: IO[bytes], cr_only: bool = False) -> None:
        self.head, self.stream, self.cr_only = head, stream, cr_only

    def read(self, size: int) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            block = head + self.stream.read(max(0, size - len(head)))
        else:
            block = self.stream.read(size)
        return block.replace(b"\r", b"\n") if self.cr_only else block
