"""The ``kvplan`` command: parse arguments, call the library, format the answer.

Every command prints one JSON object with ``--json`` and a readable table without it. Bad input
exits 2 with a one-line ``error: …`` on stderr.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NoReturn
from warnings import catch_warnings, showwarning, simplefilter

from kvplan import __version__, evidence, gate, plan
from kvplan.capacity import DEFAULT_BLOCK_SIZE, VLLM_BLOCK_SIZES, capacity
from kvplan.drift import drift_budget
from kvplan.io.model_config import read_model_config, resolve_model_config
from kvplan.io.nvidia_smi import NvidiaSmiWarning, join_snapshots
from kvplan.io.vllm import read_vllm_logs
from kvplan.io.vllm_stats import read_load_evidence
from kvplan.kvspec import (
    KV_CACHE_DTYPE_BYTES,
    KVSpec,
    kv_spec,
    options_for_logs,
)
from kvplan.ledger import LedgerWarning, compatibility_key, plain_value, room_per_rank
from kvplan.load import ROW_KEYS, finite, load_summary
from kvplan.units import format_size, parse_size, parse_size_list
from kvplan.verdict import format_checks, gate_verdict

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class CliError(ValueError):
    """Bad command-line input; printed as ``error: …`` with exit status 2."""


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size_list(text: str) -> list[int]:
    try:
        sizes = parse_size_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    negative = [position for position, size in enumerate(sizes) if size < 0]
    if negative:
        raise argparse.ArgumentTypeError(f"entry {negative[0]} of {text!r} is negative: memory sizes are ≥ 0")
    return sizes


def _positive_size(text: str) -> int:
    value = _size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _block_size(text: str) -> int:
    value = _positive_int(text)
    if value not in VLLM_BLOCK_SIZES:
        raise argparse.ArgumentTypeError(f"{value} is not a block size vLLM accepts {VLLM_BLOCK_SIZES}")
    return value


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Plain-text table with right-aligned columns, one line per row.

    >>> print(format_table([{"rank": 0, "safe": "12 GiB"}], ["rank", "safe"]))
    rank    safe
       0  12 GiB
    """
    cells = [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max([len(column), *(len(row[i]) for row in cells)]) for i, column in enumerate(columns)]
    lines = ["  ".join(column.rjust(width) for column, width in zip(columns, widths))]
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells]
    return "\n".join(lines)


#: Warnings of the readers and the ledger that a command reports as its own ``warning:`` lines / JSON.
REPORTED_WARNINGS = (LedgerWarning, NvidiaSmiWarning)


@contextmanager
def _reader_warnings_into(notes: list[str]) -> Iterator[None]:
    """Collect the :data:`REPORTED_WARNINGS` raised inside into ``notes`` (each once), not Python's print."""
    caught: list = []
    try:
        with catch_warnings(record=True) as caught:
            for category in REPORTED_WARNINGS:
                simplefilter("always", category)
            yield
    finally:
        for warning in caught:
            if not issubclass(warning.category, REPORTED_WARNINGS):
                showwarning(warning.message, warning.category, warning.filename, warning.lineno)
            elif str(warning.message) not in notes:
                notes.append(str(warning.message))


#: --model options that mean nothing without --model (--block-size also sizes `kvplan capacity` alone).
MODEL_ONLY_OPTIONS = ("tp", "pp", "dcp", "kv_cache_dtype", "vllm_version", "max_num_batched_tokens")


# --- budget -----------------------------------------------------------------------------------


def _add_budget(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "budget",
        help="uniform --kv-cache-memory-bytes from vLLM logs (or per-rank room) and a reserve",
        description="The largest KV budget every rank can allocate: min over ranks of "
        "(room − reserve), rounded down to whole blocks. Room comes from the logs (each rank's worst "
        "boot) or from --room. "
        "Example: kvplan budget data/boots/four-rank/*.log --reserve 0.9GiB  "
        "Example: kvplan budget --room 18.8GiB,17.6GiB,12.9GiB,16.4GiB --reserve 0.9GiB",
    )
    parser.add_argument("logs", nargs="*", metavar="LOG", help="vLLM startup logs (files, folders or globs)")
    parser.add_argument("--room", type=_size_list, help="room per rank, comma-separated, rank order (no LOG)")
    parser.add_argument("--reserve", type=_size, required=True, help="operating reserve per rank")
    parser.add_argument("--block-bytes", type=_positive_size, help="round down to whole blocks of this size")
    parser.add_argument("--assume-uniform", action="store_true",
                        help="logs showing local rank 0 only: take its room for every rank")
    parser.add_argument("--max-model-len", type=_positive_int, metavar="L",
                        help="with --model: sequence length for the concurrency figure (default: the logs')")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_model_arguments(parser)
    parser.set_defaults(run=_run_budget)


