"""What every command shares: exit statuses, ``--help`` pages, argument types and groups, and output."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar
from warnings import catch_warnings, showwarning, simplefilter

from kvplan.escape import terminal_text
from kvplan.units import MAX_DEVICE_BYTES, parse_size, parse_size_list

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class CliError(ValueError):
    """Bad command-line input; printed as ``error: …`` with exit status 2."""


EXAMPLES_HEADING = "For example:"


def examples(commands: Sequence[str]) -> str:
    """The epilog of a help page: :data:`EXAMPLES_HEADING`, then each command indented."""
    return "\n".join([EXAMPLES_HEADING, *(f"  {command}" for command in commands)])


class ExampleFormatter(argparse.HelpFormatter):
    """argparse's formatter that prints the examples epilog (:func:`examples`) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES_HEADING):
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


def describe(parser: argparse.ArgumentParser, page: str) -> argparse.ArgumentParser:
    """``parser`` with its help ``page``: prose (re-wrapped), then :data:`EXAMPLES_HEADING` and commands."""
    prose, _, listed = page.partition(EXAMPLES_HEADING)
    parser.description = " ".join(prose.split())
    parser.epilog = examples([line.strip() for line in listed.splitlines() if line.strip()])
    parser.formatter_class = ExampleFormatter
    return parser


T = TypeVar("T", int, float)


def _bounded(value: T, text: str) -> T:
    """``value`` within :data:`MAX_DEVICE_BYTES` either side of zero, else argparse's refusal (issue 25)."""
    if not abs(value) <= MAX_DEVICE_BYTES:  # NaN too
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: expected at most {MAX_DEVICE_BYTES:,} (2^44, 16 TiB in bytes: more "
            "bytes or tokens than any GPU holds)"
        )
    return value


