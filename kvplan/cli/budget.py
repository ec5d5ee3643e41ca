"""``kvplan budget``: the uniform ``--kv-cache-memory-bytes`` of vLLM logs (or per-rank room) and a reserve."""

from __future__ import annotations

import argparse

from kvplan.cli.common import (
    EXIT_OK,
    CliError,
    add_model_arguments,
    add_nvidia_smi_argument,
    describe,
    layout_options,
    positive_int,
    positive_size,
    print_json,
    print_table,
    print_warnings,
    reader_warnings_into,
    refuse_layout_without_model,
    size,
    size_list,
)
from kvplan.cli.prometheus import add_gpu_arguments, prometheus_gpu_files
from kvplan.escape import terminal_text
from kvplan.units import format_budget, format_size

BUDGET_HELP = """\
The largest KV budget every rank can allocate: min over ranks of (room − reserve), rounded down to whole
blocks. Room comes from the logs (each rank's worst boot) or from --room, one size per rank.

For example:
  kvplan budget data/boots/four-rank/*.log --reserve 0.9GiB
  kvplan budget --room 18.8GiB,17.6GiB,12.9GiB,16.4GiB --reserve 0.9GiB
"""

#: Rooms given by hand show no free or total memory: what to measure for the companion flag.
ROOMS_LAUNCH_WARNING = (
    "no free or total memory is known, so no --gpu-memory-utilization is given: vLLM refuses to start when a "
    "rank's free memory is below ceil(total × gpu_memory_utilization) (default 0.92), also with "
    "--kv-cache-memory-bytes; measure every rank's free and total memory at start-up (nvidia-smi "
    "--query-gpu=memory.free,memory.total --format=csv) or give the profiled boot's logs"
)


def add_budget(parser: argparse.ArgumentParser) -> None:
    describe(parser, BUDGET_HELP)
    parser.add_argument("logs", nargs="*", metavar="LOG", help="vLLM startup logs (files, folders or globs)")
    parser.add_argument(
        "--room", type=size_list, metavar="SIZE,...", help="room per rank, in rank order (no LOG)"
    )
    parser.add_argument("--reserve", type=size, required=True, help="operating reserve per rank")
    parser.add_argument("--block-bytes", type=positive_size, help="round down to whole blocks of this size")
    parser.add_argument("--assume-uniform", action="store_true", help="rank 0's room for ranks not shown")
    length = "with --model: sequence length of the concurrency figure (default: the logs')"
    parser.add_argument("--max-model-len", type=positive_int, metavar="L", help=length)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_nvidia_smi_argument(parser, "of the same boot: names the GPU type (with --model: its block size)")
    add_model_arguments(parser)
    add_gpu_arguments(parser)
    parser.set_defaults(run=run_budget)


def run_budget(args: argparse.Namespace) -> int:
    from kvplan import plan

    if bool(args.logs) == (args.room is not None):
        raise CliError("give either LOG files or --room (exactly one of them)")
    args.nvidia_smi = [*args.nvidia_smi, *prometheus_gpu_files(args)[0]]  # --prometheus --at: DCGM's
    if args.model and args.block_bytes:
        raise CliError("give --block-bytes or --model, not both: the model sets the block bytes")
    if args.block_size and not args.model:
        raise CliError("--block-size needs --model here (or give --block-bytes, the bytes of one block)")
    if args.room is not None and (args.assume_uniform or args.nvidia_smi):
        raise CliError("--assume-uniform and --nvidia-smi apply to LOG files only")
    policy = plan.Policy(args.reserve, assume_uniform=args.assume_uniform)
    if args.model:
        decision, warnings = _decide(
            args, plan.ModelLayout(args.model, layout_options(args), max_model_len=args.max_model_len), policy
        )
    else:
        refuse_layout_without_model(args)
        if args.room is not None:  # the pipeline's rule for rooms given by hand, without pandas
            decision, warnings = plan.decide_rooms(args.room, policy, args.block_bytes), []
        else:
            decision, warnings = _decide(args, None, policy)
    if decision.launch_warning is not None or decision.gpu_memory_utilization is None:
        warnings.append(decision.launch_warning or ROOMS_LAUNCH_WARNING)
    print_warnings(warnings)
    if decision.spec is not None and decision.max_model_len is None:
        raise CliError("--model needs --max-model-len L when the logs do not show max_model_len")
    if not args.json:
        _print_budget(decision)
        return EXIT_OK
    budget = decision.budget
    room_sources = dict(zip(budget.ranks, decision.room_sources))
    data = budget.to_dict()
    for rank in data["ranks"]:
        rank["room_source"] = room_sources[rank["rank"]]
    data.update(warnings=warnings, launch_flags=list(decision.launch_flags))
    data["gpu_memory_utilization"] = decision.gpu_memory_utilization
    if decision.spec is not None:
        data["capacity"] = decision.capacity_at_max_len.to_dict()
    if decision.cross_check_verdict is not None:
        data["cross_check"] = decision.cross_check_verdict
    return print_json(data)