def _run_budget(args: argparse.Namespace) -> int:
    if bool(args.logs) == (args.room is not None):
        raise CliError("give either LOG files or --room (exactly one of them)")
    if args.model and args.block_bytes:
        raise CliError("give --block-bytes or --model, not both: the model sets the block bytes")
    if args.block_size and not args.model:
        raise CliError("--block-size needs --model here (or give --block-bytes, the bytes of one block)")
    if args.room is not None and args.assume_uniform:
        raise CliError("--assume-uniform applies to LOG files only")
    layout = _layout_from_args(args)
    evidence_in = plan.given_rooms(args.room) if args.room is not None else plan.read_evidence(args.logs)
    if layout is not None and layout.options["tp"] is None and (
        evidence_in.rooms is not None
        or compatibility_key(evidence_in.ledger, evidence_in.lines).get("tensor_parallel_size") is None
    ):
        raise CliError("--model needs --tp N: the tensor-parallel size the ranks run with")
    if layout is not None and evidence_in.rooms is not None:
        tp, pp = layout.options["tp"], layout.options["pp"] or 1
        if len(args.room) % (tp * pp):
            raise CliError(f"--room gives {len(args.room)} rank(s), but --tp {tp} × --pp {pp} = "
                           f"{tp * pp} ranks per replica: give one room per rank, rank order")
    caught: list[str] = []  # the ledger's warnings, also in decision.notes
    with _reader_warnings_into(caught):
        decision = plan.decide(evidence_in, plan.Policy(args.reserve, assume_uniform=args.assume_uniform),
                               layout, max_model_len=args.max_model_len, block_bytes=args.block_bytes)
    notes = [*decision.warnings, *decision.notes]
    warnings = notes + [note for note in caught if note not in notes]
    budget, spec, verdict = decision.budget, decision.spec, decision.cross_check_verdict
    _print_warnings(warnings)
    if spec is not None and decision.max_model_len is None:
        raise CliError("--model needs --max-model-len L when the logs do not show max_model_len")
    capacity_data = decision.capacity_at_max_len.to_dict() if spec is not None else None
    room_sources = dict(zip(budget.ranks, decision.room_sources))
    if args.json:
        data = budget.to_dict()
        for rank in data["ranks"]:
            rank["room_source"] = room_sources[rank["rank"]]
        data["warnings"] = warnings
        if capacity_data is not None:
            data["capacity"] = capacity_data
        if verdict is not None:
            data["cross_check"] = verdict
        return _print_json(data)
    print(f"uniform budget  {format_size(budget.uniform_budget_bytes)} per GPU "
          f"(limiting rank {budget.limiting_rank})")
    if capacity_data is not None:
        print(f"capacity        {capacity_data['blocks']:,} blocks = {capacity_data['tokens']:,} tokens, "
              f"{capacity_data['max_concurrency']:.2f}x at {capacity_data['max_model_len']:,} tokens")
    if verdict is not None:
        print(f"cross-check     {verdict}")
    if budget.block_bytes:
        block = format_size(budget.block_bytes)
        print(f"rounding        down to {budget.num_blocks:,} whole blocks of {block} "
              f"(−{format_size(budget.rounding_loss_bytes)})")
    else:
        print("rounding        none: give --model (or --block-bytes) to round down to whole KV blocks "
              "(vLLM rounds down itself, so the value is safe)")
    print(f"flag            {budget.flag}")
    print(f"allocated       {format_size(budget.allocated_total_bytes)} over {len(budget.ranks)} GPUs")
    print(f"stranded        {format_size(budget.stranded_total_bytes)} on the stronger ranks")
    print(f"safe budgets    min {format_size(budget.min_safe_bytes)}, median "
          f"{format_size(budget.median_safe_bytes)}, max {format_size(budget.max_safe_bytes)}")
    print(f"min/median      {budget.min_median_ratio:.3f} "
          f"(the weak rank removes {budget.weak_rank_loss_fraction:.0%} of typical capacity)")
    rows = [
        {
            "rank": rank["rank"],
            "room": format_size(rank["room_bytes"]),
            "safe": format_size(rank["safe_bytes"]),
            "stranded": format_size(rank["stranded_bytes"]),
            "limits": "<-" if rank["rank"] == budget.limiting_rank else "",
        }
        for rank in budget.to_dict()["ranks"]
    ]
    print()
    print(format_table(rows, ["rank", "room", "safe", "stranded", "limits"]))
    return EXIT_OK


