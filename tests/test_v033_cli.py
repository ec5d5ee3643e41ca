"""``kvplan budget LOG --model M`` end to end on the five full 0.33 boots of ``tests/data/v0.33-*.log``.

Each boot's logged "GPU KV cache size" and "Maximum concurrency" are derived from vLLM 0.33's code in
``tests/test_kvspec_v033.py`` (one derivation per case). Here the CLI, which takes every launch
setting from the log itself (block size, auto-fitted ``max_model_len``, ``num_gpu_blocks_override``,
``max_num_batched_tokens``, Mamba cache mode; async scheduling is 0.27+'s default, printed only when
vLLM turns it off) and the GPU type from an nvidia-smi snapshot, must reproduce them: in the
cross-check (prediction at the logged available memory), and in the capacity of a budget equal to
that memory. As in a real 0.33 log, "Available KV cache memory" and the rank assignment are printed
by local rank 0 only (``info_once``), the --kv-cache-memory suggestion by every rank.

The reserve of each case makes the budget the logged "Available KV cache memory" exactly: each rank's
room is its "--kv-cache-memory=N ... to fully utilize gpu memory" suggestion (0.27+ wording, every
rank), the limiting room is the last rank's (each rank has 96 MiB less free memory than the one before),
and reserve = that room − available.
"""

import json

import pytest

from kvplan.cli import main
from tests.conftest import TESTS_DATA_DIR, GiB

H100_SMI_HEADER = (
    "index, uuid, name, driver_version, memory.total [MiB], memory.used [MiB], memory.free [MiB]"
)


@pytest.fixture
def h100_snapshot(tmp_path):
    """An nvidia-smi --query-gpu CSV of 8 H100 80GB HBM3 (81,559 MiB, the logs' 79.65 GiB total)."""
    rows = [
        f"{i}, GPU-5f1c2a7e-8d3b-4c9a-b6e1-0a2f9c4d7e3{i}, NVIDIA H100 80GB HBM3, 580.95.05, 81559 MiB, "
        "76000 MiB, 5089 MiB"
        for i in range(8)
    ]
    path = tmp_path / "nvidia-smi-gpu.csv"
    path.write_text("\n".join([H100_SMI_HEADER, *rows]) + "\n")
    return str(path)


# log → (catalogue model, reserve [B], available [B], logged tokens, logged concurrency, L, blocks)
CASES = {
    # TP 2: rank 1's room 36,812,064,030 − 30 GiB (32,212,254,720) = 4,599,809,310
    "gemma-3-27b-tp2-sliding-window": (
        "gemma-3-27b",
        4_599_809_310,
        30 * GiB,
        437_488,
        3.34,
        131_072,
        49_152,
    ),
    # TP 2: rank 1's room 47,549,482,270 − 40 GiB (42,949,672,960) = 4,599,809,310; the 64-aligned
    # 576-token block and the checkpoint block of FlashInfer's GDN prefill need the GPU type (H100)
    "qwen3-next-80b-a3b-tp2-hybrid-gdn": (
        "qwen3-next-80b-a3b",
        4_599_809_310,
        40 * GiB,
        3_420_838,
        13.05,
        262_144,
        6_068,
    ),
    # TP 8: rank 7's room 25,470,666,014 − 20 GiB (21,474,836,480) = 3,995,829,534; the MLA block size
    # (16: FLASH_ATTN_MLA on Hopper) needs the GPU type
    "deepseek-v3-tp8-mla-hopper": ("deepseek-v3", 3_995_829_534, 20 * GiB, 305_584, 1.87, 163_840, 19_099),
    # TP 4: rank 3's room 17,283,384,606 − 12 GiB (12,884,901,888) = 4,398,482,718; vLLM allocates the
    # override's 4,096 blocks, not the 9,830 that 12 GiB holds
    "llama-3.1-70b-tp4-block-override": (
        "llama-3.1-70b",
        4_398_482_718,
        12 * GiB,
        65_536,
        2.0,
        32_768,
        4_096,
    ),
    # TP 1: the room 8,995,439,902 − 4 GiB (4,294,967,296) = 4,700,472,606; L is the auto-fitted 32,752,
    # not the engine config's 131,072
    "llama-3.1-8b-tp1-auto-fit": ("llama-3.1-8b", 4_700_472_606, 4 * GiB, 32_768, 1.0, 32_752, 2_048),
}


