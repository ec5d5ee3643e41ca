"""Argument groups shared by the commands: the model/layout, nvidia-smi and load-policy arguments.

Building them imports neither pandas nor the model code: the ``--kv-cache-dtype`` names are read
from :data:`kvplan.kvspec.KV_CACHE_DTYPE_BYTES` only when the flag is given or its help is shown.

>>> parser = argparse.ArgumentParser()
>>> add_model_arguments(parser)
>>> layout_options(parser.parse_args(["--model", "llama-3.1-70b", "--tp", "4"]))["tp"]
4
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

from kvplan.capacity import DEFAULT_BLOCK_SIZE
from kvplan.cli.errors import CliError
from kvplan.cli.sizes import block_size, positive_int

#: --model options that mean nothing without --model (--block-size also sizes `kvplan capacity` alone).
MODEL_ONLY_OPTIONS = ("tp", "pp", "dcp", "kv_cache_dtype", "vllm_version", "max_num_batched_tokens")
#: The layout options of a model config, as :class:`kvplan.plan.ModelLayout` takes them.
LAYOUT_OPTIONS = ("tp", "pp", "dcp", "kv_cache_dtype", "block_size", "vllm_version", "max_num_batched_tokens")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --model/--tp/--pp/--dcp/--kv-cache-dtype/--block-size/--vllm-version/--max-num-batched-tokens."""
    group = parser.add_argument_group(
        "model and layout", "bytes per token per rank from a model config, as vLLM sizes the KV cache"
    )
    group.add_argument(
        "--model",
        metavar="CONFIG",
        help="a config.json path, or a name of the catalogue kvplan/models/ (e.g. llama-3.1-70b)",
    )
    group.add_argument(
        "--tp", type=positive_int, help="tensor-parallel size (needed with --model unless the logs show it)"
    )
    group.add_argument("--pp", type=positive_int, help="pipeline-parallel size (default: the logs', else 1)")
    group.add_argument(
        "--dcp", type=positive_int, help="decode-context-parallel size (default: the logs', else 1)"
    )
    group.add_argument(
        "--kv-cache-dtype",
        choices=KVCacheDtypes(),
        metavar="DTYPE",
        help="vLLM's --kv-cache-dtype, one of %(choices)s (default: the logs', else auto = the model dtype)",
    )
    group.add_argument(
        "--block-size",
        type=block_size,
        help=f"tokens per block (default {DEFAULT_BLOCK_SIZE}; with --model, vLLM's choice "
        "for the model: 64 for MLA, larger for hybrid Mamba models)",
    )
    group.add_argument(
        "--vllm-version",
        metavar="V",
        help="vLLM release whose arithmetic to reproduce (default: the newest known)",
    )
    group.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        metavar="N",
        help="vLLM's --max-num-batched-tokens; sizes sliding-window layers exactly",
    )


class KVCacheDtypes:
    """The ``--kv-cache-dtype`` names vLLM accepts, as argparse ``choices``, read when first asked.

    >>> "fp8" in KVCacheDtypes(), "fp7" in KVCacheDtypes()
    (True, False)
    """

    def __iter__(self) -> Iterator[str]:
        from kvplan.kvspec import KV_CACHE_DTYPE_BYTES

        return iter(KV_CACHE_DTYPE_BYTES)

    def __contains__(self, name: object) -> bool:
        return name in list(self)


def add_nvidia_smi_argument(parser: argparse.ArgumentParser, snapshot: str) -> None:
    """Add the repeatable ``--nvidia-smi CSV``: ``snapshot`` says which boot and what it joins."""
    parser.add_argument(
        "--nvidia-smi",
        "--dcgm",
        action="append",
        default=[],
        metavar="CSV",
        help=f"nvidia-smi --query-gpu (and --query-compute-apps) CSV {snapshot}; repeat for both. "
        "A DCGM exporter scrape of the host's GPUs (--dcgm SCRAPE) stands for the --query-gpu CSV",
    )


def refuse_layout_without_model(
    args: argparse.Namespace, options: Sequence[str] = MODEL_ONLY_OPTIONS
) -> None:
    """Layout flags mean nothing without --model: refused rather than silently ignored."""
    given = [f"--{name.replace('_', '-')}" for name in options if getattr(args, name, None) is not None]
    if given:
        raise CliError(f"{', '.join(given)} describe the model's layout: give --model CONFIG with them")


def layout_options(args: argparse.Namespace) -> dict:
    """The :data:`LAYOUT_OPTIONS` the --model arguments give (None where not given)."""
    return {name: getattr(args, name) for name in LAYOUT_OPTIONS}


def add_load_arguments(parser: argparse.ArgumentParser, files: str) -> None:
    """``--load FILE ...`` (``files`` says whose) and how approve and gate judge them: --max-preemptions,
    --max-capacity-loss and --year."""
    parser.add_argument("--load", nargs="+", default=[], metavar="LOG_OR_METRICS", help=files)
    parser.add_argument(
        "--max-preemptions",
        type=int,
        metavar="N",
        help="with --load: preemptions allowed in the run (default 0)",
    )
    parser.add_argument(
        "--max-capacity-loss",
        type=float,
        metavar="PCT",
        help="with --load, for a run at a manual --kv-cache-memory-bytes value: bound on "
        "the KV tokens lost against the approved profiled boot [%%] (default: "
        "reported, no bound)",
    )
    parser.add_argument(
        "--year", type=positive_int, help="with --load: year of vLLM's yearless MM-DD timestamps"
    )


def load_policy(args: argparse.Namespace):
    """The :class:`kvplan.plan.LoadPolicy` of --max-preemptions, --max-capacity-loss and --year; None
    without --load."""
    given = [args.max_preemptions, args.max_capacity_loss, args.year]
    if not args.load and getattr(args, "start", None) is None:  # --prometheus --start: load evidence too
        if any(value is not None for value in given):
            raise CliError("--max-preemptions, --max-capacity-loss and --year apply to --load files only")
        return None
    from kvplan import plan

    allowed = 0 if args.max_preemptions is None else args.max_preemptions
    return plan.LoadPolicy(allowed, args.year, args.max_capacity_loss)
