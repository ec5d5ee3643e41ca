"""What KV bytes buy: bytes → blocks → tokens (``blocks × block_size``) → full-length sequences at length L
(``blocks / ceil(L / block_size)``, vLLM's "Maximum concurrency") where every token costs the same bytes
(:class:`FlatSpec`); a model config's :class:`kvplan.kvspec.KVSpec` answers per vLLM release."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for annotations only
    import pandas as pd

    from kvplan.kvspec.spec import KVSpec


DEFAULT_BLOCK_SIZE = 16
#: The ``--block-size`` values vLLM accepts (``CacheConfig.BlockSize``; 256 since 0.10).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: The shortest request length [tokens] of a default capacity table (:func:`sequence_lengths`).
SHORTEST_SEQUENCE_LENGTH = 256
CAPACITY_TABLE_COLUMNS = ("seq_len", "blocks", "tokens", "max_concurrency", "whole_sequences")
#: Fields a model-config spec adds to a :class:`Capacity`.
SPEC_FIELDS = ("model", "vllm_version", "tp", "pp", "dcp", "kv_cache_dtype")
SPEC_TAIL_FIELDS = ("approximate", "approximate_reason", "limiting_stage", "stages", "block_size_note")


def blocks_per_sequence(seq_len: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Blocks one sequence of ``seq_len`` tokens occupies: ``ceil(seq_len / block_size)``."""
    if seq_len <= 0:
        raise ValueError(f"sequence length must be positive, got {seq_len}")
    return math.ceil(seq_len / block_size)


@dataclass(frozen=True)
class Capacity:
    """Blocks, tokens ("GPU KV cache size") and concurrency ("Maximum concurrency") of ``kv_bytes`` per rank;
    a model-config spec also fills the model, layout, stages and how exact the figures are."""

    kv_bytes: int
    bytes_per_token: int
    block_size: int
    block_bytes: int
    blocks: int
    tokens: int
    max_model_len: int
    max_concurrency: float
    approximate: bool = False
    approximate_reason: str = ""
    model: str | None = None
    vllm_version: str | None = None
    block_size_note: str = ""
    tp: int | None = None
    pp: int | None = None
    dcp: int | None = None
    kv_cache_dtype: str | None = None
    limiting_stage: int | None = None
    stages: tuple[dict, ...] | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict, with the spec's fields when a model spec made it."""
        common = [f.name for f in fields(self) if f.name not in SPEC_FIELDS + SPEC_TAIL_FIELDS]
        names = common if self.model is None else [*SPEC_FIELDS, *common, *SPEC_TAIL_FIELDS]
        data = {name: getattr(self, name) for name in names}
        if self.stages is not None and "stages" in data:
            data["stages"] = [dict(stage) for stage in self.stages]
        return data


@dataclass(frozen=True)
class FlatSpec:
    """A model whose every token costs ``bytes_per_token`` per rank, in ``block_size``-token blocks."""

    bytes_per_token: int
    block_size: int = DEFAULT_BLOCK_SIZE

    @property
    def block_bytes(self) -> int:
        """Bytes of one block per rank: ``block_size × bytes_per_token``."""
        if self.bytes_per_token <= 0 or self.block_size <= 0:
            raise ValueError(
                f"bytes per token and block size must be positive, got {self.bytes_per_token}, {self.block_size}"
            )
        return self.block_size * self.bytes_per_token

    def num_blocks(self, kv_bytes: int) -> int:
        """Whole blocks in ``kv_bytes`` per rank."""
        return max(0, kv_bytes // self.block_bytes)

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one request of ``max_model_len`` tokens occupies."""
        return blocks_per_sequence(max_model_len, self.block_size)

    def bytes_for_sequences(self, num_sequences: int, seq_len: int) -> int:
        """KV bytes per rank that hold ``num_sequences`` full sequences of ``seq_len`` tokens."""
        return num_sequences * self.blocks_per_request(seq_len) * self.block_bytes

    def capacity(self, kv_bytes: int, max_model_len: int) -> Capacity:
        """Blocks, tokens and full-length concurrency of ``kv_bytes`` per rank (0 blocks allowed)."""
        blocks = self.num_blocks(kv_bytes)
        return Capacity(
            kv_bytes=kv_bytes,
            bytes_per_token=self.bytes_per_token,
            block_size=self.block_size,
            block_bytes=self.block_bytes,
            blocks=blocks,
            tokens=blocks * self.block_size,
            max_model_len=max_model_len,
            max_concurrency=blocks / self.blocks_per_request(max_model_len),
        )


def capacity(
    kv_bytes: int, bytes_per_token: int, max_model_len: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> Capacity:
    """:meth:`FlatSpec.capacity`, refusing a budget that holds no block.

    >>> c = capacity(12 * 2**30, 256 * 1024, max_model_len=8192)
    >>> c.blocks, c.tokens, c.max_concurrency
    (3072, 49152, 6.0)
    """
    result = FlatSpec(bytes_per_token, block_size).capacity(kv_bytes, max_model_len)
    if result.blocks == 0:
        raise ValueError(f"a KV budget of {kv_bytes} bytes holds no block of {result.block_bytes} bytes")
    return result


def sequence_lengths(
    max_model_len: int, shortest: int = SHORTEST_SEQUENCE_LENGTH, also: Iterable[int] = ()
) -> list[int]:
    """Request lengths of a capacity table [tokens]: powers of two from ``shortest``, ``max_model_len`` and
    ``also``, ascending."""
    if max_model_len <= 0:
        raise ValueError(f"max_model_len must be positive, got {max_model_len}")
    if shortest <= 0:
        raise ValueError(f"the shortest length must be positive, got {shortest}")
    lengths = {max_model_len, *(int(length) for length in also)}
    length = shortest
    while length < max_model_len:
        lengths.add(length)
        length *= 2
    return sorted(lengths)


def capacity_rows(sizing: FlatSpec | KVSpec, kv_bytes: int, seq_lens: Iterable[int]) -> tuple[dict, ...]:
    """One row per request length of ``kv_bytes`` per rank (:data:`CAPACITY_TABLE_COLUMNS`)."""
    pairs = [(int(length), sizing.capacity(kv_bytes, int(length))) for length in seq_lens]
    values = [(n, r.blocks, r.tokens, r.max_concurrency, math.floor(r.max_concurrency)) for n, r in pairs]
    return tuple(dict(zip(CAPACITY_TABLE_COLUMNS, row)) for row in values)


def capacity_table(sizing: FlatSpec | KVSpec, kv_bytes: int, seq_lens: Sequence[int]) -> pd.DataFrame:
    """:func:`capacity_rows` as a DataFrame with the columns :data:`CAPACITY_TABLE_COLUMNS`."""
    import pandas as pd  # here: `kvplan capacity` starts without pandas

    return pd.DataFrame(list(capacity_rows(sizing, kv_bytes, seq_lens)), columns=list(CAPACITY_TABLE_COLUMNS))
