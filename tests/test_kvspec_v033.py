"""vLLM 0.26–0.33's own KV arithmetic, one full 0.33 boot per case (tests/data/v0.33-*.log).

Each boot's logged "GPU KV cache size" and "Maximum concurrency" are derived below from vLLM 0.33's
code (``v1/kv_cache_interface.py`` ``max_memory_usage_bytes``, ``v1/core/kv_cache_utils.py``
``get_max_concurrency_for_kv_cache_config`` / ``get_kv_cache_capacity``: tokens = int(concurrency × L),
``platforms/interface.py`` hybrid block size, ``config/vllm.py`` ``max_in_flight_tokens``), and
``kv_spec(...).capacity(...)`` must reproduce them exactly. The launch settings the reader takes from
the new log lines (``max_num_batched_tokens``, ``async_scheduling``, ``mamba_cache_mode``,
``kv_cache_group_block_sizes``, ``num_gpu_blocks_override``, the auto-fit ``max_model_len``) and the
nvidia-smi ``gpu_name`` are added to the compatibility key by hand until the reader reads them.
"""

import math

import pytest

from kvplan.io.model_config import read_model_config
from kvplan.kvspec import KVSpecError, cross_check, cross_check_verdict, kv_spec, options_for_logs
from kvplan.ledger import compatibility_key
from kvplan.room import read_vllm_log_rooms
from tests.conftest import TESTS_DATA_DIR, GiB

H100 = "NVIDIA H100 80GB HBM3"


def _boot(name: str, catalogue: str, available: int, **logged):
    """The boot's ledger and the spec options_for_logs builds from its key and the hand-read settings."""
    ledger, _metadata = read_vllm_log_rooms(TESTS_DATA_DIR / f"v0.33-{name}.log")
    key = {**compatibility_key(ledger), **logged}
    if "max_model_len" in logged:  # the auto-fit length the KV line used
        ledger["max_model_len"] = logged["max_model_len"]
    spec = kv_spec(read_model_config(catalogue), **options_for_logs({}, key))
    assert ledger["available_kv_bytes"].dropna().tolist() == [available]  # "Available KV cache memory: X GiB"
    return ledger, spec


def _logged(ledger) -> tuple[int, float]:
    return int(ledger["kv_cache_tokens"].dropna().iloc[0]), float(ledger["max_concurrency"].dropna().iloc[0])


def test_sliding_window_in_flight_tokens_gemma3_27b_tp2():
    # Gemma-3-27B TP 2: 62 layers (10 full + 52 sliding, window 1,024), 8 KV heads per rank × 128 × 2 (K, V)
    # × 2 B = 4,096 B per token per layer; groups of 10 → block = 16 × 4,096 × 10 = 655,360 B.
    # 30 GiB / 655,360 B = 49,152 blocks. max_num_batched_tokens 8,192 (logged), async scheduling on
    # (logged) → 2 × 8,192 = 16,384 tokens in flight. A 131,072-token request: full group 131,072 / 16 =
    # 8,192 blocks; each of the 6 sliding groups ceil(min(1,023 + 16,384, 131,072) / 16) + 1 = 1,088 + 1 =
    # 1,089 → 8,192 + 6 × 1,089 = 14,726 blocks. Concurrency 49,152 / 14,726 = 3.3378 → "3.34x";
    # tokens int(3.33777 × 131,072) = 437,488. (kvplan's old 1 × 8,192: 8,192 + 6 × 577 = 11,654 blocks,
    # 552,842 tokens: +26 %.)
    ledger, spec = _boot(
        "gemma-3-27b-tp2-sliding-window",
        "gemma-3-27b",
        30 * GiB,
        max_num_batched_tokens=8192,
        async_scheduling=True,
    )
    capacity = spec.capacity(30 * GiB, 131_072)
    assert (capacity.blocks, spec.blocks_per_request(131_072)) == (49_152, 14_726)
    assert (capacity.tokens, round(capacity.max_concurrency, 2)) == (437_488, 3.34) == _logged(ledger)
    assert not spec.approximate and "; ".join(spec.launch.notes) == ""
    assert cross_check_verdict(cross_check(ledger, spec)).startswith("model config agrees")