def size(text: str) -> int:
    """A size such as ``0.9GiB`` [bytes], within 16 TiB of zero."""
    try:
        return _bounded(parse_size(text), text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_list(text: str) -> list[int]:
    """Comma-separated sizes ≥ 0, one per rank in rank order [bytes]."""
    try:
        sizes = [_bounded(value, text) for value in parse_size_list(text)]
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


def _number(text: str, convert: Callable[[str], T], what: str) -> T:
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    return _bounded(value, text)


def whole_number(text: str) -> int:
    """A whole number within :data:`MAX_DEVICE_BYTES`."""
    return _number(text, int, "a whole number")


def real_number(text: str) -> float:
    """A finite number within :data:`MAX_DEVICE_BYTES`."""
    return _number(text, float, "a number")


def _from_one(text: str, refusal: str) -> int:
    value = whole_number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{refusal}, got {value}")
    return value


def positive_int(text: str) -> int:
    """A whole number > 0."""
    return _from_one(text, "must be positive")


def at_least_one(text: str) -> int:
    """A whole number ≥ 1 (hosts, sequences, tokens)."""
    return _from_one(text, "must be ≥ 1")


def fraction(text: str) -> float:
    """A number in (0, 1], such as a share of hosts."""
    value = real_number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def labels(text: str) -> tuple[str, ...]:
    """Comma-separated names (hosts, labels), blanks dropped."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated label names, got {text!r}")
    return names


def block_size(text: str) -> int:
    """A ``--block-size`` vLLM accepts [tokens]."""
    from kvplan.kvspec.capacity import VLLM_BLOCK_SIZES

    value = positive_int(text)
    if value not in VLLM_BLOCK_SIZES:
        raise argparse.ArgumentTypeError(f"{value} is not a block size vLLM accepts {VLLM_BLOCK_SIZES}")
    return value


#: --model options that mean nothing without --model (--block-size also sizes `kvplan capacity` alone).
MODEL_ONLY_OPTIONS = ("tp", "pp", "dcp", "kv_cache_dtype", "vllm_version", "max_num_batched_tokens")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --model/--tp/--pp/--dcp/--kv-cache-dtype/--block-size/--vllm-version/--max-num-batched-tokens."""
    from kvplan.kvspec.capacity import DEFAULT_BLOCK_SIZE
    from kvplan.kvspec.page import KV_CACHE_DTYPE_BYTES

    group = parser.add_argument_group(
        "model and layout", "bytes per token per rank from a model config, as vLLM sizes the KV cache"
    )
    model = "a config.json path, or a name of the catalogue kvplan/models/ (e.g. llama-3.1-70b)"
    group.add_argument("--model", metavar="CONFIG", help=model)
    for flag, size_of, default in (
        ("--tp", "tensor", "needed with --model unless the logs show it"),
        ("--pp", "pipeline", "default: the logs', else 1"),
        ("--dcp", "decode-context", "default: the logs', else 1"),
    ):
        group.add_argument(flag, type=positive_int, help=f"{size_of}-parallel size ({default})")
    dtype = "vLLM's --kv-cache-dtype, one of %(choices)s (default: the logs', else auto = the model dtype)"
    group.add_argument("--kv-cache-dtype", choices=list(KV_CACHE_DTYPE_BYTES), metavar="DTYPE", help=dtype)
    size = f"tokens per block (default {DEFAULT_BLOCK_SIZE}; with --model, vLLM's choice for the model)"
    group.add_argument("--block-size", type=block_size, help=size)
    version = "vLLM release whose arithmetic to reproduce (default: the newest known)"
    group.add_argument("--vllm-version", metavar="V", help=version)
    batched = "vLLM's --max-num-batched-tokens; sizes sliding-window layers exactly"
    group.add_argument("--max-num-batched-tokens", type=positive_int, metavar="N", help=batched)


def add_nvidia_smi_argument(parser: argparse.ArgumentParser, snapshot: str) -> None:
    """Add the repeatable ``--nvidia-smi CSV``: ``snapshot`` says which boot and what it joins."""
    text = f"nvidia-smi --query-gpu (and --query-compute-apps) CSV {snapshot}; or a DCGM exporter scrape"
    parser.add_argument("--nvidia-smi", "--dcgm", action="append", default=[], metavar="CSV", help=text)


def add_admission_arguments(parser: argparse.ArgumentParser, count: Callable[[str], int], help: str) -> None:
    """Add ``--target-concurrency C`` (its ``help``) and ``--seq-len L``, both of type ``count``."""
    parser.add_argument("--target-concurrency", type=count, metavar="C", help=help)
    parser.add_argument("--seq-len", type=count, metavar="L", help="admission plan: tokens per sequence")


def admission_from_args(args: argparse.Namespace):
    """The :class:`kvplan.plan.AdmissionPlan` of ``--target-concurrency`` and ``--seq-len``; None without."""
    if (args.target_concurrency is None) != (args.seq_len is None):
        raise CliError("an admission plan needs both --target-concurrency and --seq-len")
    from kvplan.plan import AdmissionPlan

    return AdmissionPlan(args.target_concurrency, args.seq_len) if args.seq_len else None


def refuse_layout_without_model(
    args: argparse.Namespace, options: Sequence[str] = MODEL_ONLY_OPTIONS
) -> None:
    """Layout flags mean nothing without --model: refused rather than silently ignored."""
    given = [f"--{name.replace('_', '-')}" for name in options if getattr(args, name, None) is not None]
    if given:
        raise CliError(f"{', '.join(given)} describe the model's layout: give --model CONFIG with them")


def layout_options(args: argparse.Namespace) -> dict:
    """The layout options of the --model arguments, by name (None where not given)."""
    return {name: getattr(args, name) for name in sorted((*MODEL_ONLY_OPTIONS, "block_size"))}


def add_load_arguments(parser: argparse.ArgumentParser, files: str) -> None:
    """``--load FILE ...`` (``files`` says whose), --max-preemptions, --max-capacity-loss and --year."""
    parser.add_argument("--load", nargs="+", default=[], metavar="LOG_OR_METRICS", help=files)
    preemptions = "with --load: preemptions allowed in the run (default 0)"
    parser.add_argument("--max-preemptions", type=whole_number, metavar="N", help=preemptions)
    loss = "with --load, a run at a manual value: bound on the KV tokens lost against the approved boot [%%]"
    parser.add_argument("--max-capacity-loss", type=real_number, metavar="PCT", help=loss)
    year = "with --load: year of vLLM's yearless MM-DD timestamps"
    parser.add_argument("--year", type=positive_int, help=year)


def load_policy(args: argparse.Namespace):
    """The :class:`kvplan.plan.LoadPolicy` of the --load options; None without --load."""
    given = [args.max_preemptions, args.max_capacity_loss, args.year]
    if not args.load and getattr(args, "start", None) is None:  # --prometheus --start: load evidence too
        if any(value is not None for value in given):
            raise CliError("--max-preemptions, --max-capacity-loss and --year apply to --load files only")
        return None
    from kvplan import plan

    allowed = 0 if args.max_preemptions is None else args.max_preemptions
    return plan.LoadPolicy(allowed, args.year, args.max_capacity_loss)


#: The warnings a command reports as its own, named so that catching them imports neither readers nor pandas.
REPORTED_WARNINGS = ("kvplan.ledger.LedgerWarning", "kvplan.io.nvidia_smi.NvidiaSmiWarning")


class _NamedWarnings(type):
    """A category that matches the :data:`REPORTED_WARNINGS` and their subclasses, by name."""

    def __subclasscheck__(cls, other: type) -> bool:
        return any(
            f"{base.__module__}.{base.__qualname__}" in REPORTED_WARNINGS
            for base in getattr(other, "__mro__", ())
        )


class ReportedWarning(Warning, metaclass=_NamedWarnings):
    """The category of every :data:`REPORTED_WARNINGS` class."""


@contextmanager
def reader_warnings_into(notes: list[str]) -> Iterator[None]:
    """Collect the :data:`REPORTED_WARNINGS` raised inside into ``notes`` (each once)."""
    caught: list = []
    try:
        with catch_warnings(record=True) as caught:
            simplefilter("always", ReportedWarning)
            yield
    finally:
        for warning in caught:
            if not issubclass(warning.category, ReportedWarning):
                showwarning(warning.message, warning.category, warning.filename, warning.lineno)
            elif str(warning.message) not in notes:
                notes.append(str(warning.message))


def print_warnings(warnings: Sequence[str]) -> None:
    """Print each warning kind of each file once (:func:`kvplan.notes.aggregate_notes`) as ``warning: …``."""
    from kvplan.notes import aggregate_notes

    for warning in aggregate_notes(warnings):
        print(f"warning: {terminal_text(warning)}", file=sys.stderr)


def print_error(message: object) -> None:
    """Print ``message`` as one ``error: …`` line on stderr, escaped."""
    print(f"error: {terminal_text(message)}", file=sys.stderr)


def format_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Plain-text table with right-aligned columns, one line per row, control characters escaped.

    >>> print(format_table([{"rank": 0, "safe": "12 GiB"}], ["rank", "safe"]))
    rank    safe
       0  12 GiB
    """
    cells = [[terminal_text(row.get(column, "")) for column in columns] for row in rows]
    widths = [max([len(column), *(len(row[i]) for row in cells)]) for i, column in enumerate(columns)]
    lines = ["  ".join(column.rjust(width) for column, width in zip(columns, widths))]
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def print_table(columns: Sequence[str], rows: Iterable[Sequence]) -> None:
    """A blank line, then :func:`format_table` of ``rows`` (one value per column)."""
    print()
    print(format_table([dict(zip(columns, row)) for row in rows], columns))


def unwritable_json(exc: Exception) -> str:
    """The error for a result orjson cannot write (a whole number beyond 64 bits)."""
    return f"the result cannot be written as JSON ({exc}): an input far out of range?"


def print_json(data: dict) -> int:
    """Print ``data`` as indented JSON (NaN and ±Inf as null); returns ``EXIT_OK``."""
    import orjson

    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    try:
        text = orjson.dumps(data, option=options | orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError as exc:  # the last line of defence (issue 25): a number beyond 64 bits
        raise CliError(unwritable_json(exc)) from None
    sys.stdout.write(text.decode())
    return EXIT_OK
