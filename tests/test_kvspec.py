"""KV bytes per token per rank from model configs and layouts, and vLLM's reported figures.

Every expected number is derived by hand in the comment beside it.
"""

import json
import re

import pandas as pd
import pytest

from kvplan import DATA_DIR
from kvplan.cli import main
from kvplan.io.model_config import ModelConfigError, catalogue_names, read_model_config
from kvplan.kvspec import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    KVSpecError,
    check_model_name,
    cross_check,
    cross_check_verdict,
    kv_cache_groups,
    kv_spec,
    model_arch,
    options_for_logs,
    parse_vllm_version,
    pp_partition,
)
from kvplan.ledger import compatibility_key
from kvplan.room import read_vllm_log_rooms
from kvplan.units import parse_size
from tests.conftest import GiB, KiB, MiB

LLAMA_70B = read_model_config("llama-3.1-70b")  # 80 layers, 64 heads, 8 KV heads, head_dim 8192/64 = 128
DEEPSEEK_V3 = read_model_config("deepseek-v3")  # 61 MLA layers, kv_lora_rank 512, qk_rope_head_dim 64


# --- standard / grouped-query attention -------------------------------------------------------


@pytest.mark.parametrize(
    ("tp", "bytes_per_token"),
    [
        (1, 327_680),  # 2 (K,V) × 8 KV heads × 128 × 2 B = 4,096 B per layer × 80 layers
        (2, 163_840),  # 4 KV heads per rank: 2 × 4 × 128 × 2 = 2,048 × 80
        (4, 81_920),  # 2 KV heads per rank: 2 × 2 × 128 × 2 = 1,024 × 80 (the founding example)
        (8, 40_960),  # 1 KV head per rank: 2 × 1 × 128 × 2 = 512 × 80
        (16, 40_960),  # TP 16 > 8 KV heads: each head replicated, still 1 per rank = 512 × 80
    ],
)
def test_gqa_bytes_per_token_by_tp(tp, bytes_per_token):
    spec = kv_spec(LLAMA_70B, tp=tp)
    assert spec.bytes_per_token == bytes_per_token
    assert spec.block_size == 16
    assert spec.block_bytes == 16 * bytes_per_token
    assert spec.stages[0].attention_layers == 80
    assert not spec.approximate


def test_founding_scenario_block_bytes():
    # Llama-3.1-70B TP=4 bf16: 81,920 B per token per rank × 16 tokens = 1,310,720 B per block
    spec = kv_spec(LLAMA_70B, tp=4)
    assert spec.stages[0].page_bytes == 16 * 1_024
    assert spec.block_bytes == 1_310_720


def test_head_dim_from_config_wins_over_hidden_size():
    # Qwen3-32B: head_dim 128 although hidden 5120 / 64 heads = 80; 2 × 8 × 128 × 2 B × 64 layers
    assert kv_spec(read_model_config("qwen3-32b"), tp=1).bytes_per_token == 262_144


def test_multi_query_attention():
    # MQA: one KV head shared by all 32 query heads; replicated at TP 4 → 2 × 1 × 64 × 2 B × 24 layers
    config = {
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "multi_query": True,
        "hidden_size": 2048,
        "torch_dtype": "bfloat16",
    }
    assert kv_spec(config, tp=4).bytes_per_token == 2 * 1 * 64 * 2 * 24 == 6_144


def test_missing_kv_heads_defaults_only_for_llama_and_says_so():
    # LlamaConfig sets a missing num_key_value_heads to num_attention_heads (16): 2 × 16 × 64 × 2 B ×
    # 12 layers = 49,152 B, marked approximate with a note naming the field
    config = {
        "model_type": "llama",
        "num_hidden_layers": 12,
        "num_attention_heads": 16,
        "hidden_size": 1024,
        "torch_dtype": "bfloat16",
    }
    spec = kv_spec(config, tp=1)
    assert spec.bytes_per_token == 49_152
    assert spec.approximate and "num_key_value_heads" in spec.approximate_reason


def test_missing_kv_heads_refused_where_the_default_differs():
    # Gemma 3 27B without num_key_value_heads used to be sized as 32 KV heads: at TP 2, 2 × 16 × 128 × 2 B
    # = 8,192 B per layer × 10 layers per group = 81,920 B, double the real 16 KV heads' 40,960 B
    # (2 × 8 × 128 × 2 = 4,096 × 10). Gemma3TextConfig's default is 4, neither: refuse, naming the field.
    gemma = read_model_config("gemma-3-27b")
    assert kv_spec(gemma, tp=2, max_num_batched_tokens=8192).bytes_per_token == 40_960
    text = {k: v for k, v in gemma["text_config"].items() if k != "num_key_value_heads"}
    with pytest.raises(KVSpecError, match="missing field 'num_key_value_heads'"):
        kv_spec({**gemma, "text_config": text}, tp=2)


def test_missing_dtype_refused_unless_the_kv_dtype_or_served_dtype_fixes_it():
    # Llama-3.1-70B without torch_dtype: 'auto' cannot be sized; fp8 fixes 1 B (2 × 2 × 128 × 1 × 80
    # = 40,960 B at TP 4), and the logs' served dtype=torch.bfloat16 fixes 2 B (81,920 B)
    config = {k: v for k, v in LLAMA_70B.items() if k != "torch_dtype"}
    with pytest.raises(KVSpecError, match="missing field 'torch_dtype'"):
        kv_spec(config, tp=4)
    assert kv_spec(config, tp=4, kv_cache_dtype="fp8").bytes_per_token == 40_960
    assert kv_spec(config, tp=4, dtype="torch.bfloat16").bytes_per_token == 81_920
    # a float32 launch (--dtype float32) stores 4 B per value: 2 × 2 × 128 × 4 × 80 = 163,840 B
    assert kv_spec(LLAMA_70B, tp=4, dtype="torch.float32").bytes_per_token == 163_840


def test_missing_head_dim_refused_where_the_class_has_its_own():
    # Qwen3-32B: hidden 5,120 / 64 heads = 80, but Qwen3Config's head_dim is 128: never derive it there
    qwen = {k: v for k, v in read_model_config("qwen3-32b").items() if k != "head_dim"}
    with pytest.raises(KVSpecError, match="missing field 'head_dim'"):
        kv_spec(qwen, tp=1)


def test_fp8_halves_bf16():
    # Qwen3-8B: 36 layers × 2 × 8 KV heads × 128 × 2 B = 147,456 B; fp8 stores 1 B per value → 73,728
    qwen = read_model_config("qwen3-8b")
    bf16 = kv_spec(qwen, tp=1, kv_cache_dtype="auto").bytes_per_token
    fp8 = kv_spec(qwen, tp=1, kv_cache_dtype="fp8").bytes_per_token
    assert (bf16, fp8) == (147_456, 73_728)
    assert kv_spec(qwen, tp=1, kv_cache_dtype="fp8_e5m2").bytes_per_token == fp8


# --- nested vision-language configs ------------------------------------------------------------


