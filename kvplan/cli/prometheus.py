"""The ``--prometheus URL`` options: load evidence (``--start``, ``--end``) and GPU snapshots (``--at``)."""

from __future__ import annotations

import argparse
import atexit
import shutil
import tempfile
from pathlib import Path

from kvplan.cli.common import CliError


def add_prometheus_arguments(parser: argparse.ArgumentParser, what: str = "the load test's") -> None:
    """Add ``--prometheus``, ``--start``, ``--end``, ``--step`` and ``--match`` to ``parser``."""
    group = parser.add_argument_group("load evidence from Prometheus")
    for flag, metavar, text in (
        ("--prometheus", "URL", f"read {what} vLLM series from the Prometheus server at URL (e.g. http://prometheus:9090)"),
        ("--start", "TIME", "with --prometheus: first time (Unix s or ISO 8601, UTC)"),
        ("--end", "TIME", "with --prometheus: last time (Unix s or ISO 8601, UTC)"),
        ("--step", "DURATION", "with --prometheus: Prometheus' value every DURATION (query_range, e.g. 15s); default: "
         "every sample as scraped (no scrape is skipped, none repeated)"),
        ("--match", "SELECTOR", 'with --prometheus: label matchers choosing one server, e.g. {job="vllm",instance="canary-0:8000"}'),
    ):  # fmt: skip
        group.add_argument(flag, metavar=metavar, help=text)


def _window(args: argparse.Namespace) -> tuple[float, float, float | None] | None:
    """``(start, end, step)`` [Unix s, s] of the --prometheus options; None without --prometheus."""
    given = [f"--{name}" for name in ("start", "end", "step", "match") if getattr(args, name) is not None]
    if not args.prometheus:
        if given:
            raise CliError(f"{', '.join(given)}: only with --prometheus")
        return None
    if args.start is None and args.end is None and getattr(args, "at", None) is not None:
        return None  # approve --prometheus URL --at TIME: the GPUs alone
    if args.start is None or args.end is None:
        raise CliError("--prometheus needs --start TIME and --end TIME (Unix s or ISO 8601)")
    from kvplan.io.prometheus import parse_duration, parse_time

    step = None if args.step is None else parse_duration(args.step)
    return parse_time(args.start), parse_time(args.end), step


def prometheus_load(args: argparse.Namespace):
    """The :class:`kvplan.io.load.LoadReading` of the --prometheus options; None without --prometheus."""
    if (window := _window(args)) is None:
        return None
    from kvplan.io.prometheus import read_prometheus_load

    return read_prometheus_load(args.prometheus, *window, match=args.match)


def _temporary(name: str) -> str:
    """A path ``name`` in a new temporary folder removed at exit (a bundle copies what it keeps)."""
    folder = tempfile.mkdtemp(prefix="kvplan-prometheus-")
    atexit.register(shutil.rmtree, folder, True)
    return f"{folder}/{name}"


def prometheus_load_files(args: argparse.Namespace) -> list[str]:
    """``approve --prometheus``: the run's samples saved as a temporary /metrics file the bundle keeps."""
    if (window := _window(args)) is None:
        return []
    from kvplan.io.prometheus import save_prometheus_load

    path = save_prometheus_load(args.prometheus, *window, args.match, _temporary("prometheus-load.prom"))
    return [str(path)]


def add_gpu_arguments(
    parser: argparse.ArgumentParser, url: bool = True, at: bool = True, host: bool = True
) -> None:
    """``--prometheus URL``, ``--at TIME`` and ``--gpu-host HOST``, where the command has not added them."""
    group = parser.add_argument_group("GPU snapshot from Prometheus (DCGM exporter)")
    for wanted, flag, metavar, text in (
        (url, "--prometheus", "URL", "the Prometheus server that scrapes DCGM"),
        (at, "--at", "TIME", "with --prometheus: the GPUs' DCGM framebuffer series at TIME (Unix s or ISO 8601, "
         "UTC), read as a --dcgm scrape (after warm-up of the same boot)"),
        (host, "--gpu-host", "HOST", "with --prometheus --at: the launch's host (DCGM's Hostname label) when "
         "Prometheus holds several"),
    ):  # fmt: skip
        if wanted:
            group.add_argument(flag, metavar=metavar, help=text)