def test_sliding_window_defaults_are_named_and_a_lower_bound():
    # No max_num_batched_tokens in the logs: the largest vLLM default, 16,384, with async's 2 batches →
    # 32,768 in flight: ceil(min(1,023 + 32,768, 131,072) / 16) + 1 = ceil(2,111.9) + 1 = 2,113 per sliding
    # group → 8,192 + 6 × 2,113 = 20,870 blocks: 49,152 / 20,870 = 2.36x, under the exact 3.34x.
    spec = kv_spec(read_model_config("gemma-3-27b"), tp=2, vllm_version="0.33.0")
    assert spec.blocks_per_request(131_072) == 20_870
    assert spec.approximate and "16,384" in spec.approximate_reason
    assert "async scheduling not in the logs" in "; ".join(spec.launch.notes)
    assert spec.capacity(30 * GiB, 131_072).tokens < 437_488
    # vLLM printed that it disabled the hybrid KV cache manager: sliding layers are full attention,
    # 62 layers in one group → block 16 × 4,096 × 62 = 4,063,232 B; 30 GiB → 7,927 blocks; 8,192 per request
    off = kv_spec(
        read_model_config("gemma-3-27b"), tp=2, max_num_batched_tokens=8192, hybrid_kv_cache_manager=False
    )
    assert (off.num_blocks(30 * GiB), off.blocks_per_request(131_072)) == (7_927, 8_192)
    assert "sized as full attention" in off.approximate_reason


def test_hybrid_gdn_align_mode_qwen3_next_tp2_on_hopper():
    # Qwen3-Next-80B-A3B TP 2 on H100: 12 full-attention + 36 gated-delta-net layers.
    # Attention: 1 KV head per rank × 256 × 2 × 2 B = 1,024 B per token per layer. GDN state per layer and
    # rank: conv (2 × 16 × 128 + 32 × 128) / 2 × (4 − 1) = 12,288 + temporal 32 / 2 × 128 × 128 = 262,144
    # → 274,432 values × 2 B = 548,864 B. 0.33 align mode with FlashInfer's GDN prefill (Hopper): block size
    # aligned to lcm(16, 64) = 64 → 64 × ceil(548,864 / (64 × 1,024)) = 64 × 9 = 576 tokens (0.32: 544).
    # Groups of 12 (1 full + 3 GDN) → block = 576 × 1,024 × 12 = 7,077,888 B; 40 GiB → 6,068 blocks.
    # A 262,144-token request: ceil(262,144 / 576) = 456 + 3 groups × (2 + 1 checkpoint) = 465 blocks →
    # 6,068 / 465 = 13.0495 → "13.05x"; tokens int(13.0495 × 262,144) = 3,420,838.
    ledger, spec = _boot(
        "qwen3-next-80b-a3b-tp2-hybrid-gdn",
        "qwen3-next-80b-a3b",
        40 * GiB,
        max_num_batched_tokens=8192,
        async_scheduling=True,
        mamba_cache_mode="align",
        kv_cache_group_block_sizes="(576, 576, 576, 576)",
        gpu_name=H100,
    )
    assert (spec.block_size, spec.block_bytes) == (576, 7_077_888)
    capacity = spec.capacity(40 * GiB, 262_144)
    assert (capacity.blocks, spec.blocks_per_request(262_144)) == (6_068, 465)
    assert (capacity.tokens, round(capacity.max_concurrency, 2)) == (3_420_838, 13.05) == _logged(ledger)
    assert not spec.approximate
    assert cross_check_verdict(cross_check(ledger, spec)).startswith("model config agrees")
    # the same from the config and the GPU alone (no group-size line): the rule, not the logged size
    from_gpu = kv_spec(
        read_model_config("qwen3-next-80b-a3b"), tp=2, gpu_name=H100, max_num_batched_tokens=8192
    )
    assert (from_gpu.block_size, from_gpu.capacity(40 * GiB, 262_144).tokens) == (576, 3_420_838)