def test_nested_text_config():
    # A LLaVA-style config around Llama-3.1-8B: text_config holds 32 layers, 8 KV heads, 4096/32 = 128
    # → 2 × 8 × 128 × 2 B × 32 layers = 131,072 B; the vision tower is ignored; dtype from the outer config
    config = {
        "architectures": ["LlavaForConditionalGeneration"],
        "torch_dtype": "float16",
        "text_config": {
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 4096,
        },
        "vision_config": {"num_hidden_layers": 24, "num_attention_heads": 16, "hidden_size": 1024},
    }
    assert kv_spec(config, tp=1).bytes_per_token == 131_072


def test_nested_llm_config():
    # InternVL-style llm_config: 28 layers × 2 × 4 KV heads × 128 × 2 B = 57,344 B at TP 1; TP 2 halves
    config = {
        "llm_config": {
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "torch_dtype": "bfloat16",
        },
        "vision_config": {"num_hidden_layers": 24},
    }
    assert kv_spec(config, tp=1).bytes_per_token == 57_344
    assert kv_spec(config, tp=2).bytes_per_token == 28_672


# --- MLA ---------------------------------------------------------------------------------------


def test_mla_bf16_same_on_every_tp_rank():
    # DeepSeek-V3: one latent of 512 + 64 = 576 values × 2 B = 1,152 B per layer, no factor 2,
    # not split by TP → 1,152 × 61 = 70,272 B per token on every rank, at TP 1 and TP 8 alike
    for tp in (1, 8):
        spec = kv_spec(DEEPSEEK_V3, tp=tp, vllm_version="0.17.0")
        assert spec.bytes_per_token_per_layer == 1_152
        assert spec.bytes_per_token == 70_272
    # MLA backends force 64-token blocks up to 0.17: 64 × 70,272 = 4,497,408 B
    assert spec.block_size == 64
    assert spec.block_bytes == 4_497_408


def test_mla_fp8_ds_mla():
    # fp8_ds_mla: 656 B per token per layer (512 fp8 + 4 × 4 B scales + 64 × 2 B rope); DeepSeek-V3.2's
    # indexer keys beside it in the same page (deepseek_v2.py DeepseekV32IndexerCache: head_dim 128 +
    # 128 // 128 × 4 = 132 B, uint8; UniformTypeKVCacheSpecs sums the pages): 788 × 61 = 48,068 B;
    # only DeepSeek-V3.2-style sparse models (index_topk) have a backend that serves it
    spec = kv_spec({**DEEPSEEK_V3, "index_topk": 2048}, tp=8, kv_cache_dtype="fp8_ds_mla")
    assert spec.bytes_per_token_per_layer == 656 + 132
    assert spec.bytes_per_token == 48_068
    assert spec.block_size == 64
    with pytest.raises(KVSpecError, match="index_topk"):  # DeepSeek-V3 itself: no sparse indexer
        kv_spec(DEEPSEEK_V3, tp=8, kv_cache_dtype="fp8_ds_mla")


def test_mla_block_size_forced_before_0_20():
    # vLLM 0.8–0.17 force 64-token blocks for FlashMLA even when --block-size 16 is given; 0.20+ keep it
    assert kv_spec(DEEPSEEK_V3, tp=8, block_size=16, vllm_version="0.11.0").block_size == 64
    assert "overridden" in kv_spec(DEEPSEEK_V3, tp=8, block_size=16, vllm_version="0.11.0").block_size_note
    assert kv_spec(DEEPSEEK_V3, tp=8, block_size=16, vllm_version="0.26.0").block_size == 16


def test_fp8_ds_mla_needs_mla():
    with pytest.raises(KVSpecError, match="fp8_ds_mla"):
        kv_spec(LLAMA_70B, tp=4, kv_cache_dtype="fp8_ds_mla")


# --- pipeline parallel -------------------------------------------------------------------------


def test_pp_partition_like_vllm():
    # 80 = 3 × 26 + 2: the two extra layers go to the stages before the last → 27, 27, 26
    assert pp_partition(80, 3) == [27, 27, 26]
    # 61 = 3 × 20 + 1: one extra layer, to the second-to-last stage → 20, 21, 20
    assert pp_partition(61, 3) == [20, 21, 20]
    # 62 = 4 × 15 + 2 → the 2nd and 3rd stages get one more: 15, 16, 16, 15
    assert pp_partition(62, 4) == [15, 16, 16, 15]
    assert pp_partition(80, 2, [30, 50]) == [30, 50]  # VLLM_PP_LAYER_PARTITION


def test_pp3_uneven_stages():
    # Llama-70B TP 4 PP 3: stages of 27, 27, 26 layers × 1,024 B = 27,648, 27,648, 26,624 B per token
    spec = kv_spec(LLAMA_70B, tp=4, pp=3)
    assert [s.bytes_per_token for s in spec.stages] == [27_648, 27_648, 26_624]
    assert [(s.first_layer, s.end_layer) for s in spec.stages] == [(0, 27), (27, 54), (54, 80)]
    # the 27-layer stages limit: 12 GiB / (16 × 27,648 = 442,368 B) = 29,127.1 → 29,127 blocks for all
    assert spec.limiting_stage.pp_rank == 0
    assert spec.num_blocks(12 * GiB) == 29_127
    cap = spec.capacity(12 * GiB, 32768)
    assert [s["blocks"] for s in cap.stages] == [29_127, 29_127, 30_247]  # 12 GiB / 425,984 = 30,247.4


def test_pp_larger_than_layers_is_refused():
    with pytest.raises(KVSpecError, match="layer per stage"):
        kv_spec(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "torch_dtype": "bfloat16",
            },
            tp=1,
            pp=3,
        )


# --- decode context parallel -------------------------------------------------------------------


def test_dcp_shards_tokens():
    # DeepSeek-V3 TP 8 DCP 8: each rank stores 1/8 of a sequence's tokens; blocks are unchanged
    # 12 GiB / 4,497,408 B = 2,864.8 → 2,864 blocks on every rank
    # (--block-size 64: from 0.18 the MLA backend's block size, FlashMLA's 64 with fp8 KV, is kept)
    plain = kv_spec(DEEPSEEK_V3, tp=8, vllm_version="0.20.0", block_size=64)
    dcp = kv_spec(DEEPSEEK_V3, tp=8, dcp=8, vllm_version="0.20.0", block_size=64)
    assert plain.num_blocks(12 * GiB) == dcp.num_blocks(12 * GiB) == 2_864
    # 0.11–0.20 multiply the token count by the DCP size: 2,864 × 64 × 8 = 1,466,368
    assert dcp.kv_cache_tokens(2_864, 32768) == 1_466_368
    # a 32,768-token request needs ceil(ceil(32768 / 8) / 64) = 64 blocks instead of 512
    assert dcp.blocks_per_request(32768) == 64
    assert dcp.max_concurrency(2_864, 32768) == 2_864 / 64
    # 0.21+: int(concurrency × L) = int(44.75 × 32768) = 1,466,368
    assert dcp.with_settings(vllm_version="0.21.0").kv_cache_tokens(2_864, 32768) == 1_466_368


def test_dcp_must_divide_tp():
    with pytest.raises(KVSpecError, match="dcp 3 does not divide tp 8"):
        kv_spec(DEEPSEEK_V3, tp=8, dcp=3)


# --- sliding-window and hybrid models ----------------------------------------------------------