def prometheus_gpu_files(args: argparse.Namespace, required: bool = True) -> tuple[list[str], list[str]]:
    """``--prometheus URL --at TIME``: one host's DCGM series as a temporary ``dcgm.prom``, and warnings."""
    host = getattr(args, "gpu_host", None)
    if host is not None and not (args.prometheus and args.at):
        raise CliError("--gpu-host: only with --prometheus and --at")
    if args.at is None or not args.prometheus:
        if args.prometheus and required and getattr(args, "start", None) is None:
            raise CliError("--prometheus needs --at TIME here: when to read the GPUs' DCGM series")
        return [], []
    from kvplan.io.gpu_snapshot import dcgm_scrapes_at
    from kvplan.io.prometheus import parse_time

    at = parse_time(args.at)
    scrapes = {
        name: text for name, text in dcgm_scrapes_at(args.prometheus, at).items() if host in (None, name)
    }
    if len(scrapes) > 1:
        raise CliError(
            f"prometheus {args.prometheus}: DCGM series of {len(scrapes)} hosts at {at:.0f} (Unix s) "
            f"({', '.join(list(scrapes)[:3])}…): choose the launch's host with --gpu-host"
        )
    if scrapes:
        path = Path(_temporary("dcgm.prom"))
        partial = path.with_name(path.name + ".partial")
        partial.write_text(next(iter(scrapes.values())), encoding="utf-8")
        return [str(partial.replace(path))], []
    missing = (
        f"prometheus {args.prometheus} shows no DCGM framebuffer series (DCGM_FI_DEV_FB_FREE, _USED) "
        f"{'' if host is None else f'of {host} '}at {at:.0f} (Unix s)"
    )
    if required:
        raise CliError(missing)
    return [], [f"{missing}: the GPUs' free memory is not read from Prometheus"]


def prometheus_fleet_hosts(args: argparse.Namespace, hosts: list) -> list:
    """``fleet plan --prometheus URL --at TIME``: ``hosts``, each with its GPUs' DCGM series as a snapshot."""
    if not args.prometheus or args.at is None:
        raise CliError("--prometheus and --at go together here: the fleet's GPUs from DCGM at TIME")
    from kvplan.fleet.inputs import with_dcgm_snapshots
    from kvplan.io.gpu_snapshot import dcgm_scrapes_at
    from kvplan.io.prometheus import parse_time

    at = parse_time(args.at)
    scrapes = dcgm_scrapes_at(args.prometheus, at)
    if not scrapes:
        raise CliError(f"prometheus {args.prometheus} shows no DCGM framebuffer series at {at:.0f} (Unix s)")
    return with_dcgm_snapshots(hosts, scrapes, _temporary("hosts"))


def add_gate_prometheus_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate's ``--prometheus`` options and ``--metrics FILE``."""
    add_prometheus_arguments(parser, "the canary's")
    parser.add_argument(
        "--at",
        metavar="TIME",
        help="with --prometheus: when to read each engine's vllm:cache_config_info (default: --end, else now)",
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=[],
        metavar="SCRAPE",
        help="the canary's saved /metrics scrapes: each engine's vllm:cache_config_info (the last scrape) "
        "against the approved value",
    )


def gate_running_checks(args: argparse.Namespace, approved_bytes: int, block_bytes: int | None) -> list:
    """The gate's running-value checks (Prometheus, ``--metrics``, the boot logs; one showing none: unknown)."""
    import time

    from kvplan.checks import Check
    from kvplan.checks.canary import RUNNING_CHECK, check_running_values
    from kvplan.io import prometheus

    if args.at is not None and not args.prometheus:
        raise CliError("--at: only with --prometheus")
    sources = []  # (where, the running values it shows)
    if args.prometheus:
        moment = args.at or args.end
        at = time.time() if moment is None else prometheus.parse_time(moment)
        where = f"prometheus {args.prometheus} at {at:.0f} (Unix s)"
        sources.append((where, prometheus.running_values_at(args.prometheus, at, args.match)))
    sources += [(str(path), prometheus.running_values_of_metrics([path])) for path in args.metrics]
    unseen = [where for where, found in sources if not found]
    values = [value for _, found in sources for value in found] + prometheus.running_values_of_logs(args.logs)
    checks = check_running_values(values, approved_bytes, block_bytes)
    return checks + [
        Check(RUNNING_CHECK, None, f"{where} shows no vllm:cache_config_info: the running value is unknown")
        for where in unseen
    ]


def gate_prometheus_checks(args: argparse.Namespace, approved, policy) -> tuple[list, list[str]]:
    """The gate's checks from ``--prometheus`` (as ``--load`` files) and ``--metrics``, and the load warnings."""
    from kvplan import plan

    at_only = args.prometheus and args.start is None and args.end is None  # --at: the running value alone
    if at_only and args.step is not None:
        raise CliError("--step: only with --start and --end")
    served = None if at_only else prometheus_load(args)
    if served is None:
        return gate_running_checks(args, approved.budget_bytes, approved.block_bytes), []
    section, checks = plan.load_section(
        served, policy or plan.LoadPolicy(), approved.budget_bytes, approved.capacity_tokens,
        approved.logged_tokens,
    )  # fmt: skip
    running = gate_running_checks(args, approved.budget_bytes, approved.block_bytes)
    return checks + running, [*section["notes"], *section["warnings"]]
