"""KV bytes per token of one layer on one rank: attention pages by KV dtype, MLA latents, and the
recurrent state of linear-attention / Mamba layers (``vllm/v1/kv_cache_interface.py``).

Standard / grouped-query / multi-query attention: ``2 × kv_heads_per_rank × head_dim × dtype_bytes``;
MLA (DeepSeek-V2/V3, Kimi): one latent of ``kv_lora_rank + qk_rope_head_dim`` values, no factor 2,
the same on every TP rank; ``fp8_ds_mla`` stores 656 bytes per token per layer.

>>> kv_dtype_bytes("fp8", 2), FP8_DS_MLA_BYTES_PER_TOKEN
(1, 656)
"""

from __future__ import annotations

from kvplan.kvspec.arch import ModelArch
from kvplan.kvspec.base import KVSpecError
from kvplan.kvspec.layout import kv_heads_per_rank

#: Bytes per stored value for each ``--kv-cache-dtype``; ``auto`` follows the model dtype.
KV_CACHE_DTYPE_BYTES: dict[str, int | None] = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
}
#: Bytes per value of the dtype vLLM really served (``dtype=torch.bfloat16`` in its config line).
SERVED_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
#: ``fp8_ds_mla`` page: 512 fp8 latent values + 4 float32 scales + 64 bf16 rope values per token.
FP8_DS_MLA_BYTES_PER_TOKEN = 656
#: DeepSeek-V3.2's indexer keys are fp8 with one float32 scale per this many values (``deepseek_v2.py``
#: ``quant_block_size``), stored as uint8: ``index_head_dim + index_head_dim // 128 × 4`` bytes a token.
INDEXER_QUANT_BLOCK = 128


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int | None, model: str = "model") -> int:
    """Bytes per stored KV value for a ``--kv-cache-dtype``; ``auto`` = the model dtype.

    ``model_dtype_bytes`` None (a config without ``torch_dtype``) is refused for ``auto``: vLLM
    would serve such a config in 16 bits, but a ``--dtype float32`` launch stores 4 bytes, so
    kvplan asks rather than assumes.

    >>> kv_dtype_bytes("auto", 2), kv_dtype_bytes("fp8", 2), kv_dtype_bytes("float16", None)
    (2, 1, 2)
    """
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise KVSpecError(f"kv_cache_dtype {kv_cache_dtype!r}: expected one of {list(KV_CACHE_DTYPE_BYTES)}")
    size = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    if size is not None:
        return size
    if model_dtype_bytes is None:
        raise KVSpecError(
            f"{model}: missing field 'torch_dtype' (the model dtype sizes a kv_cache_dtype 'auto' cache): "
            "add it to the config, or give --kv-cache-dtype (e.g. bfloat16 or fp8) or the logs' dtype"
        )
    return model_dtype_bytes


def attention_bytes_per_token_per_layer(arch: ModelArch, tp: int, kv_cache_dtype: str = "auto") -> int:
    """KV bytes one token takes in one attention layer of one TP rank.

    >>> from kvplan.kvspec.arch import model_arch
    >>> attention_bytes_per_token_per_layer(model_arch({"num_hidden_layers": 80,
    ...     "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
    ...     "torch_dtype": "bfloat16"}), tp=4)
    1024
    """
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, arch.dtype_bytes, arch.name)
    kv_heads_per_rank(arch.num_kv_heads, arch.num_attention_heads, tp)  # validates the TP layout
    if arch.mla_latent_dim is not None:
        indexer = indexer_bytes_per_token(arch)
        if kv_cache_dtype == "fp8_ds_mla":
            if not arch.sparse_indexer:
                raise KVSpecError(
                    f"kv_cache_dtype 'fp8_ds_mla' is the FlashMLA-sparse format of DeepSeek-V3.2-style "
                    f"models (config field 'index_topk'); {arch.name} has none, and vLLM has no attention "
                    "backend that serves it with fp8_ds_mla (use fp8 or auto)"
                )
            return FP8_DS_MLA_BYTES_PER_TOKEN + indexer
        return arch.mla_latent_dim * dtype_bytes + indexer
    if kv_cache_dtype == "fp8_ds_mla":
        raise KVSpecError(
            f"kv_cache_dtype 'fp8_ds_mla' is for MLA models only; {arch.name} has no kv_lora_rank"
        )
    heads = kv_heads_per_rank(arch.num_kv_heads, arch.num_attention_heads, tp)
    return 2 * heads * arch.head_dim * dtype_bytes


def indexer_bytes_per_token(arch: ModelArch) -> int:
    """Bytes of the sparse-attention indexer's key cache a token takes in one layer (0 without an indexer).

    DeepSeek-V3.2 keeps it beside the MLA latent, in the same KV cache group and page
    (``UniformTypeKVCacheSpecs``: the page is the layers' pages summed): 128 fp8 values + one float32 scale
    = 132 bytes, on every TP rank.

    >>> from kvplan.kvspec.arch import model_arch
    >>> indexer_bytes_per_token(model_arch({"num_hidden_layers": 61, "num_attention_heads": 128,
    ...     "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_topk": 2048,
    ...     "torch_dtype": "bfloat16"}))
    132
    """
    if arch.index_head_dim is None:
        return 0
    return arch.index_head_dim + arch.index_head_dim // INDEXER_QUANT_BLOCK * 4


def linear_state_bytes(arch: ModelArch, tp: int) -> int:
    """Bytes of one request's recurrent state in one linear-attention / Mamba layer of a TP rank.

    Gated delta net: conv ``(2·k_heads·k_dim + v_heads·v_dim) / tp × (kernel − 1)`` plus temporal
    ``v_heads / tp × k_dim × v_dim``; Mamba-1: ``d_inner / tp × (d_conv − 1 + d_state)``; both in
    the model dtype (refused when the config names none).

    >>> from kvplan.kvspec.arch import model_arch
    >>> arch = model_arch({"num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
    ...     "head_dim": 256, "full_attention_interval": 4, "linear_num_key_heads": 16,
    ...     "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    ...     "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16"})
    >>> linear_state_bytes(arch, tp=1)
    1097728
    """
    if arch.dtype_bytes is None:
        raise KVSpecError(f"{arch.name}: missing field 'torch_dtype' (it sizes the recurrent state)")

    def shard(total: int, what: str) -> int:
        if total % tp:
            raise KVSpecError(
                f"tp {tp} does not divide {what} {total} of {arch.name}: vLLM refuses this layout"
            )
        return total // tp

    if arch.linear_kind == "gated_delta_net":
        k_heads, v_heads, k_dim, v_dim, kernel = arch.linear_dims
        conv_dim = shard(2 * k_heads * k_dim + v_heads * v_dim, "the linear-attention conv dimension")
        conv = conv_dim * (kernel - 1)
        temporal = shard(v_heads, "linear_num_value_heads") * k_dim * v_dim
        return (conv + temporal) * arch.dtype_bytes
    if arch.linear_kind == "mamba":
        d_inner, d_conv, d_state = arch.linear_dims
        return shard(d_inner, "the Mamba inner dimension") * (d_conv - 1 + d_state) * arch.dtype_bytes
    raise KVSpecError(f"{arch.name}: no linear-attention layers")