def test_gemma3_groups_and_blocks():
    # Gemma 3 27B: 62 layers, every 6th global → 10 full + 52 sliding; group size = 10 (52 ≥ 1.5 × 10)
    # → 1 full group + ceil(52 / 10) = 6 sliding groups, 7 groups. vLLM splits round-robin
    # (layers[i::6]): 52 = 4 × 9 + 2 × 8 → 9, 9, 9, 9, 8, 8, and sizes memory by the largest group (10)
    # (vLLM 0.25: a window group keeps W − 1 + max_num_batched_tokens; 0.26+ doubles the in-flight term)
    spec = kv_spec(read_model_config("gemma-3-27b"), tp=1, max_num_batched_tokens=8192, vllm_version="0.25.0")
    assert [len(layers) for kind, layers in spec.groups if kind == FULL_ATTENTION] == [10]
    assert [len(layers) for kind, layers in spec.groups if kind == SLIDING_ATTENTION] == [9, 9, 9, 9, 8, 8]
    # 2 × 16 KV heads × 128 × 2 B = 8,192 B per token per layer; a block = 16 × 8,192 × 10 layers
    assert spec.bytes_per_token_per_layer == 8_192
    assert spec.block_bytes == 1_310_720
    # per 32,768-token request: 2,048 blocks (full) + 6 × (ceil(min(1023 + 8192, 32768) / 16) + 1 = 577)
    assert spec.blocks_per_request(32768) == 2_048 + 6 * 577
    assert not spec.approximate


def test_sliding_window_without_batched_tokens_is_approximate():
    spec = kv_spec(read_model_config("gemma-3-27b"), tp=1)
    assert spec.approximate
    assert "max_num_batched_tokens" in spec.approximate_reason


def test_gpt_oss_alternating_layers():
    # gpt-oss-120b: 18 sliding (128 tokens) + 18 full → two groups of 18 layers
    # 2 × 8 KV heads × 64 × 2 B = 2,048 B per token per layer; block = 16 × 2,048 × 18 = 589,824 B
    spec = kv_spec(
        read_model_config("gpt-oss-120b"), tp=1, max_num_batched_tokens=2048, vllm_version="0.25.0"
    )
    assert [(kind, len(layers)) for kind, layers in spec.groups] == [
        (SLIDING_ATTENTION, 18),
        (FULL_ATTENTION, 18),
    ]
    assert spec.block_bytes == 589_824
    # 8,192-token request: 512 (full) + ceil(min(127 + 2048, 8192) / 16) + 1 = 136 + 1 → 649 blocks
    assert spec.blocks_per_request(8192) == 649


def test_mistral_window_on_every_layer_is_marked():
    # Mistral-7B v0.1 style: sliding_window 4096 and no per-layer list → every layer sliding, one group,
    # and a note that releases reading only layer_types treat the layers as full attention
    config = {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
    }
    spec = kv_spec(config, tp=1, max_num_batched_tokens=2048, vllm_version="0.25.0")
    assert spec.groups == ((SLIDING_ATTENTION, tuple(range(32))),)
    assert spec.approximate and "every layer" in spec.approximate_reason
    # 32,768-token request: ceil(min(4095 + 2048, 32768) / 16) + 1 = 384 + 1 = 385 blocks
    assert spec.blocks_per_request(32768) == 385


def test_qwen2_style_window_flag_off_means_full_attention():
    config = {
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "sliding_window": 131072,
        "use_sliding_window": False,
        "torch_dtype": "bfloat16",
    }
    assert kv_spec(config, tp=1).groups == ((FULL_ATTENTION, tuple(range(28))),)


def test_hybrid_group_size_rule():
    # 13 full + 12 sliding: 13 < 1.5 × 12 → group size 13, one group per kind (sliding padded)
    assert [len(g) for _, g in kv_cache_groups([FULL_ATTENTION] * 13 + [SLIDING_ATTENTION] * 12)] == [13, 12]


def test_qwen3_next_hybrid_block_size():
    # Qwen3-Next: 12 full-attention layers (every 4th), 36 gated-delta-net layers.
    # Linear state per layer at TP 1: conv (2 × 16 × 128 + 32 × 128 = 8,192) × 3 + temporal 32 × 128 × 128
    # = 24,576 + 524,288 = 548,864 values × 2 B = 1,097,728 B.
    # Attention: 2 × 2 KV heads × 256 × 2 B = 2,048 B per token per layer;
    # block size = 16 × ceil(1,097,728 / (16 × 2,048)) = 16 × ceil(33.5) = 544 tokens (vLLM 0.25: one
    # state block per request; 0.26+ "align" mode and 0.33's 64-alignment: tests/test_kvspec_v033.py).
    spec = kv_spec(read_model_config("qwen3-next-80b-a3b"), tp=1, vllm_version="0.25.0")
    assert spec.block_size == 544
    assert spec.stages[0].page_bytes == 544 * 2_048
    # groups of 12: 1 full + 3 linear → block = 1,114,112 × 12 = 13,369,344 B
    assert sorted(len(layers) for _, layers in spec.groups) == [12, 12, 12, 12]
    assert spec.block_bytes == 13_369_344
    # a request: ceil(32768 / 544) = 61 blocks (full) + 1 state block per linear group × 3 = 64
    assert spec.blocks_per_request(32768) == 64
    assert spec.approximate and "Mamba" in spec.approximate_reason
    assert model_arch(read_model_config("qwen3-next-80b-a3b")).layer_types[:4] == (
        LINEAR_ATTENTION,
        LINEAR_ATTENTION,
        LINEAR_ATTENTION,
        FULL_ATTENTION,
    )


def test_jamba_layers():
    # Jamba: attention every 8th layer from offset 4 → 4 of 32; Mamba state per layer at TP 1:
    # d_inner 2 × 4096 = 8,192 × (d_conv − 1 + d_state = 3 + 16) × 2 B = 311,296 B; attention
    # 2 × 8 × 128 × 2 = 4,096 B per token per layer → block size 16 × ceil(311,296 / 65,536 = 4.75) = 80
    config = {
        "model_type": "jamba",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "torch_dtype": "bfloat16",
    }
    spec = kv_spec(config, tp=1)
    assert spec.stages[0].attention_layers == 4
    assert spec.block_size == 80


# --- releases: tokens and concurrency ----------------------------------------------------------


def test_tokens_and_concurrency_by_release():
    # Llama-70B TP 4, 9,830 blocks of 16 tokens, L = 32,000 (not a multiple of 16: 2,000 blocks each)
    spec = kv_spec(LLAMA_70B, tp=4)
    old, mid, new = (spec.with_settings(vllm_version=v) for v in ("0.8.5", "0.20.0", "0.21.0"))
    # ≤ 0.9.0: concurrency = blocks × 16 / L = 157,280 / 32,000 = 4.915; tokens = 157,280
    assert old.max_concurrency(9_830, 32_000) == pytest.approx(4.915)
    assert old.kv_cache_tokens(9_830, 32_000) == 157_280
    # 0.9.1+: 9,830 / ceil(32,000 / 16) = 9,830 / 2,000 = 4.915; 0.20 tokens = 9,830 × 16 = 157,280
    assert mid.max_concurrency(9_830, 32_000) == pytest.approx(4.915)
    assert mid.kv_cache_tokens(9_830, 32_000) == 157_280
    # 0.21+: int(4.915 × 32,000) = 157,280 here as well; with L = 32,001 they part:
    # 9,830 / ceil(32,001 / 16) = 9,830 / 2,001 → × 32,001 = 157,206.8… → 157,206
    assert new.kv_cache_tokens(9_830, 32_001) == 157_206
    assert mid.kv_cache_tokens(9_830, 32_001) == 157_280


