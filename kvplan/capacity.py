"""What KV bytes buy: bytes → blocks → tokens → full-length sequences.

``tokens = blocks × block_size`` and the number of full-length sequences at length L is
``blocks / ceil(L / block_size)``, which is what vLLM logs as "Maximum concurrency".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import pandas as pd

DEFAULT_BLOCK_SIZE = 16
#: The ``--block-size`` values vLLM accepts (``CacheConfig.BlockSize``; 256 since 0.10). vLLM picks
#: other sizes itself for hybrid Mamba models, never from the flag.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def block_bytes_from_token_bytes(bytes_per_token: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Bytes of one KV block: ``block_size × bytes_per_token``.

    >>> block_bytes_from_token_bytes(256 * 1024, 16)
    4194304
    """
    if bytes_per_token <= 0 or block_size <= 0:
        raise ValueError(
            f"bytes per token and block size must be positive, got {bytes_per_token}, {block_size}"
        )
    return block_size * bytes_per_token


def blocks_from_bytes(kv_bytes: int, block_bytes: int) -> int:
    """Whole KV blocks that fit in ``kv_bytes``.

    >>> blocks_from_bytes(12 * 2**30, 4 * 2**20)
    3072
    """
    if block_bytes <= 0:
        raise ValueError(f"block bytes must be positive, got {block_bytes}")
    return max(0, kv_bytes // block_bytes)


def tokens_from_blocks(num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Tokens of KV cache in ``num_blocks`` blocks.

    >>> tokens_from_blocks(3072, 16)
    49152
    """
    return num_blocks * block_size


def blocks_per_sequence(seq_len: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Blocks one sequence of ``seq_len`` tokens occupies: ``ceil(seq_len / block_size)``.

    >>> blocks_per_sequence(8192, 16), blocks_per_sequence(8193, 16)
    (512, 513)
    """
    if seq_len <= 0:
        raise ValueError(f"sequence length must be positive, got {seq_len}")
    return math.ceil(seq_len / block_size)


def max_concurrency(num_blocks: int, seq_len: int, block_size: int = DEFAULT_BLOCK_SIZE) -> float:
    """Full-length sequences of ``seq_len`` tokens the blocks hold at once (vLLM's figure).

    >>> max_concurrency(3072, 8192, 16)
    6.0
    """
    return num_blocks / blocks_per_sequence(seq_len, block_size)


def bytes_for_sequences(
    num_sequences: int, seq_len: int, bytes_per_token: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> int:
    """KV bytes per rank needed to hold ``num_sequences`` full sequences of ``seq_len`` tokens.

    >>> bytes_for_sequences(6, 8192, 256 * 1024) == 12 * 2**30
    True
    """
    block_bytes = block_bytes_from_token_bytes(bytes_per_token, block_size)
    return num_sequences * blocks_per_sequence(seq_len, block_size) * block_bytes


@dataclass(frozen=True)
class Capacity:
    """Tokens and concurrency bought by ``kv_bytes`` per rank (sizes in bytes)."""

    kv_bytes: int
    bytes_per_token: int
    block_size: int
    block_bytes: int
    blocks: int
    tokens: int
    max_model_len: int
    max_concurrency: float

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return asdict(self)


def capacity(
    kv_bytes: int, bytes_per_token: int, max_model_len: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> Capacity:
    """Blocks, tokens and full-length concurrency of a per-rank KV budget.

    >>> c = capacity(12 * 2**30, 256 * 1024, max_model_len=8192)
    >>> c.blocks, c.tokens, c.max_concurrency
    (3072, 49152, 6.0)
    """
    block_bytes = block_bytes_from_token_bytes(bytes_per_token, block_size)
    blocks = blocks_from_bytes(kv_bytes, block_bytes)
    if blocks == 0:
        raise ValueError(f"a KV budget of {kv_bytes} bytes holds no block of {block_bytes} bytes")
    return Capacity(
        kv_bytes=kv_bytes,
        bytes_per_token=bytes_per_token,
        block_size=block_size,
        block_bytes=block_bytes,
        blocks=blocks,
        tokens=tokens_from_blocks(blocks, block_size),
        max_model_len=max_model_len,
        max_concurrency=max_concurrency(blocks, max_model_len, block_size),
    )


def concurrency_curve(
    kv_bytes: int,
    bytes_per_token: int,
    seq_lens: Iterable[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> pd.DataFrame:
    """Tokens and full-length sequences at each length, one row per ``seq_len``.

    Columns: ``seq_len``, ``blocks``, ``tokens``, ``max_concurrency``, ``whole_sequences``.

    >>> concurrency_curve(12 * 2**30, 256 * 1024, [4096, 8192])["whole_sequences"].tolist()
    [12, 6]
    """
    blocks = blocks_from_bytes(kv_bytes, block_bytes_from_token_bytes(bytes_per_token, block_size))
    lengths = [int(length) for length in seq_lens]
    concurrency = [max_concurrency(blocks, length, block_size) for length in lengths]
    return pd.DataFrame(
        {
            "seq_len": lengths,
            "blocks": blocks,
            "tokens": tokens_from_blocks(blocks, block_size),
            "max_concurrency": concurrency,
            "whole_sequences": [math.floor(value) for value in concurrency],
        }
    )
