"""What a matched line family means: each handler turns a regex match into ledger values."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from kvplan.io.vllm.manual import printed_manual
from kvplan.io.vllm.values import config_items, cudagraph_mode, gib_bytes

NUM = r"(-?\d+(?:\.\d+)?)"


class Fact(NamedTuple):
    """What one matched line says.

    ``scope`` is ``rank`` (a value of the rank that printed it), ``engine`` (an engine-level value:
    KV cache size, concurrency, blocks), ``config`` (compatibility-key fields), ``assign`` (ties the
    printing process to a rank), ``outcome`` (``oom``/``error`` with text), ``flag`` (boot facts).
    """

    family: str
    scope: str
    values: dict


Handler = Callable[[re.Match], dict]


def weights(m: re.Match) -> dict:
    return {"weights_bytes": gib_bytes(m.group(1), m.group(2))}


_V0_RESULT_FIELDS = {
    "total_bytes": re.compile(r"total_gpu_memory=" + NUM + r" ?Gi[Bb]"),
    "non_torch_bytes": re.compile(r"non_torch_memory=" + NUM + r" ?Gi[Bb]"),
    "available_kv_bytes": re.compile(r"kv_cache_size=" + NUM + r" ?Gi[Bb]"),
}


def v0_one_line(m: re.Match) -> dict:
    """0.6.4's ``Memory profiling results: key=value …`` (space- or comma-separated forms)."""
    values = {}
    for column, pattern in _V0_RESULT_FIELDS.items():
        found = pattern.search(m.string)
        if found:
            values[column] = gib_bytes(found.group(1))
    util = re.search(r"gpu_memory_utilization=(\d+(?:\.\d+)?)", m.string)
    if util:
        values["gpu_memory_utilization"] = float(util.group(1))
    return values


def v0_total(m: re.Match) -> dict:
    return {
        "total_bytes": gib_bytes(m.group(1)),
        "gpu_memory_utilization": float(m.group(2)),
        "requested_bytes": gib_bytes(m.group(3)),
    }


def v0_parts(m: re.Match) -> dict:
    return {
        "weights_bytes": gib_bytes(m.group(1)),
        "non_torch_bytes": gib_bytes(m.group(2)),
        "activation_peak_bytes": gib_bytes(m.group(3)),
        "available_kv_bytes": gib_bytes(m.group(4)),
    }


def profile_result(m: re.Match) -> dict:
    """V1 DEBUG profile result; 0.27+ prints total consumed (weights + non-torch) instead."""
    non_kv, torch_peak, third, weights = (gib_bytes(m.group(i)) for i in (1, 2, 4, 5))
    if m.group(3).startswith("non-torch"):
        return {"activation_peak_bytes": torch_peak, "non_torch_bytes": third, "weights_bytes": weights}
    return {
        "weights_bytes": weights,
        "non_torch_bytes": third - weights,
        "activation_peak_bytes": non_kv - third,
    }


def init_free_old(m: re.Match) -> dict:
    return {"init_free_bytes": gib_bytes(m.group(1)), "requested_bytes": gib_bytes(m.group(3))}


def init_free(m: re.Match) -> dict:
    return {
        "init_free_bytes": gib_bytes(m.group(1)),
        "gpu_memory_utilization": float(m.group(2)),
        "requested_bytes": gib_bytes(m.group(3)),
    }


def snapshot(m: re.Match) -> dict:
    return {"init_free_bytes": gib_bytes(m.group(1)), "total_bytes": gib_bytes(m.group(2))}


def device_free(m: re.Match) -> dict:
    return {
        "init_free_bytes": gib_bytes(m.group(1)),
        "total_bytes": gib_bytes(m.group(2)),
        "gpu_memory_utilization": float(m.group(3)),
        "requested_bytes": gib_bytes(m.group(4)),
    }


def external_weights_over(m: re.Match) -> dict:
    """0.32+ ``ValueError``: the weights held outside the process exceed the utilization budget."""
    return {
        "external_weights_bytes": gib_bytes(m.group(1)),
        "total_bytes": gib_bytes(m.group(2)),
        "gpu_memory_utilization": float(m.group(3)),
        "requested_bytes": gib_bytes(m.group(4)),
    }