# --- errors ------------------------------------------------------------------------------------


def test_missing_field_is_named():
    with pytest.raises(KVSpecError, match="'num_hidden_layers'"):
        kv_spec({"num_attention_heads": 8, "head_dim": 64}, tp=1)
    with pytest.raises(KVSpecError, match="'hidden_size'"):  # no head_dim and nothing to derive it from
        kv_spec({"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8}, tp=1)
    with pytest.raises(KVSpecError, match="'qk_rope_head_dim'"):
        kv_spec(
            {"num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "kv_lora_rank": 512},
            tp=1,
        )


def test_tp_not_dividing_attention_heads_is_refused():
    with pytest.raises(KVSpecError, match="tp 3 does not divide num_attention_heads 64"):
        kv_spec(LLAMA_70B, tp=3)
    with pytest.raises(KVSpecError, match="tp 4 does not divide num_key_value_heads 6"):
        kv_spec(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 24,
                "num_key_value_heads": 6,
                "head_dim": 64,
                "torch_dtype": "bfloat16",
            },
            tp=4,
        )
    with pytest.raises(KVSpecError, match="num_key_value_heads 3 does not divide tp 4"):
        kv_spec(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 24,
                "num_key_value_heads": 3,
                "head_dim": 64,
                "torch_dtype": "bfloat16",
            },
            tp=4,
        )


def test_unknown_kv_dtype_and_layer_type():
    with pytest.raises(KVSpecError, match="kv_cache_dtype 'int3'"):
        kv_spec(LLAMA_70B, tp=4, kv_cache_dtype="int3")
    with pytest.raises(KVSpecError, match="chunked_attention"):
        kv_spec(
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "layer_types": ["chunked_attention", "full_attention"],
            },
            tp=1,
        )


# --- cross-check against logged figures --------------------------------------------------------


def _ledger(**columns):
    return pd.DataFrame({key: [value] for key, value in columns.items()})


def test_cross_check_agrees_within_gib_rounding():
    # 0.26.0, TP 4, 32,768 tokens. Available "12.34 GiB" (2 decimals): ±0.005 GiB = ±5,368,709 B.
    # 12.34 GiB = 13,249,974,108 B / 1,310,720 = 10,108.9 → 10,108 blocks; ± 0.005 GiB → 10,104…10,113
    # logged 10,110 blocks × 16 = 161,760 tokens, 10,110 / 2,048 = 4.94x: inside the range
    spec = kv_spec(LLAMA_70B, tp=4)
    ledger = _ledger(
        available_kv_bytes=13_249_974_108,
        kv_cache_tokens=161_760,
        max_concurrency=4.94,
        max_model_len=32768,
        block_size=16,
        vllm_version="0.26.0",
    )
    row = cross_check(ledger, spec).iloc[0]
    assert row["predicted_num_gpu_blocks"] == 10_108
    assert row["tolerance_bytes"] == GiB // 200
    assert bool(row["agrees"]) is True


def test_cross_check_exact_bytes_flags_one_block():
    # the same row with exact bytes: 10,108 blocks → 161,728 tokens; the logged 161,760 is 2 blocks off
    spec = kv_spec(LLAMA_70B, tp=4)
    ledger = _ledger(
        manual_kv_bytes=13_249_974_108, kv_cache_tokens=161_760, max_model_len=32768, vllm_version="0.26.0"
    )
    row = cross_check(ledger, spec).iloc[0]
    assert row["tolerance_bytes"] == 0
    assert row["predicted_kv_cache_tokens"] == 161_728
    assert bool(row["agrees"]) is False


def test_cross_check_names_kv_dtype_when_off_by_two():
    # the log ran fp8 (40,960 B per token) but the planner assumed bf16 (81,920): twice the tokens
    # 12 GiB / (16 × 40,960) = 19,660 blocks → 314,560 tokens logged, 157,280 predicted
    spec = kv_spec(LLAMA_70B, tp=4)
    ledger = _ledger(
        available_kv_bytes=12 * GiB,
        kv_cache_tokens=314_560,
        max_concurrency=9.6,
        max_model_len=32768,
        vllm_version="0.26.0",
    )
    row = cross_check(ledger, spec).iloc[0]
    assert bool(row["agrees"]) is False
    assert "KV dtype" in row["reason"]


def test_cross_check_per_boot_uses_the_weakest_rank():
    # 0.26 logs the engine figures once, from the minimum over ranks: ranks with 12 and 10 GiB
    # → 10 GiB / 1,310,720 = 8,192 blocks = 131,072 tokens = 4.0x at 32,768
    spec = kv_spec(LLAMA_70B, tp=4)
    ledger = pd.DataFrame(
        {
            "source": ["a.log", "a.log"],
            "boot": [0, 0],
            "rank": [0, 1],
            "manual_kv_bytes": [12 * GiB, 10 * GiB],
            "kv_cache_tokens": [131_072, None],
            "max_concurrency": [4.0, None],
            "max_model_len": [32768, 32768],
            "vllm_version": ["0.26.0", "0.26.0"],
        }
    )
    result = cross_check(ledger, spec)
    assert len(result) == 1
    assert result.iloc[0]["predicted_num_gpu_blocks"] == 8_192
    assert bool(result.iloc[0]["agrees"]) is True


def test_cross_check_v0_blocks_and_concurrency():
    # V0 0.6.6: "# GPU blocks" and concurrency = blocks × 16 / L. Llama-3.1-8B TP 2: 32 layers ×
    # 2 × 4 × 128 × 2 B = 65,536 B per token → 1 MiB per block; 20 GiB exact → 20,480 blocks;
    # 20,480 × 16 / 8,192 = 40.0x
    spec = kv_spec(read_model_config("llama-3.1-8b"), tp=2)
    ledger = _ledger(
        manual_kv_bytes=20 * GiB,
        num_gpu_blocks=20_480,
        max_concurrency=40.0,
        max_model_len=8192,
        vllm_version="0.6.6.post1",
    )
    row = cross_check(ledger, spec).iloc[0]
    assert spec.block_bytes == 1 * MiB
    assert bool(row["agrees"]) is True


def test_cross_check_without_logged_figures():
    spec = kv_spec(LLAMA_70B, tp=4)
    row = cross_check(_ledger(available_kv_bytes=12 * GiB, max_model_len=32768), spec).iloc[0]
    assert row["agrees"] is None
    assert "printed no" in row["reason"]


# --- the catalogue and the loader --------------------------------------------------------------


def test_catalogue_files_name_model_and_revision_and_load():
    names = catalogue_names()
    assert len(names) >= 12
    for name in names:
        config = read_model_config(name)
        assert config["_source"]["model"] and config["_source"]["revision"], name
        assert kv_spec(config, tp=1, gpu_name="NVIDIA H100 80GB HBM3").bytes_per_token > 0, name


