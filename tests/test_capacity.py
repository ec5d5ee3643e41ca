"""Bytes → blocks → tokens → full-length sequences, as vLLM counts them."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kvplan.capacity import (
    blocks_per_sequence,
    bytes_for_sequences,
    capacity,
    concurrency_curve,
    max_concurrency,
)
from tests.conftest import GiB, KiB, MiB


def test_founding_example():
    # 256 KiB per token per rank, block 16 → 4 MiB per block; 12 GiB / 4 MiB = 3,072 blocks
    # = 49,152 tokens; 8,192-token sequences take 512 blocks each → 3,072 / 512 = 6 sequences
    result = capacity(12 * GiB, 256 * KiB, max_model_len=8192)
    assert result.block_bytes == 4 * MiB
    assert result.blocks == 3_072
    assert result.tokens == 49_152
    assert result.max_concurrency == 6.0


def test_partial_last_block_counts_as_a_whole_block():
    # 8,193 tokens need ceil(8193 / 16) = 513 blocks; 3,072 / 513 = 5.988…
    assert blocks_per_sequence(8193) == 513
    assert max_concurrency(3_072, 8193) == pytest.approx(3_072 / 513)


def test_inverse_bytes_for_sequences():
    # 6 sequences × 512 blocks × 4 MiB = 12 GiB; 7 sequences need 14 GiB
    assert bytes_for_sequences(6, 8192, 256 * KiB) == 12 * GiB
    assert bytes_for_sequences(7, 8192, 256 * KiB) == 14 * GiB


def test_curve():
    curve = concurrency_curve(12 * GiB, 256 * KiB, [1024, 8192, 100_000])
    assert curve["tokens"].tolist() == [49_152] * 3
    # 3,072 blocks / 64 = 48; / 512 = 6; / ceil(100000/16)=6,250 → 0.49…
    assert curve["max_concurrency"].tolist() == pytest.approx([48.0, 6.0, 3_072 / 6_250])
    assert curve["whole_sequences"].tolist() == [48, 6, 0]


def test_refusals():
    with pytest.raises(ValueError, match="positive"):
        capacity(GiB, 0, 8192)
    with pytest.raises(ValueError, match="holds no block"):  # 1 KiB < one 4 MiB block
        capacity(KiB, 256 * KiB, 8192)
    with pytest.raises(ValueError, match="sequence length"):
        max_concurrency(10, 0)


@given(st.integers(min_value=0, max_value=1 << 40), st.integers(min_value=1, max_value=1 << 20),
       st.integers(min_value=1, max_value=1 << 20), st.sampled_from([1, 8, 16, 32, 64, 128, 256]))
def test_inverse_round_trip(kv_bytes, bytes_per_token, seq_len, block_size):
    """The bytes for the whole sequences a budget holds never exceed that budget."""
    assume(kv_bytes >= bytes_per_token * block_size)  # at least one block, else capacity() refuses
    result = capacity(kv_bytes, bytes_per_token, seq_len, block_size)
    whole = int(result.max_concurrency)
    assert bytes_for_sequences(whole, seq_len, bytes_per_token, block_size) <= kv_bytes
