"""Argument helpers shared by the commands: sizes, counts, the model/layout and load-policy arguments.

Sizes are parsed by :func:`kvplan.units.parse_size` into ``int`` bytes at this edge; a value argparse
cannot take is an ``error: kvplan CMD: argument …`` line with exit 2.

>>> size_list("13GiB,14GiB") == [13 * 2**30, 14 * 2**30]
True
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kvplan.capacity import DEFAULT_BLOCK_SIZE, VLLM_BLOCK_SIZES
from kvplan.cli.errors import CliError
from kvplan.kvspec import KV_CACHE_DTYPE_BYTES
from kvplan.units import parse_size, parse_size_list

#: --model options that mean nothing without --model (--block-size also sizes `kvplan capacity` alone).
MODEL_ONLY_OPTIONS = ("tp", "pp", "dcp", "kv_cache_dtype", "vllm_version", "max_num_batched_tokens")
#: The layout options of a model config, as :class:`kvplan.plan.ModelLayout` takes them.
LAYOUT_OPTIONS = ("tp", "pp", "dcp", "kv_cache_dtype", "block_size", "vllm_version", "max_num_batched_tokens")


def size(text: str) -> int:
    """A size such as ``0.9GiB`` in bytes."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_list(text: str) -> list[int]:
    """Comma-separated sizes ≥ 0, one per rank in rank order [bytes]."""
    try:
        sizes = parse_size_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    negative = [position for position, size in enumerate(sizes) if size < 0]
    if negative:
        raise argparse.ArgumentTypeError(f"entry {negative[0]} of {text!r} is negative: memory sizes are ≥ 0")
    return sizes


def positive_size(text: str) -> int:
    """A size > 0 [bytes]."""
    value = size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def block_size(text: str) -> int:
    """A ``--block-size`` vLLM accepts [tokens]."""
    value = positive_int(text)
    if value not in VLLM_BLOCK_SIZES:
        raise argparse.ArgumentTypeError(f"{value} is not a block size vLLM accepts {VLLM_BLOCK_SIZES}")
    return value


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --model/--tp/--pp/--dcp/--kv-cache-dtype/--block-size/--vllm-version/--max-num-batched-tokens."""
    group = parser.add_argument_group(
        "model and layout", "bytes per token per rank from a model config, as vLLM sizes the KV cache"
    )
    group.add_argument(
        "--model",
        metavar="CONFIG",
        help="a config.json path, or a catalogue name in data/models (e.g. llama-3.1-70b)",
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
        choices=list(KV_CACHE_DTYPE_BYTES),
        help="vLLM's --kv-cache-dtype (default: the logs', else auto = the model dtype)",
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


def add_load_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """--max-preemptions, --max-capacity-loss and --year: how approve and gate judge --load files."""
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
    if not args.load:
        if any(value is not None for value in given):
            raise CliError("--max-preemptions, --max-capacity-loss and --year apply to --load files only")
        return None
    from kvplan import plan

    allowed = 0 if args.max_preemptions is None else args.max_preemptions
    return plan.LoadPolicy(allowed, args.year, args.max_capacity_loss)