@pytest.mark.parametrize(
    ("name", "tp", "bytes_per_token"),
    [
        ("llama-3.1-8b", 1, 131_072),  # 32 layers × 2 × 8 × 128 × 2 B
        ("qwen3-14b", 2, 81_920),  # 40 layers × 2 × 4 KV heads per rank × 128 × 2 B
        ("qwen3-235b-a22b", 8, 48_128),  # 94 layers × 2 × 1 (4 KV heads replicated over 8) × 128 × 2 B
        ("mistral-7b", 1, 131_072),  # v0.3, no window: 32 × 2 × 8 × 128 × 2 B
        ("mistral-small-24b", 4, 40_960),  # 40 layers × 2 × 2 × 128 × 2 B
    ],
)
def test_catalogue_numbers(name, tp, bytes_per_token):
    assert kv_spec(read_model_config(name), tp=tp).bytes_per_token == bytes_per_token


def test_loader_errors_name_the_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "num_hidden_layers": 32,\n  "num_attention_heads": \n}\n')
    with pytest.raises(ModelConfigError, match=r"config\.json, line 4, column 1"):
        read_model_config(bad)
    with pytest.raises(ModelConfigError, match=r"catalogue: .*llama-3\.1-70b"):
        read_model_config("no-such-model")


# --- command line ------------------------------------------------------------------------------


def _run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_capacity_with_model(capsys):
    # Llama-70B TP 4 at 0.26.0: 12 GiB / 1,310,720 = 9,830 blocks; 9,830 / 2,048 = 4.7998x;
    # tokens = int(4.7998… × 32,768) = 157,280
    data = _run_json(
        capsys,
        "capacity",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "4",
        "--kv-bytes",
        "12GiB",
        "--max-model-len",
        "32768",
        "--vllm-version",
        "0.26.0",
        "--json",
    )
    assert {k: data[k] for k in ("bytes_per_token", "block_bytes", "blocks", "tokens", "approximate")} == {
        "bytes_per_token": 81_920,
        "block_bytes": 1_310_720,
        "blocks": 9_830,
        "tokens": 157_280,
        "approximate": False,
    }
    assert data["max_concurrency"] == pytest.approx(9_830 / 2_048)


def test_capacity_with_pp_lists_stages(capsys):
    data = _run_json(
        capsys,
        "capacity",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "4",
        "--pp",
        "3",
        "--kv-bytes",
        "12GiB",
        "--max-model-len",
        "32768",
        "--json",
    )
    assert [s["bytes_per_token"] for s in data["stages"]] == [27_648, 27_648, 26_624]
    assert data["blocks"] == 29_127


def test_capacity_config_path_and_old_form(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "hidden_size": 4096,
                "torch_dtype": "bfloat16",
            }
        )
    )
    data = _run_json(
        capsys,
        "capacity",
        "--model",
        str(path),
        "--tp",
        "1",
        "--kv-bytes",
        "2MiB",
        "--max-model-len",
        "16",
        "--json",
    )
    assert data["bytes_per_token"] == 128 * KiB  # 32 × 2 × 8 × 128 × 2 B
    old = _run_json(
        capsys,
        "capacity",
        "--kv-bytes",
        "12GiB",
        "--bytes-per-token",
        "256KiB",
        "--max-model-len",
        "8192",
        "--json",
    )
    assert old["tokens"] == 49_152


def test_capacity_model_errors(capsys):
    assert main(["capacity", "--model", "llama-3.1-70b", "--kv-bytes", "12GiB", "--max-model-len", "8"]) == 2
    assert "--tp" in capsys.readouterr().err
    assert main(["capacity", "--kv-bytes", "12GiB", "--max-model-len", "8"]) == 2
    assert "exactly one of" in capsys.readouterr().err
    assert (
        main(
            [
                "capacity",
                "--model",
                "llama-3.1-70b",
                "--tp",
                "3",
                "--kv-bytes",
                "12GiB",
                "--max-model-len",
                "8",
            ]
        )
        == 2
    )
    assert "num_attention_heads" in capsys.readouterr().err


# --- the bundled sample boots: predicted against what the logs printed ---------------------------
#
# The planner's path: kvplan.io.read_vllm_log → ledger → compatibility key → kv_spec (layout, KV dtype,
# release and block size from the key, model from the catalogue by the logged name) → cross_check.
# The logged "GPU KV cache size", "Maximum concurrency" and GPU blocks must lie where vLLM's
# arithmetic puts them: exactly when the log gives the available bytes exactly (a manual
# --kv-cache-memory-bytes value, or 0.10.2's "in use is N bytes"), within the ±0.005 GiB of a
# 2-decimal GiB figure otherwise.

BOOTS_DIR = DATA_DIR / "boots"


def _catalogue_entry(model: str) -> dict:
    for name in catalogue_names():
        config = read_model_config(name)
        if config["_source"]["model"] == model:
            return config
    raise AssertionError(f"{model} is not in the catalogue (kvplan/models): add its config to check it")