# --- ledger -----------------------------------------------------------------------------------

#: Columns of the readable ``kvplan ledger`` table (sizes formatted); --json and --csv give all columns.
LEDGER_TABLE = ["source", "boot", "rank", "process", "outcome", "init_free_bytes", "weights_bytes",
                "available_kv_bytes", "suggested_full_bytes", "room_bytes", "room_source"]


def _add_ledger(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "ledger",
        help="read vLLM startup logs into the per-rank ledger (one row per boot × rank)",
        description="Every boot and rank in the logs with its memory ledger, room and outcome. "
        "Example: kvplan ledger data/boots/four-rank/*.log --json",
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="vLLM startup logs (files, folders or globs)")
    parser.add_argument("--nvidia-smi", action="append", default=[], metavar="CSV",
                        help="nvidia-smi --query-gpu (and --query-compute-apps) CSV of the same boot: joins "
                             "gpu_name, driver_version and other_process_bytes; repeat for both")
    parser.add_argument("--rooms", action="store_true",
                        help="also each rank's room over the boots: worst, min, median, max, spread "
                             '(JSON key "rooms"); refused as kvplan budget refuses')
    parser.add_argument("--assume-uniform", action="store_true",
                        help="with --rooms: logs showing local rank 0 only: take its room for every rank")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true",
                      help='print {"rows": [...], "warnings": [...]} (and "rooms": [...] with --rooms)')
    form.add_argument("--csv", action="store_true", help="print the ledger as CSV")
    parser.set_defaults(run=_run_ledger)


#: Columns of the ``kvplan ledger --rooms`` table: each rank's room over the boots of one key.
ROOMS_TABLE = ["rank", "room_bytes", "room_source", "room_min_bytes", "room_median_bytes", "room_max_bytes",
               "room_spread_bytes", "boots", "worst_boot"]


def _run_ledger(args: argparse.Namespace) -> int:
    if args.assume_uniform and not args.rooms:
        raise CliError("--assume-uniform applies to --rooms only")
    if args.rooms and args.csv:
        raise CliError("--rooms prints a table or JSON, not CSV")
    ledger, metadata = read_vllm_logs(args.logs)
    plan.require_boot(ledger, args.logs)
    notes = list(metadata["warnings"])
    if args.nvidia_smi:
        with _reader_warnings_into(notes):
            ledger, _, _ = join_snapshots(ledger, args.nvidia_smi)  # warnings come as NvidiaSmiWarning
    rooms = None
    if args.rooms:
        with _reader_warnings_into(notes):
            frame = room_per_rank(ledger, assume_uniform=args.assume_uniform, lines=metadata.lines)
        rooms = [{"rank": int(rank), **{column: plain_value(value) for column, value in row.items()}}
                 for rank, row in frame.to_dict(orient="index").items()]
    if args.json:
        rows = [{column: plain_value(value) for column, value in row.items()}
                for row in ledger.to_dict(orient="records")]
        data = {"rows": rows, "warnings": notes}
        if rooms is not None:
            data["rooms"] = rooms
        return _print_json(data)
    _print_warnings(notes)
    if args.csv:
        ledger.to_csv(sys.stdout, index=False)
        return EXIT_OK
    rows = [
        {column: _table_cell(column, row[column]) for column in LEDGER_TABLE}
        for row in ledger.to_dict(orient="records")
    ]
    print(format_table(rows, LEDGER_TABLE))
    if rooms is not None:
        print()
        table = [{**{column: _table_cell(column, room.get(column)) for column in ROOMS_TABLE},
                  "worst_boot": f"{room['source']} #{room['boot']}"} for room in rooms]
        print(format_table(table, ROOMS_TABLE))
    return EXIT_OK


def _table_cell(column: str, value: object) -> str:
    value = plain_value(value)
    if value is None:
        return "-"
    return format_size(int(value)) if column.endswith("_bytes") else str(value)