def usage_old(m: re.Match) -> dict:
    return {
        "weights_bytes": gib_bytes(m.group(1)),
        "activation_peak_bytes": gib_bytes(m.group(2)),
        "non_torch_bytes": gib_bytes(m.group(3)),
        "cuda_graph_bytes": gib_bytes(m.group(4)),
    }


def usage_new(m: re.Match) -> dict:
    return {"activation_peak_bytes": gib_bytes(m.group(2)), "cuda_graph_bytes": gib_bytes(m.group(3))}


def suggestion(m: re.Match) -> dict:
    return {"suggested_fit_bytes": int(m.group(1)), "suggested_full_bytes": int(m.group(2))}


def in_use(m: re.Match) -> dict:
    return {"kv_in_use_bytes": int(m.group(1)) if m.group(1) else gib_bytes(m.group(2))}


def manual(m: re.Match) -> dict:
    return {"init_free_bytes": gib_bytes(m.group(1)), **printed_manual(gib_bytes(m.group(2)))}


def plan_applied(m: re.Match) -> dict:
    exact = int(m.group(1))
    return {"manual_kv_bytes": exact, "manual_kv_max_bytes": exact, "init_free_bytes": gib_bytes(m.group(4))}


def graph_took(m: re.Match) -> dict:
    return {"cuda_graph_bytes": gib_bytes(m.group(1))}


def graph_pool(m: re.Match) -> dict:
    return {"cuda_graph_bytes": gib_bytes(m.group(1)), "cuda_graph_estimate_bytes": gib_bytes(m.group(2))}


def graph_estimate(m: re.Match) -> dict:
    return {"cuda_graph_estimate_bytes": gib_bytes(m.group(1))}


def tokens(m: re.Match) -> dict:
    values = {"kv_cache_tokens": int(m.group(1).replace(",", ""))}
    if m.group(2):
        values.update(max_model_len=int(m.group(2).replace(",", "")), max_concurrency=float(m.group(3)))
    return values


def concurrency(m: re.Match) -> dict:
    return {"max_model_len": int(m.group(1).replace(",", "")), "max_concurrency": float(m.group(2))}


def blocks(m: re.Match) -> dict:
    return {"num_gpu_blocks": int(m.group(1))}


def version(m: re.Match) -> dict:
    return {"vllm_version": m.group(1).lstrip("v")}


def engine_config(m: re.Match) -> dict:
    values = dict(config_items(m.group(2)))
    mode = cudagraph_mode(m.group(2))
    if mode:
        values["cudagraph_mode"] = mode
    if m.group(1):
        values["vllm_version"] = m.group(1).lstrip("v")
    values["_v1"] = "V1" in m.group(0)[:40]
    return values


def non_default(m: re.Match) -> dict:
    values = dict(config_items(m.group(1).strip().removeprefix("{").removesuffix("}"), ":"))
    mode = cudagraph_mode(m.group(1))
    if mode:
        values["cudagraph_mode"] = mode
    return values


def namespace(m: re.Match) -> dict:
    return dict(config_items(m.group(1)))


def assign(m: re.Match) -> dict:
    return {
        "rank": int(m.group(1)),
        "world_size": int(m.group(2)),
        "dp_rank": int(m.group(3)),
        "pp_rank": int(m.group(4)),
        "tp_rank": int(m.group(6)),
    }


def world_debug(m: re.Match) -> dict:
    return {"world_size": int(m.group(1)), "rank": int(m.group(2))}


def block_size(m: re.Match) -> dict:
    return {"block_size": int(m.group(1))}


def text(m: re.Match) -> dict:
    return {"text": m.string.strip()}


def failure(outcome: str) -> Handler:
    """A failure family's handler: ``outcome`` (oom or error) and the message as its text."""
    return lambda m: {"outcome": outcome, **text(m)}


def flag(name: str, value: object = True) -> Handler:
    return lambda m: {name: value}
