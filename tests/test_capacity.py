"""Bytes → blocks → tokens → full-length sequences, as vLLM counts them."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kvplan.kvspec.capacity import (
    CAPACITY_TABLE_COLUMNS,
    Capacity,
    FlatSpec,
    blocks_per_sequence,
    capacity,
    capacity_rows,
    capacity_table,
    sequence_lengths,
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
    assert FlatSpec(256 * KiB).capacity(12 * GiB, 8193).max_concurrency == pytest.approx(3_072 / 513)


def test_inverse_bytes_for_sequences():
    # 6 sequences × 512 blocks × 4 MiB = 12 GiB; 7 sequences need 14 GiB
    assert FlatSpec(256 * KiB).bytes_for_sequences(6, 8192) == 12 * GiB
    assert FlatSpec(256 * KiB).bytes_for_sequences(7, 8192) == 14 * GiB


def test_curve():
    curve = capacity_table(FlatSpec(256 * KiB), 12 * GiB, [1024, 8192, 100_000])
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
        blocks_per_sequence(0)


@given(
    st.integers(min_value=0, max_value=1 << 40),
    st.integers(min_value=1, max_value=1 << 20),
    st.integers(min_value=1, max_value=1 << 20),
    st.sampled_from([1, 8, 16, 32, 64, 128, 256]),
)
def test_inverse_round_trip(kv_bytes, bytes_per_token, seq_len, block_size):
    """The bytes for the whole sequences a budget holds never exceed that budget."""
    assume(kv_bytes >= bytes_per_token * block_size)  # at least one block, else capacity() refuses
    result = capacity(kv_bytes, bytes_per_token, seq_len, block_size)
    whole = int(result.max_concurrency)
    assert FlatSpec(bytes_per_token, block_size).bytes_for_sequences(whole, seq_len) <= kv_bytes


# --- one capacity model for the bytes-per-token and the model-config path ---------------------------

LLAMA_70B_LIKE = {
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "torch_dtype": "bfloat16",
}


def test_both_paths_return_one_capacity_type_with_the_same_figures():
    # Llama-3.1-70B-like at TP4: 2 KV heads × 128 × 2 (K, V) × 2 bytes × 80 layers = 81,920 bytes per token.
    # The flat path with that figure and the model path agree: 12 GiB / (16 × 81,920) = 9,830 blocks
    # = 157,280 tokens; 9,830 / (32,768 / 16) = 4.7998… full sequences.
    from kvplan.kvspec import kv_spec

    spec = kv_spec(LLAMA_70B_LIKE, tp=4, vllm_version="0.26.0")
    flat, model = FlatSpec(81_920).capacity(12 * GiB, 32_768), spec.capacity(12 * GiB, 32_768)
    assert type(flat) is type(model) is Capacity
    for name in (
        "kv_bytes",
        "bytes_per_token",
        "block_size",
        "block_bytes",
        "blocks",
        "tokens",
        "max_model_len",
        "max_concurrency",
    ):
        assert getattr(flat, name) == getattr(model, name), name
    assert (model.blocks, model.tokens, model.max_concurrency) == (9_830, 157_280, 9_830 / 2_048)


def test_to_dict_keys_are_the_json_contract_of_each_path():
    from kvplan.kvspec import kv_spec

    assert list(capacity(12 * GiB, 256 * KiB, 8192).to_dict()) == [
        "kv_bytes",
        "bytes_per_token",
        "block_size",
        "block_bytes",
        "blocks",
        "tokens",
        "max_model_len",
        "max_concurrency",
    ]
    model = kv_spec(LLAMA_70B_LIKE, tp=4, pp=2).capacity(12 * GiB, 32_768).to_dict()
    assert list(model) == [
        "model",
        "vllm_version",
        "tp",
        "pp",
        "dcp",
        "kv_cache_dtype",
        "kv_bytes",
        "bytes_per_token",
        "block_size",
        "block_bytes",
        "blocks",
        "tokens",
        "max_model_len",
        "max_concurrency",
        "approximate",
        "approximate_reason",
        "limiting_stage",
        "stages",
        "block_size_note",
    ]
    assert [stage["pp_rank"] for stage in model["stages"]] == [0, 1]  # a list of dicts, one per stage


def test_one_capacity_table_for_both_paths():
    from kvplan.kvspec import kv_spec

    # up to 0.20 vLLM logs tokens = blocks × block_size, as the flat path does (from 0.21 it logs
    # int(concurrency × L): 9,830 / 188 × 3,000 = 156,861 at L = 3,000)
    spec = kv_spec(LLAMA_70B_LIKE, tp=4, vllm_version="0.20.0")
    lengths = sequence_lengths(32_768, also=[3_000])
    # 256 … 16,384 doubling, the plan's 3,000 and max_model_len 32,768
    assert lengths == [256, 512, 1024, 2048, 3000, 4096, 8192, 16384, 32768]
    flat, model = capacity_table(FlatSpec(81_920), 12 * GiB, lengths), capacity_table(spec, 12 * GiB, lengths)
    assert list(flat.columns) == list(CAPACITY_TABLE_COLUMNS)
    assert flat.equals(model)
    # 3,000 tokens take ceil(3000 / 16) = 188 blocks: 9,830 / 188 = 52.3 → 52 whole sequences
    assert flat.set_index("seq_len").loc[3000, "whole_sequences"] == 52
    assert capacity_rows(spec.with_settings(vllm_version="0.26.0"), 12 * GiB, [3_000, 32_768]) == (
        {
            "seq_len": 3_000,
            "blocks": 9_830,
            "tokens": 156_861,
            "max_concurrency": 9_830 / 188,
            "whole_sequences": 52,
        },
        {
            "seq_len": 32_768,
            "blocks": 9_830,
            "tokens": 157_280,
            "max_concurrency": 9_830 / 2_048,
            "whole_sequences": 4,
        },
    )
    assert list(capacity_table(spec, 12 * GiB, []).columns) == list(CAPACITY_TABLE_COLUMNS)


def test_sequence_lengths_rule():
    # one rule: powers of two from the shortest below max_model_len, then max_model_len
    assert sequence_lengths(32_768) == [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert sequence_lengths(32_768, shortest=512)[0] == 512  # the bundle chart's start
    assert sequence_lengths(100) == [100]
    with pytest.raises(ValueError, match="positive"):
        sequence_lengths(0)
