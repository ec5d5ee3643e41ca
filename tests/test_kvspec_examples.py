"""Worked examples of kvspec's helpers (issue 23: moved from their docstrings, checked here)."""

import re

import pandas as pd
import pytest

from kvplan.kvspec import (
    KVSpecError,
    check_model_name,
    cross_check,
    cross_check_verdict,
    kv_spec,
    model_arch,
    model_base_name,
    parse_vllm_version,
)
from kvplan.kvspec.capacity import Capacity, FlatSpec, blocks_per_sequence, capacity_rows, sequence_lengths
from kvplan.kvspec.launch import (
    BlockSizeInputs,
    LoggedHostPool,
    SpecOptions,
    gpu_family,
    host_pool_bound,
    launch_settings,
    resolve_block_size,
)
from kvplan.kvspec.log_check import options_for_logs
from kvplan.kvspec.page import kv_dtype_bytes, kv_heads_per_rank, linear_state_bytes

#: Llama-3.1-70B's KV geometry: 80 layers, 8 KV heads of 128, bf16.
LLAMA_70B = {
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "torch_dtype": "bfloat16",
}


def test_launch_settings_and_block_size_of_0_33():  # issue 23
    # async scheduling is on by default from 0.26: 2 batches of 8,192 tokens in flight
    settings = launch_settings((0, 33, 0), SpecOptions(max_num_batched_tokens=8192), sliding=True)
    assert settings.in_flight_tokens == 16384
    assert settings.notes == (
        "async scheduling not in the logs: on, vLLM 0.26+ default (2 batches in flight)",
    )
    # MLA on Hopper with bf16 KV from 0.18: FLASH_ATTN_MLA's 16-token blocks
    inputs = BlockSizeInputs(None, "auto", (0, 33, 0), 1152, mla=True, gpu_name="NVIDIA H100")
    assert resolve_block_size(inputs)[0] == 16


def test_host_pool_bound_caps_concurrency():  # issue 23
    gpu = Capacity(
        kv_bytes=20 * 2**30,
        bytes_per_token=70_272,
        block_size=64,
        block_bytes=4_497_408,
        blocks=4774,
        tokens=305_536,
        max_model_len=131_072,
        max_concurrency=2.33,
    )
    capped = host_pool_bound(
        gpu, LoggedHostPool(tokens=262_144, max_model_len=131_072, available_bytes=20 * 2**30)
    )
    # 262,144 / 131,072 = 2.0 sequences, × (20 GiB − one 4,497,408-byte block) / 20 GiB = 1.99958;
    # tokens int(1.99958 × 131,072) = 262,089
    assert (capped.tokens, round(capped.max_concurrency, 4), capped.approximate) == (262089, 1.9996, True)


def test_check_model_name_takes_variants_and_refuses_other_models():  # issue 23
    arch = model_arch(
        {
            "_source": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "model_type": "llama",
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
        }
    )
    check_model_name(arch, "RedHatAI/Llama-3.1-8B-Instruct-FP8")  # a quantised variant: same architecture
    with pytest.raises(
        KVSpecError, match=re.escape("describes meta-llama/Llama-3.1-8B-Instruct, but the logs served")
    ):
        check_model_name(arch, "meta-llama/Llama-3.1-70B-Instruct")


def test_linear_state_bytes_of_a_gated_delta_net():  # issue 23
    arch = model_arch(
        {
            "num_hidden_layers": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "full_attention_interval": 4,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "torch_dtype": "bfloat16",
        }
    )
    # conv (2·16·128 + 32·128) × (4 − 1) = 24,576 + temporal 32 × 128 × 128 = 524,288 → × 2 bytes
    assert linear_state_bytes(arch, tp=1) == (24_576 + 524_288) * 2 == 1097728


def _ledger(tokens, concurrency=None) -> pd.DataFrame:
    frame = {"available_kv_bytes": [12 * 2**30], "kv_cache_tokens": [tokens], "max_model_len": [32768]}
    if concurrency is not None:
        frame["max_concurrency"] = [concurrency]
    return pd.DataFrame({**frame, "vllm_version": ["0.26.0"]})


def test_cross_check_predicts_the_logged_figures():  # issue 23
    # 12 GiB // 1.25 MiB blocks = 9,830 blocks; 0.26: int(9,830 / 2,048 × 32,768) = 157,280 tokens
    spec = kv_spec(LLAMA_70B, tp=4)
    rows = cross_check(_ledger(157280, 4.8), spec, available_tolerance_bytes=0)
    assert rows[["predicted_kv_cache_tokens", "agrees"]].to_dict("records") == [
        {"predicted_kv_cache_tokens": 157280, "agrees": True}
    ]


