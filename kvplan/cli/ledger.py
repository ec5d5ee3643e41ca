"""``kvplan ledger``: every boot and rank of vLLM startup logs with its memory ledger, room and outcome."""

from __future__ import annotations

import argparse
import sys

from kvplan.cli.common import (
    EXIT_OK,
    CliError,
    add_nvidia_smi_argument,
    describe,
    format_table,
    print_json,
    print_warnings,
    reader_warnings_into,
)
from kvplan.units import format_size

#: The readable ``kvplan ledger`` table: glossary column -> header (fits 120 terminal columns).
LEDGER_TABLE = {
    "source": "file",
    "boot": "boot",
    "rank": "rank",
    "outcome": "outcome",
    "init_free_bytes": "free at start",
    "weights_bytes": "weights",
    "room_bytes": "room",
    "room_source": "room from",
    "reason": "reason",
}
#: Characters of a row's reason in the table.
TABLE_REASON_CHARS = 20
#: The ``kvplan ledger --rooms`` table: each rank's room over the boots of one key (column -> header).
ROOMS_TABLE = {
    "rank": "rank",
    "room_bytes": "room",
    "room_source": "room from",
    "room_min_bytes": "min",
    "room_median_bytes": "median",
    "room_max_bytes": "max",
    "room_spread_bytes": "spread",
    "boots": "boots",
    "worst_boot": "worst boot",
}
#: The widest a file name is shown in the readable tables.
FILE_WIDTH = 24


LEDGER_HELP = """\
Every boot and rank in the logs with its memory ledger, room and outcome.

For example:
  kvplan ledger data/boots/four-rank/*.log
  kvplan ledger data/boots/four-rank/*.log --json
"""


def add_ledger(parser: argparse.ArgumentParser) -> None:
    describe(parser, LEDGER_HELP)
    parser.add_argument("logs", nargs="+", metavar="LOG", help="vLLM startup logs (files, folders or globs)")
    add_nvidia_smi_argument(
        parser, "of the same boot: joins gpu_name, driver_version and other_process_bytes"
    )
    parser.add_argument("--rooms", action="store_true", help="also each rank's room over the boots")
    parser.add_argument("--assume-uniform", action="store_true", help="with --rooms: rank 0's for all")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print one JSON object")
    form.add_argument("--csv", action="store_true", help="print the ledger as CSV")
    form.add_argument("--wide", action="store_true", help="every column with a value, whole paths")
    parser.set_defaults(run=run_ledger)


def run_ledger(args: argparse.Namespace) -> int:
    from kvplan import plan
    from kvplan.io.ledger_frame import ledger_frame_csv
    from kvplan.io.nvidia_smi import join_snapshots
    from kvplan.ledger import plain_value, room_per_rank
    from kvplan.notes import aggregate_notes
    from kvplan.room import check_dropped_ranks, read_vllm_logs_rooms

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
        sys.stdout.write(ledger_frame_csv(ledger))
        return EXIT_OK
    print(ledger_text(ledger, wide=args.wide))
    if rooms is not None:
        print()
        print(rooms_text(rooms, wide=args.wide))
    return EXIT_OK


def ledger_text(ledger, wide: bool = False) -> str:
    """The readable ledger: :data:`LEDGER_TABLE`, or (``wide``) every column with a value."""
    records = ledger.to_dict(orient="records")
    if wide:
        columns = {column: column for column in ledger.columns if ledger[column].notna().any()}
        names = {source: source for source in ledger["source"].unique()}
    else:
        columns, names = LEDGER_TABLE, short_names(ledger["source"].unique())
    rows = [
        {header: _table_cell(column, row, names) for column, header in columns.items()} for row in records
    ]
    return format_table(rows, list(columns.values()))


def rooms_text(rooms: list[dict], wide: bool = False) -> str:
    """The ``--rooms`` table: :data:`ROOMS_TABLE`'s headers (``wide``: glossary names, whole paths)."""
    columns = {column: column for column in ROOMS_TABLE} if wide else ROOMS_TABLE
    sources = list(dict.fromkeys(room["source"] for room in rooms))
    names = {source: source for source in sources} if wide else short_names(sources)
    rows = [
        {
            **{header: _table_cell(column, room, names) for column, header in columns.items()},
            columns["worst_boot"]: f"{names[room['source']]} #{room['boot']}",
        }
        for room in rooms
    ]
    return format_table(rows, list(columns.values()))


def short_names(sources, width: int = FILE_WIDTH) -> dict[str, str]:
    """Each source path by as few trailing parts as tell them apart, its last ``width`` characters (``…``)."""
    from pathlib import PurePath

    parts = {str(source): PurePath(str(source)).parts for source in sources}
    names = {}
    for source, own in parts.items():
        for keep in range(1, len(own) + 1):
            tail = own[-keep:]
            if not any(other[-keep:] == tail for name, other in parts.items() if name != source):
                break
        name = str(PurePath(*tail))
        names[source] = name if len(name) <= width else "…" + name[-(width - 1) :]
    return names


def _print_csv(logs: list[str]) -> int:
    """``kvplan ledger --csv`` without a frame, printed once every log is read (a refused log prints none)."""
    import pandas as pd

    from kvplan import plan
    from kvplan.io.ledger_frame import ledger_csv_header, ledger_csv_text
    from kvplan.room import stream_vllm_logs_rooms

    parts: list[str] = []
    metadata = stream_vllm_logs_rooms(logs, lambda rows: parts.append(ledger_csv_text(rows, header=False)))
    if not any(parts):  # no row read (a batch of rows is never empty text)
        plan.require_boot(pd.DataFrame(), logs)  # refused as an empty ledger is
    print_warnings(list(metadata.warnings))
    sys.stdout.write(ledger_csv_header())
    sys.stdout.writelines(parts)
    return EXIT_OK


def _reason(row: dict) -> str:
    """Why a row is not ``ok``, in a few words (issue 26); ``-`` for an ok row."""
    from kvplan.ledger import plain_value

    outcome, text = plain_value(row.get("outcome")), str(plain_value(row.get("error")) or "")
    failed_in = plain_value(row.get("failed_in"))
    if outcome == "ok":
        return "-"
    if outcome == "oom":
        reason = f"OOM in {failed_in}" if failed_in else "out of memory"
    elif "before the KV cache was sized" in text:
        reason = "cut before KV sizing"
    elif "before startup completed" in text:
        reason = "cut before ready"
    else:
        reason = (f"{failed_in}: " if failed_in else "") + (text or "no reason logged")
    return reason if len(reason) <= TABLE_REASON_CHARS else reason[: TABLE_REASON_CHARS - 1] + "…"


def _table_cell(column: str, row: dict, names: dict[str, str]) -> str:
    """A row's cell of the readable tables: file names shortened, sizes formatted, ``-`` when unknown."""
    from kvplan.ledger import plain_value

    if column in ("source", "reason"):
        return names[row[column]] if column == "source" else _reason(row)
    plain = plain_value(row.get(column))
    if plain is None:
        return "-"
    return format_size(int(plain)) if column.endswith("_bytes") else str(plain)
