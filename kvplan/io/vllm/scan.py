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

#: Bytes read and scanned at a time. The scan's arrays are a few times a block: at 512 KiB they stay in
#: the core's cache, at 2 MiB they do not (scan of the 300 MB dense log: 0.62 s CPU vs 1.68 s).
CHUNK_BYTES = 1 << 19
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
    # failed boots (families.FAILURE_FAMILIES): generic start failures, V0 worker exceptions, transfer errors,
    # traceback frames
    b"failed to start",  # lines of EngineCore / WorkerProc: their pairs "eC", "rP"
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
        last = block.rfind(b"\n")
        if last == -1:
            tail += block
            if len(tail) > MAX_LINE_BYTES:
                piece = tail + b"\n"
                yield from _scan(piece, base, offset)[0]
                offset += len(tail)
                tail = b""
            continue
        # the line that spans the block boundary and the block's whole lines, scanned as one piece
        piece = tail + block[: last + 1]
        found, newlines = _scan(piece, base, offset)
        yield from found
        base += newlines
        offset += len(piece)
        tail = block[last + 1 :]
    if tail:
        stats.ended_mid_line = True
        piece = tail + b"\n"
        yield from _scan(piece, base, offset)[0]
        base += 1
    stats.lines = base


def _scan(block: bytes, base: int, offset: int) -> tuple[list[tuple[int, int, bytes]], int]:
    """Candidate lines of ``block`` (whole lines, ending with a newline; ``base`` newlines and ``offset``
    bytes precede it) and the number of lines in it.

    A line is a candidate when it holds an anchor and a signature pair (:data:`ANCHOR_PAIRS`; an
    anchor holding one brings its own). The anchors are found by :func:`_anchors_at`, those too
    short for it by ``bytes.find``; the lines of an anchor holding no signature pair are checked
    for one by a regex.

    >>> _scan(b"Available KV cache memory: 1 GiB\\nnoise\\n", 1, 2)
    ([(2, 2, b'Available KV cache memory: 1 GiB')], 2)
    """
    if not block:
        return [], 0
    newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
    begins, anchors = _anchors_at(block)
    # a one-byte find is a memchr: a block without the short anchor's last byte costs next to nothing
    short = [
        (at, number)
        for number, anchor in _SHORT_ANCHORS
        if block.find(anchor[-1:]) != -1
        for at in _find_all(block, anchor)
    ]
    if short:
        more = np.array(short, dtype=np.int64)
        begins, anchors = np.concatenate((begins, more[:, 0])), np.concatenate((anchors, more[:, 1]))
    lines = np.searchsorted(newlines, begins)
    found = np.zeros(len(newlines), dtype=bool)
    pairless = _PAIRLESS[anchors]
    found[lines[~pairless]] = True
    for index in set(lines[pairless & ~found[lines]].tolist()):  # few: most such lines hold another
        found[index] = _PAIR_RE.search(_line(block, newlines, index)) is not None
    lines = np.flatnonzero(found)
    if not lines.size:
        return [], len(newlines)
    begins = np.where(lines > 0, newlines[lines - 1] + 1, 0)
    texts = map(block.__getitem__, map(slice, begins.tolist(), newlines[lines].tolist()))
    return list(zip((lines + (base + 1)).tolist(), (begins + offset).tolist(), texts)), len(newlines)