def test_cross_check_verdict_lines():  # issue 23
    spec = kv_spec(LLAMA_70B, tp=4)
    assert cross_check_verdict(cross_check(_ledger(157280), spec)) == (
        "model config agrees with the log: predicted 157,280 tokens, logged 157,280 "
        "(within 2-decimal GiB rounding)"
    )
    # twice the predicted tokens: a factor 2 points to the KV dtype
    assert cross_check_verdict(cross_check(_ledger(314560), spec, available_tolerance_bytes=0)) == (
        "model config DISAGREES with the log: predicted 157,280 tokens, logged 314,560; likely cause: KV dtype"
    )
    assert cross_check_verdict(cross_check(_ledger(None), spec)) == (
        "nothing to cross-check: the log printed no KV cache size, concurrency or block count"
    )


def test_options_for_logs_completes_and_refuses():  # issue 23
    key = {
        "vllm_version": "0.26.0",
        "block_size": 16,
        "tensor_parallel_size": 4,
        "kv_cache_dtype": "fp8",
        "pipeline_parallel_size": 1,
    }
    assert options_for_logs({"tp": 4, "block_size": None}, key) == {
        "tp": 4,
        "block_size": 16,
        "pp": 1,
        "dcp": 1,
        "kv_cache_dtype": "fp8",
        "vllm_version": "0.26.0",
    }
    with pytest.raises(
        KVSpecError, match="kv_cache_dtype 'auto' given, but the logs show kv_cache_dtype 'fp8'"
    ):
        options_for_logs({"kv_cache_dtype": "auto"}, {"kv_cache_dtype": "fp8"})


def test_flat_spec_blocks_tokens_and_sequences():  # issue 23
    spec = FlatSpec(256 * 1024)
    # a block is 16 tokens × 256 KiB = 4 MiB; 8,193 tokens take ceil(8,193 / 16) = 513 blocks
    assert (spec.block_bytes, spec.blocks_per_request(8193)) == (4_194_304, 513)
    assert (blocks_per_sequence(8192, 16), blocks_per_sequence(8193, 16)) == (512, 513)
    # 12 GiB / 4 MiB = 3,072 blocks × 16 = 49,152 tokens; 6 sequences of 512 blocks fill them
    assert spec.capacity(12 * 2**30, 8192).tokens == 49152
    assert spec.bytes_for_sequences(6, 8192) == 12 * 2**30
    rows = capacity_rows(spec, 12 * 2**30, [4096, 8192])
    assert [row["whole_sequences"] for row in rows] == [3072 // 256, 3072 // 512] == [12, 6]
    assert sequence_lengths(10000, shortest=2048, also=[3000]) == [2048, 3000, 4096, 8192, 10000]


def test_heads_dtypes_versions_names_and_gpus():  # issue 23
    # 8 KV heads over TP 4: 2 each; over TP 16 (or 1 head over 8) replicated: 1 each
    assert (kv_heads_per_rank(8, 64, 4), kv_heads_per_rank(8, 64, 16), kv_heads_per_rank(1, 32, 8)) == (
        2,
        1,
        1,
    )
    assert (kv_dtype_bytes("auto", 2), kv_dtype_bytes("fp8", 2), kv_dtype_bytes("float16", None)) == (2, 1, 2)
    versions = [parse_vllm_version(text) for text in ("0.6.6.post1", "v0.11.0", "0.19")]
    assert versions == [(0, 6, 6), (0, 11, 0), (0, 19, 0)]
    assert model_base_name("Qwen/Qwen3-235B-A22B-Instruct-2507") == "qwen3-235b-a22b"
    assert model_base_name("RedHatAI/Llama-3.1-70B-Instruct-FP8") == "llama-3.1-70b"
    names = ("NVIDIA H100 80GB HBM3", "NVIDIA B200", "NVIDIA A100-SXM4-80GB")
    assert [gpu_family(name) for name in names] == ["hopper", "blackwell", "other"]
    assert resolve_block_size(BlockSizeInputs(None, "auto", (0, 33, 0), 1024)) == (16, "")


def test_concurrency_and_tokens_by_release():  # issue 23
    spec = kv_spec(
        {
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "torch_dtype": "bfloat16",
        },
        tp=1,
    )
    old = spec.with_settings(vllm_version="0.8.5")
    # 0.9.1+: 3,072 blocks / ceil(8,193 / 16) = 513 blocks a request; before: 49,152 tokens / 8,193
    assert (spec.max_concurrency(3072, 8193), old.max_concurrency(3072, 8193)) == (3072 / 513, 49152 / 8193)
    # 0.21+: int(3,072 / 513 × 8,193) = 49,062; up to 0.20: 3,072 blocks × 16 tokens
    twenty = spec.with_settings(vllm_version="0.20.0")
    assert [s.kv_cache_tokens(3072, 8193) for s in (spec, twenty)] == [49062, 49152]