def _budget(capsys, name: str, *extra: str) -> tuple[int, str, str]:
    """``kvplan budget LOG --model M --reserve R [extra]``: exit code, stdout, stderr."""
    model, reserve = CASES[name][:2]
    log = str(TESTS_DATA_DIR / f"v0.33-{name}.log")
    code = main(["budget", log, "--model", model, "--reserve", str(reserve), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(CASES))
def test_budget_reproduces_the_logged_tokens_and_concurrency(capsys, h100_snapshot, name):
    _model, _reserve, available, tokens, concurrency, length, blocks = CASES[name]
    code, out, _err = _budget(capsys, name, "--nvidia-smi", h100_snapshot, "--json")
    assert code == 0
    data = json.loads(out)
    capacity = data["capacity"]
    # the budget is whole blocks of memory, at most the logged available memory (with the override
    # the memory holds 12 GiB // 1,310,720 B = 9,830 blocks, of which vLLM allocates 4,096)
    budget_blocks = available // capacity["block_bytes"]
    assert data["uniform_budget_bytes"] == budget_blocks * capacity["block_bytes"] <= available
    assert data["num_blocks"] == budget_blocks == (9_830 if "override" in name else blocks)
    assert (capacity["blocks"], capacity["tokens"], capacity["max_model_len"]) == (blocks, tokens, length)
    assert round(capacity["max_concurrency"], 2) == concurrency
    assert not capacity["approximate"], capacity["approximate_reason"]
    assert data["cross_check"].startswith(
        f"model config agrees with the log: predicted {tokens:,} tokens, logged {tokens:,}"
    )
    assert "approximate" not in data["cross_check"]
    code, text, _err = _budget(capsys, name, "--nvidia-smi", h100_snapshot)
    assert code == 0
    assert (
        f"capacity        {blocks:,} blocks = {tokens:,} tokens, {concurrency:.2f}x at {length:,} tokens"
        in text
    )


@pytest.mark.parametrize(
    ("name", "block_size", "blocks"),
    [
        # 0.33's 64-aligned 576 tokens, logged ("Setting attention block size to 576", "kv cache group
        # sizes (576, 576, 576, 576)"); without the GPU type FlashInfer's checkpoint block is assumed: the
        # same 465 blocks per request, so the same figures, but said to be a lower bound
        ("qwen3-next-80b-a3b-tp2-hybrid-gdn", 576, 6_068),
    ],
)
def test_without_the_gpu_type_the_hybrid_is_a_named_lower_bound(capsys, name, block_size, blocks):
    _model, _reserve, _available, tokens, _concurrency, _length, _blocks = CASES[name]
    code, out, _err = _budget(capsys, name, "--json")
    assert code == 0
    capacity = json.loads(out)["capacity"]
    assert (capacity["block_size"], capacity["blocks"]) == (block_size, blocks)
    assert capacity["approximate"] and "lower bound" in capacity["approximate_reason"]
    assert capacity["tokens"] <= tokens


def test_mla_without_the_gpu_type_is_refused_not_rounded_to_the_default_block(capsys):
    # the reader fills block_size 16 (vLLM's default) when no line shows one; from 0.18 the MLA backend
    # picks it (16 on Hopper, 32 on Blackwell: 20 GiB / (32 × 70,272 B) = 9,549 blocks, 9,549 / 5,120 =
    # 1.8650x → 305,568 tokens, 16 fewer than a 16-token block gives), so the filled-in 16 is no evidence
    code, _out, err = _budget(capsys, "deepseek-v3-tp8-mla-hopper")
    assert code == 2
    assert err.startswith("error: ") and "MLA attention backend pick the block size" in err
    assert "--nvidia-smi" in err


@pytest.fixture
def deepseek_v32_config(tmp_path):
    """DeepSeek-V3.2's architecture: DeepSeek-V3's (61 MLA layers, latent 512 + 64) with the sparse
    attention's indexer (``index_topk`` 2,048)."""
    from kvplan.io.model_config import read_model_config

    config = read_model_config("deepseek-v3")
    config = {key: value for key, value in config.items() if not key.startswith("_")}
    config["_source"] = {"model": "deepseek-ai/DeepSeek-V3.2"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "index_topk": 2048}))
    return str(path)