@pytest.mark.parametrize("log", sorted(BOOTS_DIR.glob("*/*.log")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sample_boot_figures_match_the_log(log):
    ledger, _metadata = read_vllm_log_rooms(log)
    printed = ledger[["kv_cache_tokens", "max_concurrency", "num_gpu_blocks"]].notna().any(axis=None)
    if not printed:
        pytest.skip(f"{log}: no KV cache size, concurrency or block line (not a sizing boot)")
    key = compatibility_key(ledger)
    spec = kv_spec(_catalogue_entry(key["model"]), **options_for_logs({}, key))
    result = cross_check(ledger, spec)
    checked = result.dropna(subset=["agrees"])
    assert len(checked), result.to_string()
    assert checked["agrees"].all(), checked[
        ["rank", "predicted_kv_cache_tokens", "logged_kv_cache_tokens", "reason"]
    ].to_string()
    assert cross_check_verdict(result).startswith("model config agrees with the log")
    if ledger["manual_kv_bytes"].notna().any() or log.parent.name == "v0.10.2":
        # exact available bytes: no tolerance, and the predicted tokens are the logged tokens, to the token
        assert (checked["tolerance_bytes"] == 0).all()
        logged_tokens = checked["logged_kv_cache_tokens"].dropna()
        assert (checked.loc[logged_tokens.index, "predicted_kv_cache_tokens"] == logged_tokens).all()
    else:  # 2-decimal GiB figures: ±0.005 GiB = ±5,368,709 B
        assert (checked["tolerance_bytes"] == GiB // 200).all()


def test_four_rank_boot_by_hand():
    # Scenario A (0.26.0, Llama-3.1-70B TP 4, 32,768 tokens): the engine logs from the weakest rank;
    # the ranks' "in use" figures are 11.91, 11.91, 11.89, 11.9 GiB (2 decimals) → min 11.89 GiB
    # = 11.89 × 1,073,741,824 = 12,766,790,287.4 → 12,766,790,287 B (parse_size) ± 5,368,709 B
    # → 9,736.2 … 9,744.4 blocks of 1,310,720 B. The log's
    # 155,856 tokens = 9,741 blocks × 16 and 9,741 / 2,048 = 4.756 → "4.76x" lie in that range
    # (within the rounding of a 2-decimal GiB figure, not exact).
    folder = BOOTS_DIR / "four-rank"
    if not folder.is_dir():
        pytest.skip("data/boots/four-rank not present")
    text = (folder / "boot.log").read_text()
    assert "GPU KV cache size: 155,856 tokens" in text
    spec = kv_spec(LLAMA_70B, tp=4, vllm_version="0.26.0")
    assert parse_size("11.89GiB") == 12_766_790_287
    low = spec.num_blocks(parse_size("11.89GiB") - GiB // 200)
    high = spec.num_blocks(parse_size("11.89GiB") + GiB // 200)
    assert (low, high) == (9_736, 9_744)
    assert spec.kv_cache_tokens(9_741, 32768) == 155_856
    assert round(spec.max_concurrency(9_741, 32768), 2) == 4.76


def test_layers_kvplan_cannot_size_are_refused_or_marked():
    # chunked local attention (Llama 4) must not pass as full attention
    with pytest.raises(KVSpecError, match="attention_chunk_size"):
        kv_spec(
            {
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "attention_chunk_size": 8192,
            },
            tp=1,
        )
    # DeepSeek-V3.2's indexer cache is counted (132 B a token and layer beside the bf16 latent's 1,152):
    # before, it was left out and the spec over-predicted by 11 %
    sparse = kv_spec({**DEEPSEEK_V3, "index_topk": 2048}, tp=8, gpu_name="NVIDIA H100 80GB HBM3")
    assert (sparse.bytes_per_token_per_layer, sparse.approximate) == (1_152 + 132, False)
    assert (
        sparse.capacity(20 * GiB, 131_072).tokens
        < kv_spec(DEEPSEEK_V3, tp=8, block_size=64).capacity(20 * GiB, 131_072).tokens
    )


def test_capacity_sliding_window_exact_with_batched_tokens(capsys):
    # gpt-oss-120b TP 1 with --max-num-batched-tokens 2048: 589,824 B blocks; 1 GiB → 1,820 blocks
    # (1,073,741,824 / 589,824 = 1,820.4); on vLLM 0.33 (the default release) async scheduling keeps
    # 2 × 2,048 tokens in flight, so an 8,192-token request needs 512 (full) + ceil(min(127 + 4,096, 8,192)
    # / 16) + 1 = 264 + 1 → 777 blocks: 1,820 / 777 = 2.34x (0.25 and older: 649 blocks, 2.80x)
    data = _run_json(
        capsys,
        "capacity",
        "--model",
        "gpt-oss-120b",
        "--tp",
        "1",
        "--kv-bytes",
        "1GiB",
        "--max-model-len",
        "8192",
        "--max-num-batched-tokens",
        "2048",
        "--json",
    )
    assert (data["blocks"], data["approximate"]) == (1_820, False)
    assert data["max_concurrency"] == pytest.approx(1_820 / 777)
    # without it the same command is marked approximate
    data = _run_json(
        capsys,
        "capacity",
        "--model",
        "gpt-oss-120b",
        "--tp",
        "1",
        "--kv-bytes",
        "1GiB",
        "--max-model-len",
        "8192",
        "--json",
    )
    assert data["approximate"] is True and "max_num_batched_tokens" in data["approximate_reason"]


def test_cross_check_per_worker_releases_check_each_row():
    # vLLM 0.9.0–0.11.0 log one "GPU KV cache size" per worker, from that worker's own memory.
    # Llama-3.1-8B TP 2 (1 MiB blocks): 20 GiB → 20,480 blocks = 327,680 tokens = 40.0x at 8,192;
    # 19 GiB → 19,456 blocks = 311,296 tokens = 38.0x. Each row is checked on its own.
    spec = kv_spec(read_model_config("llama-3.1-8b"), tp=2)
    ledger = pd.DataFrame(
        {
            "source": ["e.log"] * 2,
            "boot": [0, 0],
            "rank": [0, 1],
            "available_kv_bytes": [20 * GiB, 19 * GiB],
            "kv_cache_tokens": [327_680, 311_296],
            "max_concurrency": [40.0, 38.0],
            "max_model_len": [8192, 8192],
            "vllm_version": ["0.10.2", "0.10.2"],
        }
    )
    result = cross_check(ledger, spec, available_tolerance_bytes=0)
    assert result["predicted_kv_cache_tokens"].tolist() == [327_680, 311_296]
    assert result["agrees"].tolist() == [True, True]


def test_drift_canary_boot_exact():
    # Scenario C canary (0.26.0, Qwen3-14B TP 4, manual --kv-cache-memory-bytes 32,212,254,720 = 30 GiB,
    # exact bytes): 40 layers × 2 × 2 KV heads per rank × 128 × 2 B = 40,960 B per token, 655,360 B per
    # block → 30 GiB / 655,360 = 49,152 blocks = 786,432 tokens; 49,152 / 2,048 = 24.0x at 32,768
    log = BOOTS_DIR / "drift" / "canary.log"
    if not log.is_file():
        pytest.skip("data/boots/drift/canary.log not present")
    text = log.read_text()
    assert "GPU KV cache size: 786,432 tokens" in text
    assert "Maximum concurrency for 32,768 tokens per request: 24.00x" in text
    spec = kv_spec(read_model_config("qwen3-14b"), tp=4, vllm_version="0.26.0")
    assert spec.block_bytes == 655_360
    assert spec.num_blocks(32_212_254_720) == 49_152
    assert spec.kv_cache_tokens(49_152, 32768) == 786_432
    assert spec.max_concurrency(49_152, 32768) == 24.0


def test_cross_check_blocks_only_points_to_block_size():
    # V0 logs blocks and concurrency: with 32-token blocks the same 20 GiB gives 10,240 blocks of 2 MiB and
    # the same 10,240 × 32 / 8,192 = 40.0x; a 16-token spec predicts 20,480 blocks → block size is named
    spec = kv_spec(read_model_config("llama-3.1-8b"), tp=2)
    ledger = _ledger(
        manual_kv_bytes=20 * GiB,
        num_gpu_blocks=10_240,
        max_concurrency=40.0,
        max_model_len=8192,
        vllm_version="0.6.6.post1",
    )
    row = cross_check(ledger, spec).iloc[0]
    assert bool(row["agrees"]) is False
    assert "--block-size" in row["reason"]


# --- the logs' settings: filled in, contradictions refused ----------------------------------------

FOUR_RANK_LOG = BOOTS_DIR / "four-rank" / "boot.log"  # 0.26.0, Llama-3.1-70B TP 4, kv_cache_dtype=auto


def test_options_for_logs_fills_layout_and_kv_dtype_from_the_key():
    key = {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 2,
        "decode_context_parallel_size": 1,
        "kv_cache_dtype": "fp8",
        "dtype": "torch.bfloat16",
        "vllm_version": "0.26.0",
        "block_size": 16,
        "model": "meta-llama/Llama-3.1-70B-Instruct",
    }
    options = options_for_logs({"tp": None, "pp": None, "dcp": None, "kv_cache_dtype": None}, key)
    assert {k: options[k] for k in ("tp", "pp", "dcp", "kv_cache_dtype", "dtype")} == {
        "tp": 4,
        "pp": 2,
        "dcp": 1,
        "kv_cache_dtype": "fp8",
        "dtype": "torch.bfloat16",
    }
    # TP 4, PP 2 (40 layers per stage), fp8: 2 × 2 KV heads × 128 × 1 B × 40 = 20,480 B per token
    assert kv_spec(LLAMA_70B, **options).bytes_per_token == 20_480
    # nothing logged: the defaults 1, 1, auto
    assert options_for_logs({}, {}) == {"pp": 1, "dcp": 1, "kv_cache_dtype": "auto"}
    # vLLM's "fp8" is e4m3: the two spellings agree
    assert options_for_logs({"kv_cache_dtype": "fp8_e4m3"}, key)["kv_cache_dtype"] == "fp8_e4m3"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tp": 8}, "tp 8 given, but the logs show tensor_parallel_size 4"),
        ({"pp": 2}, "pp 2 given, but the logs show pipeline_parallel_size 1"),
        ({"dcp": 2}, "dcp 2 given, but the logs show decode_context_parallel_size 1"),
        ({"kv_cache_dtype": "auto"}, "kv_cache_dtype 'auto' given, but the logs show kv_cache_dtype 'fp8'"),
    ],
)
def test_options_for_logs_refuses_contradictions(given, message):
    key = {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 1,
        "decode_context_parallel_size": 1,
        "kv_cache_dtype": "fp8",
    }
    with pytest.raises(KVSpecError, match=message):
        options_for_logs(given, key)


def test_config_of_another_model_than_the_logs_is_refused():
    expected = (
        "describes meta-llama/Llama-3.1-8B-Instruct, but the logs served meta-llama/Llama-3.1-70B-Instruct"
    )
    with pytest.raises(KVSpecError, match=re.escape(expected)):
        kv_spec(read_model_config("llama-3.1-8b"), tp=4, logged_model="meta-llama/Llama-3.1-70B-Instruct")
    # the same architecture under a quantized repo name, or a local path, is not a contradiction
    kv_spec(LLAMA_70B, tp=4, logged_model="RedHatAI/Llama-3.1-70B-Instruct-FP8")
    kv_spec(LLAMA_70B, tp=4, logged_model="/models/llama-70b")


def test_budget_model_takes_kv_dtype_from_the_log_and_warns_on_disagreement(tmp_path, capsys):
    # A copy of the four-rank boot with kv_cache_dtype=auto changed to fp8. The budget: rank 2's room
    # 13,851,269,530 B − 0.9 GiB (966,367,642 B) = 12,884,901,888 B. fp8 blocks are 16 × 40,960 =
    # 655,360 B → 19,660.8 → 19,660 blocks (12,884,377,600 B) = 314,560 tokens; bf16 would be 9,830.
    log = tmp_path / "boot.log"
    log.write_text(FOUR_RANK_LOG.read_text().replace("kv_cache_dtype=auto", "kv_cache_dtype=fp8"))
    data = _run_json(capsys, "budget", str(log), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--json")
    assert (data["capacity"]["kv_cache_dtype"], data["capacity"]["tp"]) == ("fp8", 4)
    assert (data["capacity"]["blocks"], data["capacity"]["tokens"]) == (19_660, 314_560)
    # but the log printed the bf16 figure: min 11.89 GiB = 12,766,790,287 B / 655,360 = 19,480 blocks
    # → 311,680 tokens predicted against 155,856 logged, half: the KV dtype
    assert data["cross_check"] == (
        "model config DISAGREES with the log: predicted 311,680 tokens, logged "
        "155,856; likely cause: KV dtype"
    )
    assert any(warning.startswith("model config DISAGREES") for warning in data["warnings"])
    # the text form shouts it on stderr
    assert main(["budget", str(log), "--reserve", "0.9GiB", "--model", "llama-3.1-70b"]) == 0
    assert "warning: model config DISAGREES with the log" in capsys.readouterr().err


def test_budget_model_agrees_with_the_four_rank_log(capsys):
    # 12,884,377,600 B / 1,310,720 = 9,830 blocks = 157,280 tokens; the cross-check: min 11.89 GiB
    # = 12,766,790,287 B / 1,310,720 = 9,740.3 → 9,740 blocks × 16 = 155,840 predicted, 155,856 logged
    # (9,741 blocks), inside the 9,736 … 9,744 of ±0.005 GiB
    data = _run_json(
        capsys, "budget", str(FOUR_RANK_LOG), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--json"
    )
    assert data["capacity"]["tokens"] == 157_280
    assert data["cross_check"] == (
        "model config agrees with the log: predicted 155,840 tokens, logged "
        "155,856 (within 2-decimal GiB rounding)"
    )
    assert not any("DISAGREES" in warning for warning in data["warnings"])


def test_budget_model_refuses_a_contradicting_setting_or_model(capsys):
    # the reviewer's case: the 70B log sized with the 8B config printed 393,216 tokens, exit 0
    assert (
        main(["budget", str(FOUR_RANK_LOG), "--reserve", "0.9GiB", "--model", "llama-3.1-8b", "--tp", "4"])
        == 2
    )
    assert "logs served meta-llama/Llama-3.1-70B-Instruct" in capsys.readouterr().err
    assert (
        main(
            [
                "budget",
                str(FOUR_RANK_LOG),
                "--reserve",
                "0.9GiB",
                "--model",
                "llama-3.1-70b",
                "--kv-cache-dtype",
                "fp8",
            ]
        )
        == 2
    )
    assert "kv_cache_dtype 'fp8' given, but the logs show kv_cache_dtype 'auto'" in capsys.readouterr().err
    assert (
        main(["budget", str(FOUR_RANK_LOG), "--reserve", "0.9GiB", "--model", "llama-3.1-70b", "--pp", "2"])
        == 2
    )
    assert "pipeline_parallel_size 1" in capsys.readouterr().err


# --- the cross-check verdict ------------------------------------------------------------------------


def test_cross_check_verdict_on_the_four_rank_boot():
    ledger, _ = read_vllm_log_rooms(FOUR_RANK_LOG)
    spec = kv_spec(LLAMA_70B, **options_for_logs({}, compatibility_key(ledger)))
    assert cross_check_verdict(cross_check(ledger, spec)) == (
        "model config agrees with the log: predicted 155,840 tokens, logged 155,856 "
        "(within 2-decimal GiB rounding)"
    )


def test_cross_check_verdict_counts_checks_and_blocks_only_logs():
    # two per-worker rows (0.10.2, exact): 20 GiB → 20,480 blocks (327,680 tokens) agrees; 19 GiB
    # → 19,456 blocks = 311,296 tokens predicted, but 622,592 logged (twice): the KV dtype
    spec = kv_spec(read_model_config("llama-3.1-8b"), tp=2)
    ledger = pd.DataFrame(
        {
            "source": ["e.log"] * 2,
            "boot": [0, 0],
            "rank": [0, 1],
            "available_kv_bytes": [20 * GiB, 19 * GiB],
            "kv_cache_tokens": [327_680, 622_592],
            "max_model_len": [8192, 8192],
            "vllm_version": ["0.10.2", "0.10.2"],
        }
    )
    verdict = cross_check_verdict(cross_check(ledger, spec, available_tolerance_bytes=0))
    assert verdict == (
        "model config DISAGREES with the log: predicted 311,296 tokens, logged 622,592; "
        "likely cause: KV dtype (1 of 2 checks)"
    )
    # V0 logs blocks only: 20 GiB / 1 MiB = 20,480 blocks, exact
    v0 = _ledger(manual_kv_bytes=20 * GiB, num_gpu_blocks=20_480, max_model_len=8192, vllm_version="0.6.6")
    assert cross_check_verdict(cross_check(v0, spec)) == (
        "model config agrees with the log: predicted 20,480 GPU blocks, logged 20,480 (exact bytes)"
    )


# --- release-dependent vLLM rules -------------------------------------------------------------------


def test_group_size_ratio_by_release():
    # 17 full + 12 sliding (gpt-oss-20b + a 4-layer EAGLE drafter): 17 / 12 = 1.42.
    # From 0.18 (threshold 1.5): 17 < 18 → group size 17, one group per kind.
    # Up to 0.17 (threshold 1.25): 17 ≥ 15 → group size 12: ceil(17 / 12) = 2 full groups (9, 8) + 1 sliding.
    layers = [FULL_ATTENTION] * 17 + [SLIDING_ATTENTION] * 12
    assert [len(g) for _, g in kv_cache_groups(layers, "0.18.0")] == [17, 12]
    assert [len(g) for _, g in kv_cache_groups(layers, "0.17.1")] == [9, 8, 12]


def test_no_group_size_ratio_before_0_12():
    # 13 full + 12 sliding: 13 < 12 × 1.25 = 15, so 0.12–0.17 take group size 13 (one group per kind);
    # 0.11 has no ratio (kv_cache_utils.py: group_size = min(...)) → 12: ceil(13 / 12) = 2 full groups
    # of 7 and 6 layers (layers[i::2]) + 1 sliding group of 12
    layers = [FULL_ATTENTION] * 13 + [SLIDING_ATTENTION] * 12
    assert [len(g) for _, g in kv_cache_groups(layers, "0.12.0")] == [13, 12]
    assert [len(g) for _, g in kv_cache_groups(layers, "0.11.0")] == [7, 6, 12]


def test_v0_9_0_hybrid_concurrency_splits_tokens_across_groups():
    # Gemma 3 27B on 0.9.0: 7 KV cache groups. 7,000 blocks → tokens = 7,000 // 7 × 16 = 16,000;
    # concurrency = tokens / L = 16,000 / 8,000 = 2.0 (not 7,000 × 16 / 8,000 = 14.0)
    spec = kv_spec(read_model_config("gemma-3-27b"), tp=1, vllm_version="0.9.0", max_num_batched_tokens=8192)
    assert len(spec.groups) == 7
    assert spec.kv_cache_tokens(7_000, 8_000) == 16_000
    assert spec.max_concurrency(7_000, 8_000) == 2.0


def test_parse_vllm_version_shares_the_readers_rule():
    # one parser: kvplan.releases.version_tuple; kvspec adds only the default and the error
    assert parse_vllm_version("0.11.1rc2") == (0, 11, 1)
    with pytest.raises(KVSpecError, match="vllm_version"):
        parse_vllm_version("nightly")


@pytest.mark.parametrize(
    ("config_model", "logged_model", "same"),
    [
        # quantised or tuned variants and date stamps share the architecture
        ("meta-llama/Llama-3.1-70B-Instruct", "RedHatAI/Llama-3.1-70B-Instruct-FP8", True),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Thinking", True),
        ("Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-Instruct-2507", True),
        # another release or size is another model: give its own config
        ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", False),
        ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3.2-Exp", False),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", False),
    ],
)
def test_model_names_agree_by_architecture_not_by_substring(config_model, logged_model, same):
    arch = model_arch({**LLAMA_70B, "_source": {"model": config_model}})
    if same:
        check_model_name(arch, logged_model)
    else:
        with pytest.raises(KVSpecError, match=re.escape("give the served model's config.json")):
            check_model_name(arch, logged_model)


def test_fp8_ds_mla_needs_a_release_that_has_it():
    # MLAAttentionSpec's 656-byte fp8_ds_mla page first appears in vLLM 0.11.0
    sparse = {**DEEPSEEK_V3, "index_topk": 2048}
    spec = kv_spec(sparse, tp=8, kv_cache_dtype="fp8_ds_mla", vllm_version="0.11.0")
    assert spec.bytes_per_token_per_layer == 656 + 132  # and the indexer's 132
    with pytest.raises(KVSpecError, match=re.escape("does not exist in vLLM 0.10.2")):
        kv_spec(sparse, tp=8, kv_cache_dtype="fp8_ds_mla", vllm_version="0.10.2")


def test_mla_block_size_follows_the_release():
    # 0.7.1–0.7.3: MLA without FlashMLA, vLLM's default 16-token blocks: 16 × 70,272 B = 1,124,352 B
    assert kv_spec(DEEPSEEK_V3, tp=8, vllm_version="0.7.3").block_bytes == 16 * 70_272
    # 0.8–0.19 force 64 unless the block is a multiple of 64 (FlashMLA's rule), so 128 is kept
    assert kv_spec(DEEPSEEK_V3, tp=8, vllm_version="0.17.0", block_size=128).block_size == 128
    assert kv_spec(DEEPSEEK_V3, tp=8, vllm_version="0.17.0", block_size=16).block_size == 64
    # before 0.7.1 vLLM cached K and V per head for DeepSeek (no MLA): kvplan refuses to guess it
    with pytest.raises(KVSpecError, match=re.escape("serves deepseek-ai/DeepSeek-V3 without MLA")):
        kv_spec(DEEPSEEK_V3, tp=8, vllm_version="0.6.6")


def test_an_absurd_layer_count_is_refused_not_looped_over():
    # 10**30 layers (a corrupted config) would build a list of 10**30 layer kinds
    with pytest.raises(KVSpecError, match="'num_hidden_layers' must be a positive integer up to 1,000,000"):
        kv_spec({**LLAMA_70B, "num_hidden_layers": 10**30}, tp=4)


# --- configs vLLM would refuse are refused, not sized (found by the issue 11 item 18 probe) -------------

GQA_8B = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
          "torch_dtype": "bfloat16"}  # fmt: skip


def test_a_negative_sliding_window_is_refused_not_sized():
    # Gemma-3 style: five sliding layers, one full. With sliding_window −4096 the sliding layers' window
    # (window − 1 + tokens in flight) would shrink below a real window's, so fewer blocks per request and
    # a higher concurrency than vLLM can serve: it was sized (an over-prediction), now refused.
    config = {**GQA_8B, "num_hidden_layers": 6, "sliding_window": -4096,
              "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}  # fmt: skip
    with pytest.raises(KVSpecError, match="'sliding_window' must be one whole number of tokens, 0 or more"):
        model_arch(config)


def test_more_kv_heads_than_attention_heads_is_refused():
    # 64 KV heads for 32 query heads: no attention layer has that shape (each KV head serves whole
    # query heads); it was sized as 64 heads and only disagreed with a log later
    with pytest.raises(KVSpecError, match="'num_key_value_heads' = 64 is above num_attention_heads 32"):
        model_arch({**GQA_8B, "num_key_value_heads": 64})


@pytest.mark.parametrize(
    ("field", "value"), [("layer_types", 5), ("layer_types", "full_attention"), ("text_config", 5)]
)
def test_a_layer_list_or_nested_config_of_the_wrong_type_is_refused(field, value):
    # both were ignored silently: every layer then counted as full attention, or the outer config was read
    with pytest.raises(KVSpecError, match=f"field '{field}' must be"):
        model_arch({**GQA_8B, field: value})