def _print_warnings(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


# --- capacity ---------------------------------------------------------------------------------


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --model/--tp/--pp/--dcp/--kv-cache-dtype/--block-size/--vllm-version/--max-num-batched-tokens."""
    group = parser.add_argument_group(
        "model and layout", "bytes per token per rank from a model config, as vLLM sizes the KV cache"
    )
    group.add_argument("--model", metavar="CONFIG",
                       help="a config.json path, or a catalogue name in data/models (e.g. llama-3.1-70b)")
    group.add_argument("--tp", type=_positive_int,
                       help="tensor-parallel size (needed with --model unless the logs show it)")
    group.add_argument("--pp", type=_positive_int, help="pipeline-parallel size (default: the logs', else 1)")
    group.add_argument("--dcp", type=_positive_int,
                       help="decode-context-parallel size (default: the logs', else 1)")
    group.add_argument("--kv-cache-dtype", choices=list(KV_CACHE_DTYPE_BYTES),
                       help="vLLM's --kv-cache-dtype (default: the logs', else auto = the model dtype)")
    group.add_argument("--block-size", type=_block_size,
                       help=f"tokens per block (default {DEFAULT_BLOCK_SIZE}; with --model, vLLM's choice "
                            "for the model: 64 for MLA, larger for hybrid Mamba models)")
    group.add_argument("--vllm-version", metavar="V",
                       help="vLLM release whose arithmetic to reproduce (default: the newest known)")
    group.add_argument("--max-num-batched-tokens", type=_positive_int, metavar="N",
                       help="vLLM's --max-num-batched-tokens; sizes sliding-window layers exactly")


def _refuse_layout_without_model(
    args: argparse.Namespace, options: Sequence[str] = MODEL_ONLY_OPTIONS
) -> None:
    """Layout flags mean nothing without --model: refused rather than silently ignored."""
    given = [f"--{name.replace('_', '-')}" for name in options if getattr(args, name, None) is not None]
    if given:
        raise CliError(f"{', '.join(given)} describe the model's layout: give --model CONFIG with them")


def _layout_from_args(args: argparse.Namespace) -> plan.ModelLayout | None:
    """The model config and layout options the --model arguments give, or None without --model."""
    if not args.model:
        _refuse_layout_without_model(args)
        return None
    options = {"tp": args.tp, "pp": args.pp, "dcp": args.dcp, "kv_cache_dtype": args.kv_cache_dtype,
               "block_size": args.block_size, "vllm_version": args.vllm_version,
               "max_num_batched_tokens": args.max_num_batched_tokens}
    return plan.ModelLayout(args.model, options)


def _kv_spec_from_args(args: argparse.Namespace, key: Mapping[str, object] | None = None) -> KVSpec | None:
    """The KV spec the --model arguments describe, or None without --model.

    With the logs' compatibility ``key`` (:func:`kvplan.kvspec.options_for_logs`), unset layout, KV dtype,
    release and block size are the logs' own, a given one that contradicts the logs is refused, and so
    is a config of another model than the logs served.
    """
    if not args.model:
        _refuse_layout_without_model(args)
        return None
    if args.tp is None and (key or {}).get("tensor_parallel_size") is None:
        raise CliError("--model needs --tp N: the tensor-parallel size the ranks run with")
    options = {"tp": args.tp, "pp": args.pp, "dcp": args.dcp, "kv_cache_dtype": args.kv_cache_dtype,
               "block_size": args.block_size, "vllm_version": args.vllm_version,
               "max_num_batched_tokens": args.max_num_batched_tokens}
    return kv_spec(read_model_config(args.model), **options_for_logs(options, key or {}))


def _add_capacity(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "capacity",
        help="blocks, tokens and full-length concurrency of a per-GPU KV budget",
        description="What a per-GPU KV budget buys, from bytes per token or from a model config and "
        "layout (reproducing vLLM's 'GPU KV cache size' and 'Maximum concurrency'). "
        "Example: kvplan capacity --kv-bytes 12GiB --bytes-per-token 256KiB --max-model-len 8192; "
        "example: kvplan capacity --model llama-3.1-70b --tp 4 --kv-bytes 12GiB --max-model-len 32768",
    )
    parser.add_argument("--kv-bytes", type=_positive_size, required=True, help="KV budget per GPU")
    parser.add_argument("--bytes-per-token", type=_size, help="KV bytes per token per GPU (or --model)")
    parser.add_argument("--max-model-len", type=_positive_int, required=True, help="sequence length")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_model_arguments(parser)
    parser.set_defaults(run=_run_capacity)


def _run_capacity(args: argparse.Namespace) -> int:
    spec = _kv_spec_from_args(args)
    if (spec is None) == (args.bytes_per_token is None):
        raise CliError("give exactly one of --bytes-per-token or --model")
    if spec is None:
        result = capacity(args.kv_bytes, args.bytes_per_token, args.max_model_len,
                          args.block_size or DEFAULT_BLOCK_SIZE)
        data = result.to_dict()
    else:
        data = spec.capacity(args.kv_bytes, args.max_model_len).to_dict()
        if data["blocks"] == 0:
            raise CliError(f"--kv-bytes {format_size(args.kv_bytes)} holds no block of "
                           f"{format_size(data['block_bytes'])} ({data['block_size']} tokens)")
    if args.json:
        return _print_json(data)
    if spec is not None:
        print(f"model             {data['model']} (tp {spec.tp}, pp {spec.pp}, dcp {spec.dcp}, "
              f"KV {spec.kv_cache_dtype}, vLLM {spec.vllm_version})")
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
            rows = [{"stage": st["pp_rank"], "layers": f"{st['first_layer']}-{st['end_layer'] - 1}",
                     "per token": format_size(st["bytes_per_token"]),
                     "block": format_size(st["block_bytes"]), "blocks": f"{st['blocks']:,}"}
                    for st in data["stages"]]
            print()
            print(format_table(rows, ["stage", "layers", "per token", "block", "blocks"]))
    return EXIT_OK


# --- drift ------------------------------------------------------------------------------------


def _add_drift(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "drift",
        help="cut a reference budget by the free memory a later boot lost",
        description="B_adj = B_ref − max(0, F_ref − F_boot) − guard per rank; never raises a value. "
        "Example: kvplan drift --ref-free 42GiB --ref-budget 30GiB --boot-free 40.75GiB --guard 0.5GiB",
    )
    parser.add_argument("--ref-free", type=_size_list, required=True, help="free at reference startup")
    parser.add_argument("--ref-budget", type=_size_list, required=True, help="reference safe budget")
    parser.add_argument("--boot-free", type=_size_list, required=True, help="free at this startup")
    parser.add_argument("--guard", type=_size, required=True,
                        help="extra guard per rank, one size for every rank (policy: give it; 0GiB for none)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=_run_drift)


def _run_drift(args: argparse.Namespace) -> int:
    result = drift_budget(args.ref_budget, args.ref_free, args.boot_free, args.guard)
    if args.json:
        return _print_json(result.to_dict())
    print(f"adjusted budget  {format_size(result.adjusted_uniform_bytes)} per GPU "
          f"(limiting rank {result.limiting_rank})")
    print(f"flag             {result.flag}")
    if result.reprofile_to_raise:
        print("note             some rank has more free memory than at the reference: "
              "re-profile to raise the value")
    rows = [
        {"rank": r["rank"], "drift": format_size(r["drift_bytes"]),
         "adjusted": format_size(r["adjusted_bytes"])}
        for r in result.to_dict()["ranks"]
    ]
    print()
    print(format_table(rows, ["rank", "drift", "adjusted"]))
    return EXIT_OK


# --- load -------------------------------------------------------------------------------------


def _add_load(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "load",
        help="KV cache usage, requests, preemptions and OOMs under load, from logs and /metrics",
        description="One row per vLLM stats line, per /metrics scrape and engine, and per event "
        "(preemption warning, OOM, error), in file order; unknown values are null. Give the files of "
        "one run: server logs and saved /metrics snapshots alike. "
        "Example: kvplan load data/load/manual-canary-overload/server.log --year 2026 --json",
    )
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="server logs and /metrics snapshots of one run"
    )
    parser.add_argument("--year", type=_positive_int, help="year of vLLM's yearless MM-DD timestamps")
    parser.add_argument(
        "--log-utc-offset", type=float, metavar="HOURS", dest="log_utc_offset",
        help="the server's offset from UTC in hours (e.g. -7 for PDT): log times (local) become UTC, "
        "like /metrics times; without it, logs and /metrics are compared as if the server ran on UTC",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help='print {"rows": [...], "warnings": [...]}')
    output.add_argument("--csv", action="store_true", help="print the rows as CSV (warnings on stderr)")
    parser.set_defaults(run=_run_load)


def _run_load(args: argparse.Namespace) -> int:
    reading = read_load_evidence(args.files, year=args.year, utc_offset=args.log_utc_offset)
    if args.json:  # streamed, one row a line, by the C encoder
        sys.stdout.writelines(reading.json_chunks())
        return EXIT_OK
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(ROW_KEYS)
        writer.writerows(reading.row_values())
    else:
        rows = list(reading.row_dicts())
        summary = load_summary(reading)
        shown = [{**row, "where": f"{row['source']}:{row['line']}"} for row in rows]
        columns = ["where", "time", "engine", "kv_cache_usage_pct", "running", "waiting",
                   "generation_tokens_per_s", "preemptions", "preemptions_total", "event"]
        print(format_table([{k: ("" if v is None else v) for k, v in row.items()} for row in shown], columns))
        print()
        print(f"peak KV cache usage  {summary['peak_kv_cache_usage_pct']}% "
              f"(capacity {summary['kv_cache_tokens'] or 'unknown'} tokens)")
        preemptions = summary["preemptions"]
        at_least = "at least " if summary["preemptions_lower_bound"] else ""
        print(f"preemptions          {'unknown' if preemptions is None else f'{at_least}{preemptions}'}")
        print(f"OOM / error events   {summary['oom_events']} / {summary['error_events']}")
    _print_warnings(reading.warnings)
    return EXIT_OK


# --- approve, verify, gate ----------------------------------------------------------------------


def _add_approve(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "approve",
        help="write an evidence bundle: the approved budget, its ledger, charts, hashes and source lines",
        description="Compute the uniform budget from the logs of a profiled boot and write it, with its "
        "evidence, to a new folder OUT/<date>-<hash> (never overwritten). With --load, the load test "
        "of a canary at that value joins the evidence and its checks (no OOM, preemptions ≤ N) must pass. "
        "Example: kvplan approve data/boots/four-rank/boot.log --reserve 0.9GiB --model llama-3.1-70b "
        "--tp 4 --target-concurrency 4 --seq-len 32768 --approver 'Ana Planner' --out evidence/",
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="vLLM logs of the profiled boot(s)")
    parser.add_argument("--nvidia-smi", action="append", default=[], metavar="CSV",
                        help="nvidia-smi --query-gpu (and --query-compute-apps) CSV of the profiled boot: "
                             "inputs of the bundle; joins gpu_name and driver_version into the compatibility "
                             "key (a gate compares them) and other_process_bytes; repeat for both")
    parser.add_argument("--reserve", type=_size, required=True, help="operating reserve per rank")
    parser.add_argument("--guard", type=_size, default=0,
                        help="guard a canary gate subtracts by default (default 0)")
    parser.add_argument("--assume-uniform", action="store_true",
                        help="use rank 0's room for ranks whose logs do not show theirs")
    parser.add_argument("--target-concurrency", type=_positive_int, metavar="C",
                        help="admission plan: C full sequences at once (with --seq-len)")
    parser.add_argument("--seq-len", type=_positive_int, metavar="L",
                        help="admission plan: tokens per sequence")
    parser.add_argument("--approver", required=True, metavar="NAME", help="who approves")
    parser.add_argument("--note", default="", metavar="TEXT", help="e.g. the change ticket")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder the bundle folder is created in")
    parser.add_argument("--load", nargs="+", default=[], metavar="LOG_OR_METRICS",
                        help="server logs and /metrics snapshots of a load test at the approved value")
    _add_load_policy_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    before = {action.dest for action in parser._actions}
    _add_model_arguments(parser)
    options = sorted({action.dest for action in parser._actions} - before - {"model"})
    parser.set_defaults(run=_run_approve, model_option_names=options)


def _run_approve(args: argparse.Namespace) -> int:
    if (args.target_concurrency is None) != (args.seq_len is None):
        raise CliError("an admission plan needs both --target-concurrency and --seq-len")
    layout = None
    if not args.model:
        _refuse_layout_without_model(args, (*MODEL_ONLY_OPTIONS, "block_size"))
    else:
        options = {name: getattr(args, name) for name in args.model_option_names}
        layout = plan.ModelLayout(resolve_model_config(args.model), options)
    admission = plan.Plan(args.target_concurrency, args.seq_len) if args.seq_len else None
    policy = plan.Policy(args.reserve, args.guard, args.assume_uniform)
    bundle = evidence.approve(args.logs, args.out, policy, args.approver, args.note, layout, admission,
                              load_paths=args.load, load_policy=_load_policy(args),
                              nvidia_smi_paths=args.nvidia_smi)
    record = evidence.read_bundle(bundle)
    warnings = [evidence.user_paths(record, warning) for warning in record["warnings"]]
    if not args.model:
        warnings.append("no --model: the value is not rounded to whole KV blocks and the bundle has no "
                        "capacity table (tokens, concurrency); give --model CONFIG to add both")
    if not args.nvidia_smi:
        warnings.append("no --nvidia-smi: the recorded key has no GPU type or driver, so a gate cannot "
                        "compare them; give the profiled boot's --query-gpu (and --query-compute-apps) "
                        "snapshots")
    headroom = min(rank["stranded_bytes"] for rank in record["ranks"])
    if args.guard > headroom:
        warnings.append(f"--guard {format_size(args.guard)} is recorded as kvplan gate's default, and the "
                        f"weakest rank has only {format_size(headroom)} above the approved value: even the "
                        "approved boot fails the gate unless it is given a smaller --guard")
    if args.json:
        return _print_json({"bundle": str(bundle), "decision": record["decision"], "load": record.get("load"),
                            "checks": record["checks"], "warnings": warnings})
    decision = record["decision"]
    print(f"approved     {decision['human']} per GPU (limiting rank {decision['limiting_rank']})")
    print(f"flag         {decision['flag']}")
    if "load" in record:
        load = record["load"]
        peak = load["peak_kv_cache_usage_pct"]
        print(f"under load   peak KV cache usage {'unknown' if peak is None else f'{peak:.1f}%'}, "
              f"{'unknown' if load['preemptions'] is None else load['preemptions']} preemption(s), "
              f"{load['oom_events']} OOM")
    print(f"bundle       {bundle}")
    print(f"verify with  kvplan verify {bundle}")
    _print_warnings(warnings)
    return EXIT_OK


def _add_load_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """--max-preemptions, --max-capacity-loss and --year: how approve and gate judge --load files."""
    parser.add_argument("--max-preemptions", type=int, metavar="N",
                        help="with --load: preemptions allowed in the run (default 0)")
    parser.add_argument("--max-capacity-loss", type=float, metavar="PCT",
                        help="with --load, for a run at a manual --kv-cache-memory-bytes value: bound on "
                             "the KV tokens lost against the approved profiled boot [%%] (default: "
                             "reported, no bound)")
    parser.add_argument("--year", type=_positive_int,
                        help="with --load: year of vLLM's yearless MM-DD timestamps")


def _load_policy(args: argparse.Namespace) -> plan.LoadPolicy | None:
    """The load policy of --max-preemptions, --max-capacity-loss and --year; None without --load."""
    given = [args.max_preemptions, args.max_capacity_loss, args.year]
    if not args.load:
        if any(value is not None for value in given):
            raise CliError("--max-preemptions, --max-capacity-loss and --year apply to --load files only")
        return None
    allowed = 0 if args.max_preemptions is None else args.max_preemptions
    return plan.LoadPolicy(allowed, args.year, args.max_capacity_loss)


def _add_verify(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "verify",
        help="re-check an evidence bundle: hashes, and the decision recomputed from its inputs",
        description="Exit 0 when every hash and the recomputed decision agree with the bundle, 1 with "
        "the differences listed when anything changed, 2 when the bundle cannot be read. Checked: every "
        "file's SHA-256 (none missing, no file or folder added), charts are PNGs, the inputs digest in "
        "budget.json (it covers the inputs, policy, plan, approver, note and kvplan version) and the "
        "decision recomputed from the input copies, SUMMARY.md, ledger.csv and evidence.log regenerated "
        "byte for byte. The folder name <date>-<hash> (created_utc's date, the digest's first 12 hex "
        "digits) is a label: a copied or renamed bundle folder verifies (exit 0) when its contents agree, "
        "and a second approver (or a different note) approving the same inputs on the same day gets a "
        "folder of its own. Example: kvplan verify evidence/2026-11-29-0123456789ab",
    )
    parser.add_argument("bundle", metavar="BUNDLE", help="an evidence bundle folder")
    parser.add_argument("--json", action="store_true", help='print {"bundle", "ok", "differences", "notes"}')
    parser.set_defaults(run=_run_verify)


def _run_verify(args: argparse.Namespace) -> int:
    recomputed_warnings: list[str] = []  # the bundle records them; verify compares, never reprints them
    with _reader_warnings_into(recomputed_warnings):
        differences, notes = evidence.verify_bundle_with_notes(args.bundle)
    if args.json:
        _print_json({"bundle": args.bundle, "ok": not differences, "differences": differences,
                     "notes": notes})
        return EXIT_FAIL if differences else EXIT_OK
    if differences:
        print(f"{args.bundle}: CHANGED, {len(differences)} difference{'s' if len(differences) > 1 else ''}:")
        for difference in differences:
            print(f"  - {difference}")
    else:
        print(f"{args.bundle}: ok: every hash and the recomputed decision agree")
    for note in notes:
        print(f"  note: {note}")
    return EXIT_FAIL if differences else EXIT_OK


def _add_gate(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "gate",
        help="check a canary boot against an approved budget (exit 0 pass, 1 fail, 2 cannot judge)",
        description="Same compatibility key, every rank present, no OOM or error, "
        "safe_ref − max(0, F_ref − F_boot) − guard ≥ the approved value on every rank, the reserve "
        "still free after warm-up, tokens ≥ the admission plan; with --load, the load-test checks too. "
        "The bundle is verified first (as kvplan verify); a changed bundle cannot be judged against. "
        "A check with no evidence here (no plan recorded; no observation of the reserve after warm-up) "
        "is listed as N/A and does not decide the verdict. "
        "Exit 0 pass, 1 fail, 2 cannot judge (bad or incomplete input, or a changed bundle). "
        "Example: kvplan gate --approved evidence/2026-11-29-0123456789ab canary.log --guard 0.5GiB",
    )
    parser.add_argument("logs", nargs="+", metavar="BOOT_LOG", help="vLLM logs of the canary boot")
    parser.add_argument("--approved", required=True, metavar="BUNDLE", help="the approved evidence bundle")
    parser.add_argument("--nvidia-smi", action="append", default=[], metavar="CSV",
                        help="nvidia-smi --query-gpu (and --query-compute-apps) CSV taken after warm-up; "
                             "repeat for both")
    parser.add_argument("--guard", type=_size, help="guard per rank (default: the approval's, normally 0)")
    parser.add_argument("--load", nargs="+", default=[], metavar="LOG_OR_METRICS",
                        help="load-test server logs and /metrics snapshots of the canary")
    _add_load_policy_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help='print {"passed", "checks": [{"name", "passed", "detail", "applicable"}], '
                             '"warnings"}')
    parser.set_defaults(run=_run_gate)


def _run_gate(args: argparse.Namespace) -> int:
    load_policy = _load_policy(args)
    plan.require_files(args.logs, "BOOT_LOG")
    plan.require_files(args.nvidia_smi, "--nvidia-smi")
    plan.require_files(args.load, "--load")
    _, approved = evidence.verified_approval(args.approved)
    ledger, metadata = read_vllm_logs(args.logs)
    plan.require_boot(ledger, args.logs)
    warnings = list(metadata["warnings"])
    free_after_warmup = None
    if args.nvidia_smi:
        with _reader_warnings_into(warnings):
            ledger, free_after_warmup, _ = join_snapshots(ledger, args.nvidia_smi)
    checks = gate.gate_checks(approved, ledger, compatibility_key(ledger, metadata.lines), args.guard,
                              free_after_warmup)
    if args.load:
        section, load_checks = plan.gate_load(approved, args.load, load_policy)
        checks += load_checks
        warnings += section["notes"] + section["warnings"]
    verdict = gate_verdict(checks)
    if args.json:
        _print_json({"passed": verdict is True, "checks": [check.to_dict() for check in checks],
                     "warnings": warnings})
    else:
        print(format_checks(checks))
    _print_warnings(warnings)
    return {True: EXIT_OK, False: EXIT_FAIL, None: EXIT_BAD_INPUT}[verdict]


# --- entry point ------------------------------------------------------------------------------

COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_budget,
    _add_ledger,
    _add_capacity,
    _add_drift,
    _add_load,
    _add_approve,
    _add_verify,
    _add_gate,
    lambda sub: __import__("kvplan.cli_fleet", fromlist=["add_fleet"]).add_fleet(sub),  # kvplan fleet
]


def _strict_json(value: object) -> object:
    """``value`` with every non-finite float (NaN, ±Inf) replaced by None (:func:`kvplan.load.finite`),
    through dicts and lists."""
    if isinstance(value, dict):
        return {key: _strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(item) for item in value]
    return finite(value)


def _print_json(data: dict) -> int:
    """Print ``data`` as strict JSON: a float ``NaN`` or ``±Inf`` (which JSON cannot hold) prints as null."""
    json.dump(_strict_json(data), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``error: kvplan budget: …`` and exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = _Parser(
        prog="kvplan",
        description="Safe, evidenced per-GPU KV-cache budgets from vLLM startup logs.",
    )
    parser.add_argument("--version", action="version", version=f"kvplan {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``kvplan`` command; returns the exit status (0 ok, 1 failed check, 2 bad input)."""
    args = build_parser().parse_args(argv)
    notes: list[str] = []
    try:
        with _reader_warnings_into(notes):  # what a command did not report itself
            return args.run(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OverflowError as exc:  # a number in the input beyond what a 64-bit ledger or a float holds
        print(f"error: a number in the input is too large to hold ({exc})", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        _print_warnings(notes)