def test_hisparse_host_pool_is_flagged_not_compared_and_never_over_predicted(capsys, deepseek_v32_config):
    # DeepSeek-V3.2 TP 8, 0.33, fp8_ds_mla (656 B per token per layer), HiSparse with an 8 GiB host pool.
    # vLLM: the host source group's page is 61 × 64 × 656 = 2,561,024 B (hisparse/layout.py, unshared
    # pool: stride = page): 8 GiB // 2,561,024 = 3,354 host blocks; a 131,072-token request takes
    # ceil(131,072 / 64) = 2,048 of them → host limit 3,354 / 2,048 = 1.6377, below the GPU pool's, so
    # "GPU + host KV cache size: int(1.6377 × 131,072) = 214,656 tokens, ... 1.64x".
    # kvplan's GPU pool alone (the latent and the indexer's 132 B per layer: 61 × 64 × 788 = 3,076,352 B a
    # block; HiSparse's resident and hot groups not modelled): 20 GiB / 3,076,352 = 6,980 blocks → 3.41x,
    # 446,720 tokens: 2.1 × what vLLM allocates. Capped at the logged figure: the budget (6,980 blocks =
    # 21,472,936,960 B) minus one block against the most memory 20 GiB + 0.005 GiB (21,480,205,189 B) →
    # 214,656 / 131,072 × 21,469,860,608 / 21,480,205,189 = 1.63691 → int(1.63691 × 131,072) = 214,552.
    log = str(TESTS_DATA_DIR / "v0.33-deepseek-v3.2-tp8-hisparse.log")
    # rank 7's room 25,470,666,014 − 20 GiB = 3,995,829,534 (the suggestion lines of the MLA case)
    argv = ["budget", log, "--model", deepseek_v32_config, "--reserve", "3995829534"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    capacity = data["capacity"]
    assert data["uniform_budget_bytes"] == 6_980 * 3_076_352
    assert capacity["approximate"] and "HiSparse" in capacity["approximate_reason"]
    assert capacity["tokens"] == 214_552 <= 214_656
    assert round(capacity["max_concurrency"], 5) == 1.63691
    assert data["cross_check"].startswith("nothing to cross-check: the logged 'GPU + host KV cache size'")
    assert any("HiSparse keeps KV cache on the host too" in warning for warning in data["warnings"])
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "capacity        6,980 blocks = 214,552 tokens, 1.64x at 131,072 tokens" in captured.out
    assert "cross-check     nothing to cross-check: the logged 'GPU + host KV cache size'" in captured.out
    assert "HiSparse keeps KV cache on the host too" in captured.err


def test_a_block_override_below_the_budget_is_no_warning(capsys, h100_snapshot):
    # 4,096 blocks × 1,310,720 B (80 layers × 2 × 8/4 heads × 128 × 2 B × 16) = 5,368,709,120 B (5 GiB)
    # fit in the 12 GiB budget (9,830 blocks): the launch allocates less than the budget
    code, out, err = _budget(
        capsys, "llama-3.1-70b-tp4-block-override", "--nvidia-smi", h100_snapshot, "--json"
    )
    assert code == 0
    assert "num_gpu_blocks_override" not in err
    assert not [w for w in json.loads(out)["warnings"] if "num_gpu_blocks_override" in w]


def test_a_block_override_beyond_the_budget_is_warned(capsys, h100_snapshot):
    # reserve = rank 3's room 17,283,384,606 − 4 GiB (4,294,967,296) = 12,988,417,310: the budget is
    # 4 GiB // 1,310,720 B = 3,276 blocks = 4,293,918,720 B, less than the override's 4,096 blocks ×
    # 1,310,720 B = 5,368,709,120 B that vLLM allocates whatever the memory
    log = str(TESTS_DATA_DIR / "v0.33-llama-3.1-70b-tp4-block-override.log")
    args = ["budget", log, "--model", "llama-3.1-70b", "--reserve", "12988417310"]
    assert main([*args, "--nvidia-smi", h100_snapshot, "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["uniform_budget_bytes"] == 3_276 * 1_310_720 == 4_293_918_720
    expected = (
        "num_gpu_blocks_override=4,096: 4,096 blocks × 1,310,720 B = 5,368,709,120 B (5 GiB) per rank, "
        "budget 4,293,918,720 B"
    )
    assert [w for w in data["warnings"] if w.startswith(expected) and "exceed the budget" in w]
    assert "warning: " + expected in captured.err
    from kvplan import plan

    decision = plan.decide([log], plan.Policy(12_988_417_310), plan.ModelLayout("llama-3.1-70b", {}))
    check = [c for c in decision.checks if c.name == "num_gpu_blocks_override fits the budget"]
    assert [c.passed for c in check] == [False]
