"""``kvplan capacity`` (what a per-GPU KV budget buys) and ``kvplan drift`` (a reference budget, later)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from kvplan.cli.common import (
    EXIT_OK,
    CliError,
    add_model_arguments,
    describe,
    layout_options,
    positive_int,
    positive_size,
    print_json,
    print_table,
    refuse_layout_without_model,
    size,
    size_list,
)
from kvplan.units import format_budget, format_size

CAPACITY_HELP = """\
What a per-GPU KV budget buys, from bytes per token or from a model config and layout (reproducing vLLM's 'GPU
KV cache size' and 'Maximum concurrency'). Give exactly one of --bytes-per-token or --model (one of them is
required).

For example:
  kvplan capacity --kv-bytes 12GiB --bytes-per-token 256KiB --max-model-len 8192
  kvplan capacity --model llama-3.1-70b --tp 4 --kv-bytes 12GiB --max-model-len 32768
"""


def add_capacity(parser: argparse.ArgumentParser) -> None:
    describe(parser, CAPACITY_HELP)
    parser.add_argument("--kv-bytes", type=positive_size, required=True, help="KV budget per GPU")
    parser.add_argument("--bytes-per-token", type=size, help="KV bytes per token per GPU (or give --model)")
    parser.add_argument("--max-model-len", type=positive_int, required=True, help="sequence length")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_arguments(parser)
    parser.set_defaults(run=run_capacity)


def run_capacity(args: argparse.Namespace) -> int:
    spec = None
    if not args.model:
        refuse_layout_without_model(args)
    elif args.tp is None:
        raise CliError("--model needs --tp N: the tensor-parallel size the ranks run with")
    else:
        from kvplan.io.model_config import read_model_config
        from kvplan.kvspec import kv_spec, options_for_logs

        spec = kv_spec(read_model_config(args.model), **options_for_logs(layout_options(args), {}))
    if (spec is None) == (args.bytes_per_token is None):
        raise CliError("give exactly one of --bytes-per-token or --model")
    if spec is None:
        from kvplan.kvspec.capacity import DEFAULT_BLOCK_SIZE, capacity

        result = capacity(
            args.kv_bytes, args.bytes_per_token, args.max_model_len, args.block_size or DEFAULT_BLOCK_SIZE
        )
        data = result.to_dict()
    else:
        data = spec.capacity(args.kv_bytes, args.max_model_len).to_dict()
        if data["blocks"] == 0:
            raise CliError(
                f"--kv-bytes {format_size(args.kv_bytes)} holds no block of "
                f"{format_size(data['block_bytes'])} ({data['block_size']} tokens)"
            )
    if args.json:
        return print_json(data)
    if spec is not None:
        print(
            f"model             {data['model']} (tp {spec.tp}, pp {spec.pp}, dcp {spec.dcp}, "
            f"KV {spec.kv_cache_dtype}, vLLM {spec.vllm_version})"
        )
    print(f"bytes per token   {format_size(data['bytes_per_token'])}")
    print(f"block             {format_size(data['block_bytes'])} ({data['block_size']} tokens)")
    print(f"blocks            {data['blocks']:,}")
    print(f"tokens            {data['tokens']:,}")
    print(f"max concurrency   {data['max_concurrency']:.2f}x at {data['max_model_len']:,} tokens")
    if spec is not None:
        if spec.block_size_note:
            print(f"block size        {spec.block_size_note}")
        if spec.approximate:
            print(f"approximate       {spec.approximate_reason}")
        if spec.pp > 1:
            stages = [
                (
                    st["pp_rank"],
                    f"{st['first_layer']}-{st['end_layer'] - 1}",
                    format_size(st["bytes_per_token"]),
                    format_size(st["block_bytes"]),
                    f"{st['blocks']:,}",
                )
                for st in data["stages"]
            ]
            print_table(["stage", "layers", "per token", "block", "blocks"], stages)
    return EXIT_OK


DRIFT_HELP = """\
B_adj = B_ref − max(0, F_ref − F_boot) − guard per rank; never raises a value. --ref-free, --ref-budget and
--boot-free are lists per rank: comma-separated sizes in rank order, one per rank (a single size stands for
every rank); --guard is one size for every rank.

For example:
  kvplan drift --ref-free 42GiB --ref-budget 30GiB --boot-free 40.75GiB --guard 0.5GiB
  kvplan drift --ref-free 42GiB,42GiB,42GiB,42GiB --ref-budget 30GiB,30GiB,30GiB,30GiB --boot-free 41.8GiB,42.1GiB,40.6GiB,41.9GiB --guard 0.5GiB
"""


def add_drift(parser: argparse.ArgumentParser) -> None:
    describe(parser, DRIFT_HELP)
    for flag, what in (
        ("--ref-free", "free at reference startup"),
        ("--ref-budget", "reference safe budget"),
        ("--boot-free", "free at this startup"),
    ):
        per_rank = f"{what}, per rank (comma-separated, rank order)"
        parser.add_argument(flag, type=size_list, required=True, metavar="SIZE,...", help=per_rank)
    guard = "extra guard per rank, one size for every rank (policy: give it; 0GiB for none)"
    parser.add_argument("--guard", type=size, required=True, help=guard)
    parser.add_argument("--block-bytes", type=positive_size, help="round down to whole blocks of this size")
    total = "each rank's total GPU memory (rank order): gives the companion --gpu-memory-utilization"
    parser.add_argument("--total", type=size_list, metavar="SIZE,...", help=total)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run_drift)


def run_drift(args: argparse.Namespace) -> int:
    from kvplan.drift import drift_budget

    result = drift_budget(args.ref_budget, args.ref_free, args.boot_free, args.guard)
    if args.total is not None and len(args.total) not in (1, len(result.ranks)):
        raise CliError(
            f"--total gives {len(args.total)} sizes for {len(result.ranks)} ranks: one per rank, rank order"
        )
    totals = (
        None
        if args.total is None
        else tuple(args.total * len(result.ranks) if len(args.total) == 1 else args.total)
    )
    result = replace(result, block_bytes=args.block_bytes, total_bytes=totals)
    if args.json:
        return print_json(result.to_dict())
    print(
        f"adjusted budget  {format_budget(result.adjusted_uniform_bytes)} per GPU "
        f"(limiting rank {result.limiting_rank})"
    )
    print(f"flag             {result.flag}")
    print(f"launch flags     {' '.join(result.launch_flags)}")
    if result.block_bytes is None:
        print("note             not rounded to whole KV blocks: give --block-bytes (vLLM rounds down itself)")
    if result.gpu_memory_utilization is None:
        print(
            "note             no --gpu-memory-utilization: vLLM refuses to start when a rank's free memory is below "
            "ceil(total × U); give --total (each rank's total memory) for the largest U this boot passes"
        )
    if result.reprofile_to_raise:
        print(
            "note             some rank has more free memory than at the reference: "
            "re-profile to raise the value"
        )
    ranks = result.to_dict()["ranks"]
    rows = [(r["rank"], format_size(r["drift_bytes"]), format_size(r["adjusted_bytes"])) for r in ranks]
    print_table(["rank", "drift", "adjusted"], rows)
    return EXIT_OK