def _decide(args: argparse.Namespace, layout, policy) -> tuple:
    """:func:`kvplan.plan.decide` of the logs (or ``--room`` with ``--model``), and its warnings."""
    from kvplan import plan

    if args.room is not None:
        evidence_in = plan.given_rooms(args.room)
    else:
        plan.require_files(args.nvidia_smi, "--nvidia-smi")
        evidence_in = plan.read_evidence(args.logs, args.nvidia_smi)
    caught: list[str] = []  # the ledger's warnings, also in decision.notes
    with reader_warnings_into(caught):
        decision = plan.decide(evidence_in, policy, layout, block_bytes=args.block_bytes)
    notes = [*decision.warnings, *decision.notes]
    return decision, notes + [note for note in caught if note not in notes]


def _print_budget(decision) -> None:
    budget, verdict = decision.budget, decision.cross_check_verdict
    print(
        f"uniform budget  {format_budget(budget.uniform_budget_bytes)} per GPU "
        f"(limiting rank {budget.limiting_rank})"
    )
    if decision.spec is not None:
        capacity = decision.capacity_at_max_len.to_dict()
        print(
            f"capacity        {capacity['blocks']:,} blocks = {capacity['tokens']:,} tokens, "
            f"{capacity['max_concurrency']:.2f}x at {capacity['max_model_len']:,} tokens"
        )
    if verdict is not None:
        print(f"cross-check     {terminal_text(verdict)}")  # names the model of the logs
    if budget.block_bytes:
        block = format_size(budget.block_bytes)
        print(
            f"rounding        down to {budget.num_blocks:,} whole blocks of {block} "
            f"(−{format_size(budget.rounding_loss_bytes)})"
        )
    else:
        print(
            "rounding        none: give --model (or --block-bytes) to round down to whole KV blocks "
            "(vLLM rounds down itself, so the value is safe)"
        )
    print(f"flag            {budget.flag}")
    print(f"launch flags    {' '.join(decision.launch_flags)}")
    print(f"allocated       {format_size(budget.allocated_total_bytes)} over {len(budget.ranks)} GPUs")
    print(f"stranded        {format_size(budget.stranded_total_bytes)} on the stronger ranks")
    print(
        f"safe budgets    min {format_size(budget.min_safe_bytes)}, median "
        f"{format_size(budget.median_safe_bytes)}, max {format_size(budget.max_safe_bytes)}"
    )
    print(
        f"min/median      {budget.min_median_ratio:.3f} "
        f"(the weak rank removes {budget.weak_rank_loss_fraction:.0%} of typical capacity)"
    )
    sizes, limiting = ("room_bytes", "safe_bytes", "stranded_bytes"), budget.limiting_rank
    rows = [
        (r["rank"], *(format_size(r[size]) for size in sizes), "<-" if r["rank"] == limiting else "")
        for r in budget.to_dict()["ranks"]
    ]
    print_table(["rank", "room", "safe", "stranded", "limits"], rows)
