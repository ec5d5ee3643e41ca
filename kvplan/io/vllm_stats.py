"""Read what a vLLM server log shows under load: periodic stats lines, preemption warnings, OOM and errors.

Forms read (``vllm-load-formats.md``): the V0 stats line of every release (``Pending`` = waiting, with or
without the trailing period, with the ``Prefix cache hit rate: GPU: …%, CPU: …%`` companion line), the V1
line of every release (0.7.0's two fields, 0.7.1's missing comma, ``Engine NNN:`` and ``N Engines
Aggregated:``, ``Preemptions: N`` per interval, ``Deferred``, ``<device> KV cache usage``, any field order),
V0's preemption warning with ``total_num_cumulative_preemption=N``, and OOM / error lines (one event per
run of consecutive ERROR records, ``oom`` when any of them says ``CUDA out of memory`` or
``OutOfMemoryError``; V1's ``Dumping scheduler stats: SchedulerStats(…)`` fills the event's last state).

Tolerated around the records: ANSI colours, process prefixes (``(APIServer pid=1)``, Ray actors), docker
``--timestamps`` RFC 3339 stamps and bracketed ``[YYYY-MM-DD HH:MM:SS]`` stamps in front (they give the
year; the time is vLLM's own stamp), a ``VLLM_LOGGING_CONFIG_PATH`` format ``YYYY-MM-DD HH:MM:SS - logger -
LEVEL - message``, tqdm bars on the same physical line, several records glued on one line, a record
hard-wrapped at column 159 over two lines, and bare messages whose header was lost (no time).
Idle intervals are not logged at INFO (vLLM demotes a stats line to DEBUG when all throughputs are 0);
long gaps between stats lines are reported as warnings. A server start seen after rows (``vLLM API server
version …``, ``Initializing a(n) … LLM engine``) is a restart: later rows carry ``restarts`` ≥ 1, so V0's
``total_num_cumulative_preemption``, which starts again from 1, is counted on top of the earlier total.

Times: vLLM stamps records with the server's local time, /metrics scrapes are UTC. ``utc_offset`` (hours
east of UTC, e.g. ``-7`` for PDT) turns log times into UTC; without it, a run that mixes logs and
/metrics gets a warning that the two are compared as if the server ran on UTC.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from kvplan.io import prometheus_text
from kvplan.load_rows import LoadFormatError, LoadReading, LoadRow, LoadSource, combine_readings, percent

WRAP_WIDTH = 159  # column at which some log collectors hard-wrap a record
PLACEHOLDER_YEAR = 2000  # a leap year, so 02-29 parses; used only when no year is known (year_known=False)
IDLE_GAP_FACTOR = 3  # a gap longer than this many usual intervals is reported
V1_PREEMPTIONS_FIELD_FROM_LINENO = (
    236  # loggers.py line of the stats call in 0.11.1, the first with "Preemptions"
)

_LEVELS = "DEBUG|INFO|WARNING|ERROR|CRITICAL"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HEADER = re.compile(
    rf"(?P<level>{_LEVELS}) (?P<month>\d\d)-(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"\[?(?P<file>[\w./-]+?):(?P<lineno>\d+)\] "
)
_CUSTOM_HEADER = re.compile(
    rf"(?P<stamp>\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[,.]\d+)? - (?P<logger>[\w.]+) - (?P<level>{_LEVELS}) - "
)
_OUTER_STAMP = re.compile(
    r"^(?:(?P<docker_stamp>(?P<docker>\d{4}-\d\d)-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?Z "
    r"|\[(?P<bracket>\d{4}-\d\d)-\d\d [\d:]+\] )"
)
OFFSET_STEP_MINUTES = 15  # UTC offsets in use are whole quarter hours
_TRAILING_PREFIX = re.compile(r"\s*\([^()]*(?:\([^()]*\)[^()]*)*pid=\d+[^()]*\)\s*$")
_ENGINE_PREFIX = re.compile(r"EngineCore_(?:DP)?(\d+)\b")

_STATS = re.compile(r"\bRunning: \d+ reqs")
_ENGINE = re.compile(r"^Engine (\d+): ")
_AGGREGATED = re.compile(r"^\d+ Engines Aggregated: ")
_NUMBER = r"(-?\d+(?:\.\d+)?)"
_FIELDS = {
    "prompt_tokens_per_s": re.compile(rf"Avg prompt throughput: {_NUMBER} tokens/s"),
    "generation_tokens_per_s": re.compile(rf"Avg generation throughput: {_NUMBER} tokens/s"),
    "running": re.compile(r"Running: (\d+) reqs"),
    "waiting": re.compile(r"(?:Waiting|Pending): (\d+) reqs"),
    "swapped": re.compile(r"Swapped: (\d+) reqs"),
    "preemptions": re.compile(r"Preemptions: (\d+)"),
    "kv_cache_usage_pct": re.compile(rf"(?:^|, |reqs |: )[A-Z]+ KV cache usage: {_NUMBER}%"),
    "prefix_cache_hit_pct": re.compile(rf"(?:^|, )Prefix cache hit rate: {_NUMBER}%"),
}
_INT_FIELDS = {"running", "waiting", "swapped", "preemptions"}
_V1_LATE_MARKERS = ("Preemptions:", "Deferred:", "KV fetch:")
_V0_PREFIX_LINE = re.compile(rf"^Prefix cache hit rate: GPU: {_NUMBER}%, CPU: {_NUMBER}%")
_PREEMPTED = re.compile(
    r"is preempted by PreemptionMode\.\w+ mode because there is not enough KV cache space"
)
_PREEMPTION_TOTAL = re.compile(r"total_(?:num_cumulative_preemption|cumulative_preemption_cnt)=(\d+)")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
_DUMP = {
    "running": re.compile(r"SchedulerStats\(.*?\bnum_running_reqs=(\d+)"),
    "waiting": re.compile(r"SchedulerStats\(.*?\bnum_waiting_reqs=(\d+)"),
    "kv_cache_usage_pct": re.compile(r"SchedulerStats\(.*?\bkv_cache_usage=([\d.e+-]+)"),
}
_SERVER_START = re.compile(r"vLLM API server version |Initializing an? (?:V1 )?LLM engine")
MAX_UTC_OFFSET_HOURS = 14  # UTC−12 … UTC+14 are the offsets in use
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_MANUAL_BYTES = re.compile(r"'kv_cache_memory_bytes': (\d+)")


@dataclass(frozen=True)
class _Record:
    """One log record: where it starts, its level and time (``None`` when the header was lost)."""

    line: int
    level: str | None
    time: datetime | None
    year_known: bool
    file: str | None
    lineno: int | None
    engine_prefix: int | None
    message: str
    utc_offset_minutes: int | None = None  # from a docker --timestamps UTC stamp in front


def parse_stats_message(message: str) -> dict | None:
    """The fields of one vLLM stats message (V0 or V1), or ``None`` if it is not one.

    Keys: those of the row that the line states (``running``, ``waiting``, …, ``kv_cache_usage_pct``),
    plus ``engine`` (``None`` for V0 and for ``N Engines Aggregated``) and ``form`` (``v0`` or ``v1``).
    V0's ``Pending`` is ``waiting``; the first ``… KV cache usage`` is the device's (V0's CPU one is swap).

    >>> parse_stats_message("Engine 000: Avg prompt throughput: 8214.2 tokens/s, Avg generation "
    ...     "throughput: 1016.0 tokens/s, Running: 37 reqs, Waiting: 0 reqs, GPU KV cache usage: 68.9%, "
    ...     "Prefix cache hit rate: 14.2%")["kv_cache_usage_pct"]
    68.9
    >>> parse_stats_message("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 210.3 tokens/s, "
    ...     "Running: 12 reqs, Swapped: 0 reqs, Pending: 4 reqs, GPU KV cache usage: 97.1%, "
    ...     "CPU KV cache usage: 0.0%.")["waiting"]
    4
    """
    if not _STATS.search(message) or "SchedulerStats(" in message:
        return None
    fields: dict = {"form": "v0" if "Pending:" in message or "Swapped:" in message else "v1"}
    engine = _ENGINE.match(message)
    fields["engine"] = int(engine.group(1)) if engine else None
    for key, pattern in _FIELDS.items():
        match = pattern.search(message)
        if match:
            fields[key] = int(match.group(1)) if key in _INT_FIELDS else float(match.group(1))
    return fields


def _split_records(text: str, wrap_width: int) -> Iterator[tuple[int, str, re.Match | None, str]]:
    """(line number, physical prefix text, header match, message) for each record, in order."""
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        start = number
        line = _ANSI.sub("", lines[number]).rstrip("\r")
        number += 1
        while (
            len(line) == wrap_width
            and number < len(lines)
            and not _find_headers(_ANSI.sub("", lines[number]))
        ):
            line += _ANSI.sub("", lines[number]).rstrip("\r")
            number += 1
        headers = _find_headers(line)
        if not headers:
            if line.strip():
                yield start + 1, "", None, line.strip()
            continue
        for position, header in enumerate(headers):
            end = headers[position + 1].start() if position + 1 < len(headers) else len(line)
            before = line[headers[position - 1].end() if position else 0 : header.start()]
            message = _TRAILING_PREFIX.sub("", line[header.end() : end]).strip()
            yield start + 1, before, header, message


def _find_headers(line: str) -> list[re.Match]:
    return sorted([*_HEADER.finditer(line), *_CUSTOM_HEADER.finditer(line)], key=lambda m: m.start())


def _records(text: str, year: int | None, wrap_width: int) -> Iterator[_Record]:
    """Records with times; the year comes from ``year``, an outer stamp, or stays unknown."""
    known = year is not None
    year_value, last_month = (year if known else PLACEHOLDER_YEAR), None
    for number, before, header, message in _split_records(text, wrap_width):
        if header is None:
            yield _Record(number, None, None, False, None, None, None, message)
            continue
        if "stamp" in header.groupdict():
            stamp = datetime.strptime(header.group("stamp"), "%Y-%m-%d %H:%M:%S")
            known, year_value, last_month = True, stamp.year, stamp.month
            yield _Record(
                number, header.group("level"), stamp, True, header.group("logger"), None, None, message
            )
            continue
        month = int(header.group("month"))
        outer = _OUTER_STAMP.match(before)
        if outer and year is None:
            outer_year, outer_month = (
                int(p) for p in (outer.group("docker") or outer.group("bracket")).split("-")
            )
            # the outer stamp may be UTC and vLLM's local time: take the year that puts them closest
            known = True
            year_value = outer_year - (outer_month == 1 and month == 12) + (outer_month == 12 and month == 1)
        elif last_month is not None and month < last_month:
            year_value += 1  # the log ran over New Year
        last_month = month
        when = datetime.strptime(
            f"{year_value}-{month:02d}-{header.group('day')} {header.group('clock')}", "%Y-%m-%d %H:%M:%S"
        )
        prefix = _ENGINE_PREFIX.search(before[-120:])
        offset = None
        if outer and outer.group("docker_stamp"):  # docker's stamp is UTC, vLLM's the local time
            utc = datetime.strptime(outer.group("docker_stamp"), "%Y-%m-%dT%H:%M:%S")
            offset = OFFSET_STEP_MINUTES * round((when - utc).total_seconds() / 60 / OFFSET_STEP_MINUTES)
        yield _Record(
            number,
            header.group("level"),
            when,
            known,
            Path(header.group("file")).name,
            int(header.group("lineno")),
            int(prefix.group(1)) if prefix else None,
            message,
            offset,
        )


def log_time_shift(utc_offset: float | None) -> timedelta:
    """What to add to a log time (the server's local time) to get UTC, for ``utc_offset`` hours east of UTC.

    >>> log_time_shift(-7), log_time_shift(5.5), log_time_shift(None)
    (datetime.timedelta(seconds=25200), datetime.timedelta(days=-1, seconds=66600), datetime.timedelta(0))
    """
    if utc_offset is None:
        return timedelta(0)
    if not -MAX_UTC_OFFSET_HOURS <= utc_offset <= MAX_UTC_OFFSET_HOURS:
        raise ValueError(
            f"UTC offset {utc_offset:g} h is out of range: expected hours east of UTC, "
            f"from -{MAX_UTC_OFFSET_HOURS} to +{MAX_UTC_OFFSET_HOURS}"
        )
    return -timedelta(hours=utc_offset)


def _utc_offset(
    source: str, records: Sequence[_Record], given: float | None, warnings: list[str]
) -> float | None:
    """The log's UTC offset [h]: the one given, else the one its docker stamps agree on, else ``None``."""
    hours = sorted({r.utc_offset_minutes / 60 for r in records if r.utc_offset_minutes is not None})
    if given is not None:
        if hours and hours != [given]:
            warnings.append(
                f"{source}: the docker timestamps put the server at UTC{hours[0]:+g} h, not the "
                f"{given:+g} h given; the given offset is used"
            )
        return given
    if len(hours) == 1:
        warnings.append(
            f"{source}: log times turned into UTC with the server's offset UTC{hours[0]:+g} h, "
            "read from the docker --timestamps stamps (UTC) in front of vLLM's (local time)"
        )
        return hours[0]
    if hours:
        warnings.append(
            f"{source}: the docker timestamps give several UTC offsets "
            f"({', '.join(f'{h:+g} h' for h in hours)}); log times left as the server's local time"
        )
    return None


def parse_stats_text(
    text: str,
    source: str,
    year: int | None = None,
    wrap_width: int = WRAP_WIDTH,
    utc_offset: float | None = None,
) -> LoadReading:
    """Rows and warnings from the text of one vLLM server log (pure; see :func:`read_vllm_stats`).

    ``year`` anchors vLLM's yearless ``%m-%d`` stamps; without it the year comes from an outer stamp
    (docker, bracketed, custom format) or stays unknown (rows then have ``year_known=False``).
    ``utc_offset`` is the server's offset from UTC in hours; given, row times are UTC, else local. Without
    it, docker ``--timestamps`` stamps (UTC) in front of vLLM's (local) give the offset when they agree.

    >>> text = ("2026-11-29T17:00:10.758Z (APIServer pid=1) INFO 11-29 10:00:10 [loggers.py:310] Engine 000: "
    ...         "Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.2%")
    >>> reading = parse_stats_text(text, "docker.log")
    >>> reading.rows[0].time.isoformat(), reading.sources[0].utc_offset_hours
    ('2026-11-29T17:00:10', -7.0)

    >>> text = ("(APIServer pid=3) INFO 11-29 10:00:10 [loggers.py:310] Engine 000: Avg prompt throughput: "
    ...         "512.0 tokens/s, Avg generation throughput: 96.3 tokens/s, Running: 4 reqs, Waiting: 0 reqs, "
    ...         "GPU KV cache usage: 5.2%, Prefix cache hit rate: 0.0%")
    >>> row = parse_stats_text(text, "server.log", year=2026).rows[0]
    >>> row.time.isoformat(), row.engine, row.running, row.preemptions
    ('2026-11-29T10:00:10', 0, 4, 0)
    """
    records = list(_records(text, year, wrap_width))
    warnings: list[str] = []
    utc_offset = _utc_offset(source, records, utc_offset, warnings)
    shift = log_time_shift(utc_offset)
    records = [replace(r, time=r.time + shift) if r.time is not None and shift else r for r in records]
    rows: list[dict] = []
    restarts, rows_at_start = 0, 0
    error_row: dict | None = None
    late_v1 = any(
        (r.file == "loggers.py" and (r.lineno or 0) >= V1_PREEMPTIONS_FIELD_FROM_LINENO)
        or (
            _STATS.search(r.message)
            and (_AGGREGATED.match(r.message) or any(m in r.message for m in _V1_LATE_MARKERS))
        )
        for r in records
    )
    forms: set[str] = set()
    kv_tokens: set[int] = set()
    manual_bytes: set[int] = set()

    def base(record: _Record, **values) -> dict:
        return {
            "source": source,
            "line": record.line,
            "time": record.time,
            "year_known": record.year_known,
            "engine": record.engine_prefix,
            "restarts": restarts,
            "raw": record.message,
            **values,
        }

    for record in records:
        message = record.message
        if _SERVER_START.search(message):
            if len(rows) > rows_at_start:
                restarts += 1
                warnings.append(
                    f"{source}:{record.line}: the server restarted (a new vLLM start after stats lines); "
                    "its log counters (V0's total_num_cumulative_preemption) count from zero again"
                )
            rows_at_start = len(rows)
        for pattern, found in ((_KV_TOKENS, kv_tokens), (_MANUAL_BYTES, manual_bytes)):
            match = pattern.search(message)
            if match:
                found.add(int(match.group(1).replace(",", "")))
        is_oom = bool(_OOM.search(message))
        if record.level in ("ERROR", "CRITICAL") or (record.level is None and is_oom):
            if error_row is None:
                error_row = base(record, event="oom" if is_oom else "error")
                rows.append(error_row)
            elif is_oom and error_row["event"] != "oom":
                error_row.update(event="oom", raw=message)  # quote the OOM line, not the block's first line
            for key, pattern in _DUMP.items():
                match = pattern.search(message)
                if match:
                    value = float(match.group(1))
                    error_row[key] = percent(value) if key == "kv_cache_usage_pct" else int(value)
            continue
        stats = parse_stats_message(message)
        prefix_line = _V0_PREFIX_LINE.match(message)
        if record.level is not None or stats or _PREEMPTED.search(message):
            error_row = None
        if stats:
            form = stats.pop("form")
            forms.add(form)
            if form == "v1" and "preemptions" not in stats:
                stats["preemptions"] = 0 if late_v1 else None
            engine = stats.pop("engine")
            rows.append(base(record, **stats, engine=engine, form=form))
        elif prefix_line and rows and rows[-1].get("form") == "v0" and rows[-1].get("event") is None:
            rows[-1]["prefix_cache_hit_pct"] = float(prefix_line.group(1))
        elif _PREEMPTED.search(message):
            total = _PREEMPTION_TOTAL.search(message)
            rows.append(
                base(record, event="preemption", preemptions_total=int(total.group(1)) if total else None)
            )
    if not rows and not kv_tokens:
        raise LoadFormatError(
            f"{source}: no vLLM stats line ('… Running: N reqs …'), preemption warning, OOM or error line "
            "found; expected a vLLM server log or a saved /metrics snapshot"
        )
    warnings += _warnings(source, rows, records, forms, late_v1)
    if not rows:
        warnings.append(f"{source}: startup lines only, no stats line, preemption or OOM line "
                        "(idle intervals are logged at DEBUG)")
    if len(kv_tokens) > 1:
        warnings.append(
            f"{source}: several 'GPU KV cache size' values {sorted(kv_tokens)}; capacity left unknown"
        )
    for row in rows:
        row.pop("form", None)
    return LoadReading(
        rows=tuple(LoadRow(**row, kind="log") for row in rows),
        warnings=tuple(warnings),
        sources=(
            LoadSource(
                source,
                "log",
                kv_cache_tokens=kv_tokens.pop() if len(kv_tokens) == 1 else None,
                kv_cache_memory_bytes=manual_bytes.pop() if len(manual_bytes) == 1 else None,
                reports_preemptions="v0" in forms or ("v1" in forms and late_v1),
                utc_offset_hours=utc_offset,
            ),
        ),
    )


def _warnings(
    source: str, rows: Sequence[dict], records: Sequence[_Record], forms: set, late_v1: bool
) -> list[str]:
    warnings = []
    if any(r.time is not None and not r.year_known for r in records):
        warnings.append(
            f"{source}: vLLM's timestamps carry no year; times are shown as MM-DD HH:MM:SS "
            "(pass --year / year= to anchor them)"
        )
    untimed = [row for row in rows if row["time"] is None]
    if untimed:
        warnings.append(
            f"{source}: {len(untimed)} row(s) lost their log header and have no time "
            f"(first at line {untimed[0]['line']})"
        )
    preempted = [row for row in rows if row.get("event") == "preemption"]
    if preempted:
        last = preempted[-1]
        total = last["preemptions_total"]
        value = "" if total is None else f" (total_num_cumulative_preemption={total})"
        warnings.append(
            f"{source}: vLLM V0 logs a preemption warning only at the 1st, 51st, 101st … preemption; the "
            "preemptions counted from this log are a lower bound: up to 49 more may follow the last "
            f"warning, line {last['line']}{value}"
        )
    if "v1" in forms and not late_v1:
        warnings.append(
            f"{source}: these V1 stats lines (before vLLM 0.11.1) do not report preemptions; "
            "add a /metrics snapshot (vllm:num_preemptions_total) to count them"
        )
    stats = [row for row in rows if row.get("form") and row["time"] is not None]
    for engine in sorted({row["engine"] for row in stats}, key=lambda e: -1 if e is None else e):
        series = [row for row in stats if row["engine"] == engine]
        gaps = [(b["time"] - a["time"]).total_seconds() for a, b in itertools.pairwise(series)]
        usual = statistics.median(gaps) if gaps else 0
        for (a, b), gap in zip(itertools.pairwise(series), gaps):
            if usual > 0 and gap > IDLE_GAP_FACTOR * usual:
                name = "" if engine is None else f" of engine {engine}"
                warnings.append(
                    f"{source}: no stats line{name} between lines {a['line']} and {b['line']} ({gap:g} s; "
                    f"usual interval {usual:g} s): idle (vLLM logs idle intervals at DEBUG) or not logging"
                )
    return warnings


def read_vllm_stats(
    path: str | Path, year: int | None = None, utc_offset: float | None = None
) -> LoadReading:
    """Rows and warnings from one vLLM server log file; ``source`` is the path as given."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return parse_stats_text(text, str(path), year=year, utc_offset=utc_offset)


def read_load_evidence(
    paths: Sequence[str | Path], year: int | None = None, utc_offset: float | None = None
) -> LoadReading:
    """One run's load evidence from server logs and /metrics snapshots alike, rows in file order.

    Each file is sniffed: Prometheus text (``# HELP`` / ``# TYPE`` / ``vllm:`` samples) goes to
    :func:`kvplan.io.prometheus_text.read_metrics_snapshots` (all snapshots together, so counters are
    diffed across files), anything else to :func:`read_vllm_stats`. Give the files of one run only. Without
    ``year``, logs take the year of the snapshots' times when snapshots are given (with a warning).
    ``utc_offset`` is the server's offset from UTC in hours (the log's local time minus UTC); given, log
    times are turned into UTC like the /metrics times, as they are when docker stamps show the offset;
    otherwise a run that mixes logs and /metrics gets a warning.
    """
    shift = log_time_shift(utc_offset)
    texts = {str(path): Path(path).read_text(encoding="utf-8", errors="replace") for path in paths}
    metrics = [path for path, text in texts.items() if prometheus_text.is_metrics_text(text)]
    readings = []
    notes: list[str] = []
    if metrics:
        readings.append(prometheus_text.parse_metrics_snapshots([(path, texts[path]) for path in metrics]))
        timed = [row.time for row in readings[0].rows if row.time is not None]
        if year is None and timed and len(metrics) < len(texts):
            year = (min(timed) - shift).year  # the servers' local year at the first scrape
            clocks = ("" if utc_offset is not None
                      else "; log times are the server's local time, /metrics times UTC")
            notes.append(f"the logs' year is taken from the /metrics times ({year}){clocks}")
    logs = [
        parse_stats_text(text, path, year=year, utc_offset=utc_offset)
        for path, text in texts.items()
        if path not in metrics
    ]
    local = [s.source for log in logs for s in log.sources if s.utc_offset_hours is None]
    if metrics and local:
        notes.append(
            f"log times (the server's local time) and /metrics times (UTC) are mixed without a known "
            f"offset for {', '.join(local)}: the timeline places them as if the server ran on UTC (the "
            "load checks do not depend on it); to align them give the server's UTC offset "
            "(kvplan load --log-utc-offset HOURS, utc_offset= in Python)"
        )
    if notes:
        readings[0] = replace(readings[0], warnings=(*readings[0].warnings, *notes))
    return combine_readings([*readings, *logs], order=list(texts))