def _anchors_at(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where in ``block`` an anchor of at least :data:`_WINDOW` bytes
    starts, and which (its index in :data:`ANCHORS`).

    One vectorised look-up reads the 4 bytes at every other offset of the block (little-endian 32-bit
    words read in place, two series 2 bytes apart), hashed to 16 bits (:func:`_slots`), in a table
    of the two 4-byte runs of each anchor's window (:func:`_entries`): whichever offset an anchor
    starts at, one of the two starts at a looked-up offset. Each hit gives the starts of the anchors
    whose window holds a run of its slot there; each start is then compared with its anchor 8
    bytes at a time (:data:`_CHUNKS`), all at once.

    >>> begins, anchors = _anchors_at(b"a world of Error\\n")
    >>> sorted((int(begin), ANCHORS[number]) for begin, number in zip(begins, anchors))
    [(2, b'world'), (11, b'Error')]
    """
    size = len(block)
    if size <= _WINDOW:  # no room for an anchor of a window's length and the newline
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    hits, codes = [], []
    for first in (0, 2):
        words = np.frombuffer(block, dtype="<u4", count=(size - first) // 4, offset=first)
        code = np.take(_SLOT_CODES, _slots(words), mode="clip")  # clip: no bounds check (all < 2**16)
        at = np.flatnonzero(code != 0)  # nonzero of a bool array is several times that of uint8
        hits.append(at * 4 + first)
        codes.append(code[at])
    code = np.concatenate(codes)
    count = _ENTRY_COUNT[code]
    entry = np.repeat(_FIRST_ENTRY[code] - np.cumsum(count) + count, count) + np.arange(count.sum())
    begins = np.repeat(np.concatenate(hits), count) - _ENTRY_PLACE[entry]
    anchors = _ENTRY_ANCHOR[entry]
    inside = (begins >= 0) & (begins <= size - _LENGTH[anchors])
    begins, anchors = begins[inside], anchors[inside]
    if size < 8:  # too short for one 8-byte number: a padded copy (of a few bytes)
        block, size = block + bytes(8 - size), 8
    numbers = np.ndarray((size - 7,), dtype="<u8", buffer=block, strides=(1,))
    found = []
    for round_, (offsets, masks, values) in enumerate(_CHUNKS, start=1):
        same = (_eight_bytes(numbers, begins + offsets[anchors]) & masks[anchors]) == values[anchors]
        begins, anchors = begins[same], anchors[same]
        done = _CHUNK_COUNT[anchors] == round_  # the anchor's last 8 bytes were compared
        found.append((begins[done], anchors[done]))
        begins, anchors = begins[~done], anchors[~done]
    every_begin, every_anchor = zip(*found)
    return np.concatenate(every_begin), np.concatenate(every_anchor)


def _slots(words: np.ndarray) -> np.ndarray:
    """Each 32-bit number's slot in the look-up: its top 16 bits once multiplied by an odd number
    (modulo 2**32: a multiplicative hash, all 32 bits stirred into the top ones).

    >>> _slots(np.array([int.from_bytes(b"rror", "little")], dtype=np.uint32)).tolist()
    [48804]
    """
    return (words * _MULTIPLIER) >> 16


def _eight_bytes(numbers: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The 8 bytes from each offset ``at`` as little-endian numbers, given the number at every
    offset (``numbers``, one per byte but the last 7); the bytes past the end are 0.

    >>> data = b"0123456789"
    >>> numbers = np.ndarray((3,), dtype="<u8", buffer=data, strides=(1,))
    >>> [int(number).to_bytes(8, "little") for number in _eight_bytes(numbers, np.array([1, 4]))]
    [b'12345678', b'456789\\x00\\x00']
    """
    within = np.minimum(at, len(numbers) - 1)
    return numbers[within] >> ((at - within) * 8).astype(np.uint64)


def _line(block: bytes, newlines: np.ndarray, index: int) -> bytes:
    """Line ``index`` (from 0) of ``block``, whose newlines are at ``newlines``."""
    begin = int(newlines[index - 1]) + 1 if index else 0
    return block[begin : int(newlines[index])]


def _find_all(block: bytes, needle: bytes) -> Iterator[int]:
    """Every position of ``needle`` in ``block``."""
    at = block.find(needle)
    while at != -1:
        yield at
        at = block.find(needle, at + 1)


#: Bytes of an anchor's window: two 4-byte runs in a row, of which one starts at a looked-up offset.
_WINDOW = 5
#: Of the hash in :func:`_slots`: 2**32 over the golden ratio, odd.
_MULTIPLIER = 0x9E3779B1


def _entries() -> list[tuple[int, int, int]]:
    """``(slot, anchor's index in ANCHORS, the run's place in it)`` of the two 4-byte runs of each
    anchor's window, by slot. The window is the anchor's :data:`_WINDOW` bytes around its first
    word break (a run across words is rarer in any text than one within a word), else from its
    first signature pair (rare in serving traffic), kept within the anchor.

    >>> sorted((place, ANCHORS[number][place : place + 4]) for _slot, number, place in _entries() if number == 2)
    [(0, b'KV c'), (1, b'V ca')]
    """
    entries = []
    for number, anchor in enumerate(ANCHORS):
        if b"\n" in anchor:
            raise ValueError(f"anchor {anchor!r} holds a newline: a line could not hold it")
        if len(anchor) < _WINDOW:
            continue
        word = anchor.strip()
        if b" " in word:
            first = anchor.find(word) + word.find(b" ") - 2
        else:
            first = min((anchor.find(pair) for pair in ANCHOR_PAIRS if pair in anchor), default=0)
        first = min(max(first, 0), len(anchor) - _WINDOW)
        runs = [anchor[at : at + 4] for at in (first, first + 1)]
        slots = _slots(np.frombuffer(b"".join(runs), dtype="<u4")).tolist()
        entries += [(slot, number, at) for slot, at in zip(slots, (first, first + 1))]
    return sorted(entries)


def _lookup(entries: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The table of :func:`_entries` by slot: slot → code (0: no window's, else 1 + the slot's rank
    among theirs), and by code the index of its first entry and the number of its entries."""
    slots = sorted({slot for slot, _number, _place in entries})
    if len(slots) > 255:
        raise ValueError(f"{len(slots)} window slots: more than 8-bit codes can tell apart")
    codes = np.zeros(1 << 16, dtype=np.uint8)
    codes[slots] = np.arange(1, len(slots) + 1)
    numbers = [slot for slot, _number, _place in entries]
    first = np.searchsorted(numbers, [-1, *slots])
    count = np.searchsorted(numbers, [-1, *slots], side="right") - first
    return codes, first, count


def _chunks() -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """By round of the comparison, for each anchor (by index in ANCHORS): the offset in it of the 8
    bytes compared (:func:`_chunk_offsets`), the mask of those that count (all but for an anchor
    shorter than 8) and their value as a little-endian number. An anchor has no round past its
    last (:data:`_CHUNK_COUNT`): its row there is 0s, never compared.

    >>> number = ANCHORS.index(b"KV cache size")
    >>> [(int(offsets[number]), hex(masks[number])) for offsets, masks, _values in _chunks()]
    [(0, '0xffffffffffffffff'), (5, '0xffffffffffffffff'), (0, '0x0'), (0, '0x0')]
    """
    rows = [[_chunk(anchor[at : at + 8], at) for at in _chunk_offsets(len(anchor))] for anchor in ANCHORS]
    rounds = max(map(len, rows))
    padded = [row + [(0, 0, 0)] * (rounds - len(row)) for row in rows]
    return [
        (np.array(offsets), np.array(masks, dtype=np.uint64), np.array(values, dtype=np.uint64))
        for offsets, masks, values in (zip(*(row[round_] for row in padded)) for round_ in range(rounds))
    ]


def _chunk_offsets(length: int) -> list[int]:
    """Where the 8-byte pieces compared of an anchor of ``length`` bytes start: at 0, 8, 16, ...
    and 8 before its end (overlapping the one before), so that no byte past it is compared.

    >>> _chunk_offsets(5), _chunk_offsets(8), _chunk_offsets(13), _chunk_offsets(29)
    ([0], [0], [0, 5], [0, 8, 16, 21])
    """
    return [0, *range(8, length - 8, 8)] + ([length - 8] if length > 8 else [])


def _chunk(part: bytes, at: int) -> tuple[int, int, int]:
    """``(offset, mask, value)`` of ``part`` (up to 8 bytes) at ``at`` in its anchor, compared as one
    little-endian number.

    >>> [hex(number) for number in _chunk(b"world", 0)]
    ['0x0', '0xffffffffff', '0x646c726f77']
    """
    return at, (1 << 8 * len(part)) - 1, int.from_bytes(part, "little")


_SLOT_CODES, _FIRST_ENTRY, _ENTRY_COUNT = _lookup(_ENTRIES := _entries())
_ENTRY_ANCHOR = np.array([number for _slot, number, _place in _ENTRIES])
_ENTRY_PLACE = np.array([place for _slot, _number, place in _ENTRIES])
_CHUNKS = _chunks()
_CHUNK_COUNT = np.array([len(_chunk_offsets(len(anchor))) for anchor in ANCHORS])
_LENGTH = np.array([len(anchor) for anchor in ANCHORS])
#: Anchors found by ``bytes.find``: too short for a window.
_SHORT_ANCHORS = tuple((number, anchor) for number, anchor in enumerate(ANCHORS) if len(anchor) < _WINDOW)
#: Anchors holding no signature pair: their lines must hold one elsewhere.
_PAIRLESS = np.array([not any(pair in anchor for pair in ANCHOR_PAIRS) for anchor in ANCHORS])
#: Any signature pair (for the lines of an anchor that holds none).
_PAIR_RE = re.compile(b"|".join(re.escape(pair) for pair in ANCHOR_PAIRS))


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