def test_hybrid_gdn_on_an_unknown_gpu_is_the_lower_bound():
    # GPU unknown: FlashInfer's prefill (64-aligned 576, +1 checkpoint block) is assumed and said.
    # On an A100 the Triton prefill has neither: 16 × ceil(548,864 / 16,384) = 544 tokens, 2 blocks per
    # GDN group; block 544 × 1,024 × 12 = 6,684,672 B → 40 GiB / 6,684,672 = 6,425 blocks; request
    # ceil(262,144 / 544) = 482 + 3 × 2 = 488 → 13.17x, above the assumed 13.05x.
    unknown = kv_spec(read_model_config("qwen3-next-80b-a3b"), tp=2)
    a100 = kv_spec(read_model_config("qwen3-next-80b-a3b"), tp=2, gpu_name="NVIDIA A100-SXM4-80GB")
    assert unknown.approximate and "FlashInfer gated-delta-net prefill assumed" in unknown.approximate_reason
    assert (a100.block_size, a100.num_blocks(40 * GiB)) == (544, 6_425)
    assert a100.blocks_per_request(262_144) == 488
    low, a100_figure = (spec.capacity(40 * GiB, 262_144).max_concurrency for spec in (unknown, a100))
    assert low < a100_figure
    # before 0.26 prefix caching was off for hybrids: one state block per group (544, 482 + 3 = 485)
    assert (
        kv_spec(read_model_config("qwen3-next-80b-a3b"), tp=2, vllm_version="0.25.0").blocks_per_request(
            262_144
        )
        == 485
    )


def test_mla_block_size_from_the_backend_deepseek_v3_tp8_on_hopper():
    # DeepSeek-V3 TP 8 on H100 with bf16 KV, 0.33: FLASH_ATTN_MLA comes first (MultipleOf(16)), so the
    # preferred block size is the default 16 (no "Setting kv cache block size" line). One latent of
    # 512 + 64 = 576 values × 2 B = 1,152 B per layer, 61 layers → 70,272 B per token on every rank;
    # block = 16 × 70,272 = 1,124,352 B; 20 GiB → 19,099 blocks. A 163,840-token request takes
    # 163,840 / 16 = 10,240 blocks → 19,099 / 10,240 = 1.865 → "1.87x"; tokens int(1.8651 × 163,840)
    # = 305,584.
    ledger, spec = _boot("deepseek-v3-tp8-mla-hopper", "deepseek-v3", 20 * GiB, gpu_name=H100)
    capacity = spec.capacity(20 * GiB, 163_840)
    assert (spec.block_size, capacity.blocks) == (16, 19_099)
    assert (capacity.tokens, round(capacity.max_concurrency, 2)) == (305_584, 1.87) == _logged(ledger)
    assert cross_check_verdict(cross_check(ledger, spec)).startswith("model config agrees")
    config = read_model_config("deepseek-v3")
    # from the GPU alone: 16 on Hopper (bf16), 64 with fp8 KV (FLASHMLA), 32 on Blackwell (FLASHINFER_MLA)
    assert kv_spec(config, tp=8, gpu_name=H100).block_size == 16
    assert kv_spec(config, tp=8, gpu_name=H100, kv_cache_dtype="fp8").block_size == 64
    assert kv_spec(config, tp=8, gpu_name="NVIDIA B200").block_size == 32
    # an explicit --block-size is kept from 0.18 (0.17 forced 64)
    assert kv_spec(config, tp=8, block_size=16, gpu_name="NVIDIA B200").block_size == 16
    assert kv_spec(config, tp=8, block_size=16, vllm_version="0.17.0").block_size == 64
    # nothing to go on: refused, not rounded to a guess
    with pytest.raises(KVSpecError, match="give --block-size"):
        kv_spec(config, tp=8)


def test_block_override_llama_3_1_70b_tp4():
    # Llama-3.1-70B TP 4: 2 KV heads per rank × 128 × 2 × 2 B × 80 layers = 81,920 B per token; block
    # 1,310,720 B; 12 GiB would hold 9,830 blocks ("Overriding num_gpu_blocks=9830"), vLLM allocates the
    # override's 4,096: 4,096 / (32,768 / 16 = 2,048) = 2.00x, int(2.0 × 32,768) = 65,536 tokens.
    ledger, spec = _boot(
        "llama-3.1-70b-tp4-block-override", "llama-3.1-70b", 12 * GiB, num_gpu_blocks_override=4096
    )
    capacity = spec.capacity(12 * GiB, 32_768)
    assert (capacity.blocks, capacity.tokens, round(capacity.max_concurrency, 2)) == (4_096, 65_536, 2.0)
    assert (capacity.tokens, capacity.max_concurrency) == _logged(ledger)
    assert spec.with_settings(num_gpu_blocks_override=None).num_blocks(12 * GiB) == 9_830
    assert cross_check_verdict(cross_check(ledger, spec)).startswith("model config agrees")


