"""``kvplan ledger``: every boot and rank of vLLM startup logs with its memory ledger, room and outcome."""

from __future__ import annotations

import argparse
import sys

from kvplan.cli.arguments import add_nvidia_smi_argument
from kvplan.cli.errors import EXIT_OK, CliError
from kvplan.cli.help import add_command
from kvplan.cli.output import format_table, print_json, print_warnings, reader_warnings_into
from kvplan.units import format_size

#: Columns of the readable ``kvplan ledger`` table (sizes formatted); --json and --csv give all columns.
LEDGER_TABLE = [
    "source",
    "boot",
    "rank",
    "process",
    "outcome",
    "init_free_bytes",
    "weights_bytes",
    "available_kv_bytes",
    "suggested_full_bytes",
    "room_bytes",
    "room_source",
    "reason",
]
#: Characters of a row's reason shown in the table (the whole text is ``--json``'s ``error``).
TABLE_REASON_CHARS = 48
#: Columns of the ``kvplan ledger --rooms`` table: each rank's room over the boots of one key.
ROOMS_TABLE = [
    "rank",
    "room_bytes",
    "room_source",
    "room_min_bytes",
    "room_median_bytes",
    "room_max_bytes",
    "room_spread_bytes",
    "boots",
    "worst_boot",
]


LEDGER_HELP = """\
read vLLM startup logs into the per-rank ledger (one row per boot × rank)

Every boot and rank in the logs with its memory ledger, room and outcome.

For example:
  kvplan ledger data/boots/four-rank/*.log --json
"""


def add_ledger(sub: argparse._SubParsersAction) -> None:
    """Register ``kvplan ledger``."""
    parser = add_command(sub, "ledger", LEDGER_HELP)
    parser.add_argument("logs", nargs="+", metavar="LOG", help="vLLM startup logs (files, folders or globs)")
    add_nvidia_smi_argument(
        parser, "of the same boot: joins gpu_name, driver_version and other_process_bytes"
    )
    parser.add_argument(
        "--rooms",
        action="store_true",
        help="also each rank's room over the boots: worst, min, median, max, spread "
        '(JSON key "rooms"); refused as kvplan budget refuses',
    )
    parser.add_argument(
        "--assume-uniform",
        action="store_true",
        help="with --rooms: logs showing local rank 0 only: take its room for every rank",
    )
    form = parser.add_mutually_exclusive_group()
    form.add_argument(
        "--json",
        action="store_true",
        help='print {"rows": [...], "warnings": [...]} (and "rooms": [...] with --rooms)',
    )
    form.add_argument("--csv", action="store_true", help="print the ledger as CSV")
    parser.set_defaults(run=run_ledger)


def run_ledger(args: argparse.Namespace) -> int:
    """Print the ledger of the logs (and each rank's room over the boots with ``--rooms``)."""
    from kvplan import plan
    from kvplan.io.nvidia_smi import join_snapshots
    from kvplan.ledger import plain_value, room_per_rank
    from kvplan.ledger_budget import check_dropped_ranks
    from kvplan.notes import aggregate_notes
    from kvplan.room import read_vllm_logs_rooms

    if args.assume_uniform and not args.rooms:
        raise CliError("--assume-uniform applies to --rooms only")
    if args.rooms and args.csv:
        raise CliError("--rooms prints a table or JSON, not CSV")
    if args.csv and not args.nvidia_smi:
        return _print_csv(args.logs)
    ledger, metadata = read_vllm_logs_rooms(args.logs)
    plan.require_boot(ledger, args.logs)
    notes: list[str] = list(metadata.warnings)
    if args.nvidia_smi:
        with reader_warnings_into(notes):
            ledger, _, _ = join_snapshots(ledger, args.nvidia_smi)  # warnings come as NvidiaSmiWarning
    rooms = None
    if args.rooms:
        check_dropped_ranks(metadata.warnings)
        with reader_warnings_into(notes):
            frame = room_per_rank(ledger, assume_uniform=args.assume_uniform, lines=metadata.lines)
        rooms = [
            {"rank": int(rank), **{column: plain_value(value) for column, value in row.items()}}
            for rank, row in frame.to_dict(orient="index").items()
        ]
    if args.json:
        rows = [
            {column: plain_value(value) for column, value in row.items()}
            for row in ledger.to_dict(orient="records")
        ]
        data = {"rows": rows, "warnings": [str(note) for note in aggregate_notes(notes)]}
        if rooms is not None:
            data["rooms"] = rooms
        return print_json(data)
    print_warnings(notes)
    if args.csv:
        ledger.to_csv(sys.stdout, index=False)
        return EXIT_OK
    rows = _table_rows(ledger)
    print(format_table(rows, LEDGER_TABLE))
    if rooms is not None:
        print()
        table = [
            {
                **{column: _table_cell(column, room.get(column)) for column in ROOMS_TABLE},
                "worst_boot": f"{room['source']} #{room['boot']}",
            }
            for room in rooms
        ]
        print(format_table(table, ROOMS_TABLE))
    return EXIT_OK


def _print_csv(logs: list[str]) -> int:
    """``kvplan ledger --csv`` without a frame: each batch of rows becomes CSV text as it is read
    (:mod:`kvplan.io.ledger_rows_csv`); the text is printed once the logs are read, after the
    warnings, so that a refused log prints none of it."""
    import pandas as pd

    from kvplan import plan
    from kvplan.io.ledger_rows_csv import ledger_csv_header, ledger_csv_text
    from kvplan.room import stream_vllm_logs_rooms

    parts: list[str] = []
    metadata = stream_vllm_logs_rooms(logs, lambda rows: parts.append(ledger_csv_text(rows, header=False)))
    if not any(parts):  # no row read (a batch of rows is never empty text)
        plan.require_boot(pd.DataFrame(), logs)  # refused as an empty ledger is
    print_warnings(list(metadata.warnings))
    sys.stdout.write(ledger_csv_header())
    sys.stdout.writelines(parts)
    return EXIT_OK


def _table_rows(ledger) -> list[dict]:
    """The readable table's rows: :data:`LEDGER_TABLE`'s cells of each ledger row, with its reason."""
    return [
        {
            column: _reason(row) if column == "reason" else _table_cell(column, row[column])
            for column in LEDGER_TABLE
        }
        for row in ledger.to_dict(orient="records")
    ]


def _reason(row: dict) -> str:
    """Why a row is not ``ok`` (issue 26: ``incomplete`` alone said nothing), shortened for the table:
    ``-`` for an ok row.

    >>> _reason({"outcome": "incomplete", "error": "the log stops before the KV cache was sized (last line read: 40)"})
    'the log stops before the KV cache was sized (la…'
    >>> _reason({"outcome": "ok", "error": None})
    '-'
    """
    from kvplan.ledger import plain_value

    if plain_value(row.get("outcome")) == "ok":
        return "-"
    text = str(plain_value(row.get("error")) or "no reason logged")
    return text if len(text) <= TABLE_REASON_CHARS else text[: TABLE_REASON_CHARS - 1] + "…"


def _table_cell(column: str, value: object) -> str:
    """A ledger value for the readable table: ``-`` when unknown, sizes formatted."""
    from kvplan.ledger import plain_value

    plain = plain_value(value)
    if plain is None:
        return "-"
    return format_size(int(plain)) if column.endswith("_bytes") else str(plain)
