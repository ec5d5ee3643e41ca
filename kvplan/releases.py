"""What kvplan knows of vLLM releases: each fact is one constant, the first release ``(major, minor, patch)`` with
the behaviour and a comment saying what vLLM changed and where (paths under ``vllm/`` in the release wheel);
compare with ``version >= NAME``."""

from __future__ import annotations

import re

Release = tuple[int, int, int]

# --- the KV arithmetic kvplan repeats (kvplan.kvspec) ------------------------------------------
#: The oldest release whose KV arithmetic kvplan repeats (V0 ``worker/cache_engine.py``).
OLDEST_KV_ARITHMETIC: Release = (0, 5, 0)
#: Release assumed when none is given: the newest that ``vllm-0.26-0.33.md`` describes.
NEWEST_KNOWN: Release = (0, 33, 0)
#: MLA models cache one latent per token (``attention/backends/mla``); before, K and V per head.
MLA_FROM: Release = (0, 7, 1)
#: ``platforms/cuda.py`` forces 64-token blocks for FlashMLA ("Forcing kv cache block size to 64").
MLA_BLOCK_FORCED_FROM: Release = (0, 8, 0)
#: FlashMLA keeps a requested block size that is a multiple of 64 (``platforms/cuda.py`` ``% 64``);
#: 0.8–0.11 force 64 unless it is exactly 64.
MLA_BLOCK_MULTIPLE_KEPT_FROM: Release = (0, 12, 0)
#: The attention backend chooses the MLA block size (``platforms/interface.py`` backend preference:
#: FLASH_ATTN_MLA 16 on Hopper, FLASHINFER_MLA 32 on Blackwell, FLASHMLA 64 for fp8 KV).
MLA_BACKEND_BLOCK_SIZE_FROM: Release = (0, 18, 0)
#: ``fp8_ds_mla`` 656-byte pages (DeepSeek-V3.2, ``v1/kv_cache_interface.py`` ``MLAAttentionSpec``).
FP8_DS_MLA_FROM: Release = (0, 11, 0)
#: The hybrid KV cache manager (``v1/core/kv_cache_utils.py``): sliding-window layers keep their
#: window only; before, they were sized as full attention.
HYBRID_KV_MANAGER_FROM: Release = (0, 9, 0)
#: "GPU KV cache size" divides the blocks among the KV cache groups (``kv_cache_utils.py``).
TOKENS_PER_GROUP_FROM: Release = (0, 9, 0)
#: "Maximum concurrency" = blocks / blocks per request (``kv_cache_utils.py``); before, tokens / L.
CONCURRENCY_FROM_BLOCKS_FROM: Release = (0, 9, 1)
#: Hybrid Mamba / linear-attention models run on V1 with a KV spec kvplan sizes (``MambaSpec``).
HYBRID_MAMBA_FROM: Release = (0, 10, 0)
#: Decode context parallel exists; "GPU KV cache size" is multiplied by the DCP size
#: (``kv_cache_utils.py``) up to 0.20.
DCP_FROM: Release = (0, 11, 0)
#: Hybrid groups take the largest kind's layer count when it is under 1.25 × the smallest's
#: (``kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size``); 0.11 has no ratio (min).
GROUP_SIZE_RATIO_FROM: Release = (0, 12, 0)
#: The ratio becomes 1.5 (vLLM PR #36684; ``kv_cache_utils.py``).
GROUP_SIZE_RATIO_1_5_FROM: Release = (0, 18, 0)
#: "GPU KV cache size" = ``int(max_concurrency × max_model_len)`` (``kv_cache_utils.py``); the DCP
#: "Multiplying the GPU KV cache size" line is gone.
TOKENS_FROM_CONCURRENCY_FROM: Release = (0, 21, 0)
#: Sliding-window groups hold ``W − 1 + max_in_flight_tokens`` tokens, in-flight = concurrent batches ×
#: max_num_batched_tokens, 2 batches under async scheduling (``v1/kv_cache_interface.py``,
#: ``config/vllm.py``); before, ``W − 1 + max_num_batched_tokens``.
IN_FLIGHT_TOKENS_FROM: Release = (0, 26, 0)
#: Async scheduling is on by default (``config/vllm.py``), so in-flight = 2 × max_num_batched_tokens.
ASYNC_SCHEDULING_DEFAULT_FROM: Release = (0, 26, 0)
#: Hybrid models default to prefix caching, hence Mamba cache mode "align" (``config/model.py``,
#: ``model_executor/models/config.py``): 2 Mamba blocks per request (``v1/kv_cache_interface.py``).
MAMBA_ALIGN_FROM: Release = (0, 26, 0)
#: Auto-fit ``--max-model-len -1`` and the one-request start-up check (``check_enough_kv_cache_memory``)
#: plan against the blocks less the null block the block pool holds back (``v1/core/kv_cache_utils.py``
#: "Reserve the null block"); before, against every block.
AUTO_FIT_NULL_BLOCK_FROM: Release = (0, 29, 0)
#: Align mode keeps one more Mamba block, a prefill checkpoint, for FlashInfer gated delta net
#: (``model_executor/layers/mamba/qwen_gdn_linear_attn.py``), and aligns the attention block size
#: of such hybrids to a multiple of 64 (``platforms/interface.py``, ``v1/attention/backends/gdn_attn.py``).
GDN_PREFILL_CHECKPOINT_FROM: Release = (0, 33, 0)