def test_auto_fit_max_model_len_llama_3_1_8b():
    # Llama-3.1-8B TP 1: 8 KV heads × 128 × 2 × 2 B × 32 layers = 131,072 B per token; block 2 MiB; 4 GiB
    # = 2,048 blocks, of which 2,047 are usable (the null block, 0.29+). Auto-fit takes the longest L with
    # ceil(L / 16) ≤ 2,047: L = 32,752 ("reduced from 131072 to 32752"). At that L: 2,048 / 2,047 = 1.0005
    # → "1.00x"; tokens int(1.000489 × 32,752) = 32,768.
    ledger, spec = _boot("llama-3.1-8b-tp1-auto-fit", "llama-3.1-8b", 4 * GiB, max_model_len=32_752)
    assert spec.auto_fit_max_model_len(4 * GiB, 131_072) == 32_752
    capacity = spec.capacity(4 * GiB, 32_752)
    assert (capacity.tokens, round(capacity.max_concurrency, 2)) == (32_768, 1.0) == _logged(ledger)
    assert cross_check_verdict(cross_check(ledger, spec)).startswith("model config agrees")
    # 0.28 plans against every block: ceil(L / 16) ≤ 2,048 → 32,768
    assert spec.with_settings(vllm_version="0.28.0").auto_fit_max_model_len(4 * GiB, 131_072) == 32_768


def test_unmodelled_cases_are_approximate_and_low():
    llama = read_model_config("llama-3.1-8b")
    # nvfp4 KV: sized as fp8 (1 byte per value ≥ nvfp4's 0.5625 + scales) → fewer tokens than vLLM's
    nvfp4, fp8 = kv_spec(llama, kv_cache_dtype="nvfp4"), kv_spec(llama, kv_cache_dtype="fp8")
    assert nvfp4.approximate and "lower bound" in nvfp4.approximate_reason
    assert nvfp4.bytes_per_token == fp8.bytes_per_token == 65_536
    assert nvfp4.bytes_per_token > math.ceil(32 * 2 * 8 * 128 * 0.5625)  # nvfp4's own page, without scales
    # prefill context parallel: sized without it, said so
    assert "PCP 2" in kv_spec(llama, pcp=2).approximate_reason
    # async scheduling with PP 2: the V2 runner's 3 batches in flight (V1: 2), the larger taken
    gemma = kv_spec(read_model_config("gemma-3-27b"), tp=2, pp=2, max_num_batched_tokens=8192)
    assert gemma.launch.in_flight_tokens == 3 * 8192 and "PP 2" in gemma.approximate_reason


def test_hisparse_gpu_plus_host_figure_is_not_compared_and_caps_capacity():
    # a "GPU + host KV cache size" (HiSparse, 0.32+) is min(GPU pool, host pool): not a GPU-only figure
    import pandas as pd

    llama = read_model_config("llama-3.1-8b")  # 131,072 B per token, 2 MiB blocks
    ledger = pd.DataFrame(
        {
            "available_kv_bytes": [4 * GiB],
            "kv_cache_tokens": [16_384],
            "max_model_len": [8192],
            "kv_cache_pools": ["GPU + host"],
            "vllm_version": ["0.33.0"],
        }
    )
    rows = cross_check(ledger, kv_spec(llama))
    assert rows["agrees"].isna().all()
    assert cross_check_verdict(rows).startswith(
        "nothing to cross-check: the logged 'GPU + host KV cache size'"
    )
    # the GPU pool alone: 4 GiB / 2 MiB = 2,048 blocks, 2,048 / 512 = 4.0x at 8,192 tokens; the log's
    # 16,384 / 8,192 = 2.0x bounds it (host pool): at the same 4 GiB less one block (2 MiB) against
    # 4 GiB + 0.005 GiB, 2.0 × 4,292,870,144 / 4,300,336,005 = 1.99653 → 16,355 tokens; at 16,384 tokens
    # the request takes twice the blocks (ceil(8,192 / 16) / ceil(16,384 / 16) = 1/2): 0.99826x
    spec = kv_spec(llama, host_pool=(16_384, 8192, 4 * GiB + GiB // 200))
    assert spec.approximate and "HiSparse" in spec.approximate_reason
    at_logged, longer = spec.capacity(4 * GiB, 8192), spec.capacity(4 * GiB, 16_384)
    assert (at_logged.blocks, at_logged.tokens, round(at_logged.max_concurrency, 5)) == (
        2_048,
        16_355,
        1.99653,
    )
    assert round(longer.max_concurrency, 5) == 0.99826 and longer.approximate
    assert kv_spec(llama).capacity(4 * GiB, 8192).max_concurrency == 4.0