# --- what logs show (kvplan.io, cli) ---------------------------------------------------------
#: "Current kv cache memory in use is N bytes" (exact bytes) and ``--kv-cache-memory-bytes``.
KV_CACHE_MEMORY_BYTES_FROM: Release = (0, 10, 2)
#: "GPU KV cache size" and "Maximum concurrency" are logged once per worker, from that worker's
#: memory (``v1/core/kv_cache_utils.py``), from this release up to :data:`PER_WORKER_KV_LINES_UNTIL`.
PER_WORKER_KV_LINES_FROM: Release = (0, 9, 0)
#: The last release that logs the KV figures once per worker.
PER_WORKER_KV_LINES_UNTIL: Release = (0, 11, 0)
#: V1 is the default engine (``envs.py`` ``VLLM_USE_V1``); before, a log without a V1 marker is V0.
V1_DEFAULT_FROM: Release = (0, 8, 0)
#: V1 refuses to start when a rank's free memory is below ``total × gpu_memory_utilization``
#: (``v1/worker/gpu_worker.py`` ``init_device``; ``ceil`` in ``v1/worker/utils.py:request_memory`` by 0.20),
#: also with ``--kv-cache-memory-bytes``; V0 (``worker/worker.py``) and V1 before it have no such check.
STARTUP_FREE_CHECK_FROM: Release = (0, 9, 1)
#: "Available KV cache memory" is printed on local rank 0 only (``v1/worker/gpu_worker.py``) from
#: this release up to :data:`SUGGESTION_INFO_FROM`.
LOCAL_RANK0_ONLY_FROM: Release = (0, 11, 1)
#: The --kv-cache-memory suggestion is printed at INFO on every rank (``v1/worker/gpu_worker.py``).
SUGGESTION_INFO_FROM: Release = (0, 26, 0)


def version_tuple(version: object) -> tuple[int, ...] | None:
    """``(major, minor, patch)`` of a vLLM version string (``0.11.1rc2`` → ``(0, 11, 1)``), None when unknown."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(version)) if isinstance(version, str) else None
    if match is None:
        return None
    return tuple(int(part or 0) for part in match.groups())


def local_rank0_only(version: tuple[int, ...] | None) -> bool:
    """True when a release (None: unknown) may print 'Available KV cache memory' on local rank 0 alone
    and the --kv-cache-memory suggestion at DEBUG only: 0.11.1 up to 0.26."""
    return version is None or LOCAL_RANK0_ONLY_FROM <= version < SUGGESTION_INFO_FROM


#: Why lines of other ranks may be missing from a complete log: Ray's log deduplication.
RAY_DEDUP_HINT = (
    "; under Ray, a '[repeated Nx across cluster]' line means Ray deduplicated the other ranks' lines: "
    "rerun with RAY_DEDUP_LOGS=0 for per-rank numbers"
)


def rank0_only_advice(version: tuple[int, ...] | None, ray_hint: bool = True) -> str:
    """Why a log shows the room of local rank 0 only, and how to get every rank's, for a release (``ray_hint``: name
    Ray's log deduplication as a cause too)."""
    ray = RAY_DEDUP_HINT if ray_hint else ""
    shown = ".".join(map(str, version)) if version else None
    if version is None:  # issue 26: a log cut short of its version line may well be from 0.26+
        return (
            "the log does not say which vLLM wrote it: vLLM 0.11.1–0.25 prints 'Available KV cache memory' "
            "on local rank 0 alone (rerun with VLLM_LOGGING_LEVEL=DEBUG for per-rank numbers, or accept rank 0 "
            "for all ranks explicitly with --assume-uniform), while vLLM ≥ 0.26 prints the --kv-cache-memory "
            "suggestion on every rank, so a log of it that lacks them was cut short: give the whole log"
        )
    if local_rank0_only(version):
        return (
            f"vLLM {shown} prints 'Available KV cache memory' on local rank 0 alone; for per-rank numbers "
            "rerun with VLLM_LOGGING_LEVEL=DEBUG or vLLM ≥ 0.26 (suggestion line on every rank), or accept "
            "rank 0 for all ranks explicitly with --assume-uniform"
        )
    if version >= SUGGESTION_INFO_FROM:
        return (
            f"vLLM {shown} prints the --kv-cache-memory suggestion on every rank at INFO, so the other "
            "ranks' lines are missing: the log was cut off or filtered; give the whole log of every rank"
            f"{ray}"
        )
    return (
        f"vLLM {shown} prints 'Available KV cache memory' on every rank, so the other ranks' lines are "
        f"missing: the log was cut off or filtered; give the whole log of every rank{ray}"
    )
