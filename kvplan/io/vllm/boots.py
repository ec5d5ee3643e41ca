"""Candidate lines into boots: facts per record, a new boot at each restart, configuration by trust."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pandas as pd

from kvplan.columns import KEY_COLUMNS
from kvplan.io.ledger_frame import MAX_PID, ImpossibleValue, check_value, missing
from kvplan.io.metadata import place_note
from kvplan.io.vllm.families import impossible_in, read_message
from kvplan.io.vllm.handlers import Fact, PartsDisagree
from kvplan.io.vllm.records import rank_name, split_records, worker_groups
from kvplan.releases import version_tuple
from kvplan.units import MAX_DEVICE_BYTES, format_size

KV_SIZED_COLUMNS = (
    "available_kv_bytes",
    "suggested_full_bytes",
    "manual_kv_bytes",
    "kv_in_use_bytes",
    "num_gpu_blocks",
    "kv_cache_tokens",
)
#: Where a configuration value came from, most trusted first.
CONFIG_PRIORITY = {
    "auto_fit": -1,  # the length vLLM fitted after the engine config printed the original one
    "max_len_in_error": 1,  # the length vLLM checked the KV cache against, in its refusal
    "version": 0,
    "engine_config": 1,
    "non_default_args": 2,
    "namespace_args": 2,
    "block_size": 3,
    "rank": 4,
    "engine": 4,
    "blocks_override": 1,
    "max_num_batched_tokens": 1,
    "mamba_cache_mode": 1,
    "async_scheduling": 0,
    "hybrid_off": 0,  # vLLM's own word that it turned the manager off outranks the arguments
    "group_sizes": 1,
    "kv_pools": 1,
}
#: Key fields two launches of one boot cannot disagree on: a second value is a second launch.
IDENTITY_FIELDS = (
    "model",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "vllm_version",
)


@dataclass(slots=True)
class Event:
    """One fact of a boot: its line, raw line (byte offset, or text), who printed it, what it says."""

    line: int
    raw: int | str
    key: tuple | None
    family: str
    scope: str
    values: Mapping[str, Any]
    level: str | None


@dataclass
class Boot:
    """One boot's facts as read so far: configuration, events, process names, flags, warnings."""

    index: int
    first_line: int
    last_line: int = 0
    config: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    names: dict = field(default_factory=lambda: defaultdict(list))
    config_printers: set = field(default_factory=set)
    flags: dict = field(default_factory=dict)
    kv_reached: bool = False
    warnings: list = field(default_factory=list)
    #: lines where Ray collapsed several workers' KV-sizing lines into one ([repeated Nx across cluster])
    ray_repeats: list = field(default_factory=list)
    #: identity fields printed with two values by one family: (column, (value, line), (value, line))
    conflicts: list = field(default_factory=list)
    #: (pid, ip, name) → the own key of a process whose pid another rank's process printed under first
    aliases: dict = field(default_factory=dict)


class BootSplitter:
    """Turns candidate lines into boots, handing each finished boot to ``close`` (a restart, or the end)."""

    def __init__(self, source: str, close: Callable[[Boot], None]) -> None:
        self.source = source
        self.close = close
        self.boot = Boot(0, 1)

    def line(self, number: int, offset: int | None, data: bytes) -> None:
        """Read one line (number from 1, its bytes at byte ``offset``; None: provenance keeps its text)."""
        text = data.decode("utf-8", "replace")
        raw = text if offset is None else offset
        for record in split_records(text):
            try:
                facts = read_message(record[0])
            except PartsDisagree as refused:  # a line no vLLM prints: refused, naming it
                raise ImpossibleValue(f"{self.source}:{number}: {refused}") from None
            except ValueError as refused:  # a size beyond what kvplan holds (issue 25)
                raise ImpossibleValue(
                    f"{self.source}:{number}: {refused}: expected a GPU memory figure of at most "
                    f"{format_size(MAX_DEVICE_BYTES)}"
                ) from None
            if facts:
                if record[2] is not None and record[2] > MAX_PID:
                    check_value("pid", record[2], self.source, number)
                impossible = impossible_in(record[0])
                if impossible is not None:
                    check, column, value = impossible
                    check(column, value, self.source, number)  # refuses the log, naming this line
                self._facts(number, raw, facts, record)

    def finish(self) -> None:
        """Close the last boot."""
        self._close()

    def _facts(self, number: int, raw: int | str, facts: Sequence[Fact], record: tuple) -> None:
        """Record the facts of one record (:func:`~kvplan.io.vllm.records.split_records`)."""
        _message, process, pid, ip, level, repeated = record
        key = None
        if pid is not None:
            key = (pid, ip)
            names = self.boot.names.get(key)
            if self.boot.aliases or (names is not None and names != [process]):
                key = self._identity(number, record)
        for family, scope, values, columns in facts:
            if scope == "config":
                self._maybe_new_boot(number, family, key)
            boot = self.boot
            boot.last_line = number
            if repeated:
                text = (
                    f"Ray collapsed {repeated} similar lines from other workers into this one ([repeated Nx across "
                    "cluster]); their values are lost. Set RAY_DEDUP_LOGS=0."
                )
                boot.warnings.append(place_note("ray-collapsed", self.source, number, text))
            if key is not None:
                names = boot.names[key]
                if process not in names:
                    names.append(process)
            if scope == "rank" or scope == "engine":
                if not _KV_SIZED.isdisjoint(values):
                    boot.kv_reached = True
                    if repeated and scope == "rank":
                        boot.ray_repeats.append(number)
            elif scope == "config":
                if family == "engine_config":
                    boot.config_printers.add(key)
                    boot.flags.setdefault("v1", values.get("_v1"))
                self._config(number, raw, family, columns)
                continue
            elif scope == "flag":
                for name, value in values.items():
                    boot.flags.setdefault(name, (value, number))
                continue
            elif scope == "outcome":
                if level in ("DEBUG", "INFO", "WARNING"):
                    continue
                boot.kv_reached = True
            boot.events.append(Event(number, raw, key, family, scope, values, level))

    def _identity(self, number: int, record: tuple) -> tuple:
        """The printing process's key ``(pid, ip)``, or its own when another rank's process printed under that pid
        (two hosts' containers reusing pids, issue 25: a note)."""
        _message, process, pid, ip, _level, _repeated = record
        key = (pid, ip)
        boot = self.boot
        alias = boot.aliases.get((*key, process))
        if alias is not None:
            return alias
        claimed = rank_name(process)
        if claimed is None:
            return key
        other = next(
            (name for name in boot.names.get(key, ()) if rank_name(name) not in (None, claimed)), None
        )
        if other is None:
            return key
        alias = boot.aliases[(*key, process)] = (pid, f"{ip or ''} {process}")
        text = (
            f"pid {pid} printed as {other} and as {process} in one boot: two hosts' containers reuse "
            "pids; their lines are read apart by their process names (give each host's log with its host name, "
            "or Ray's ip= prefixes, to be sure)"
        )
        boot.warnings.append(place_note("pid-collision", self.source, number, text))
        return alias

    def _maybe_new_boot(self, number: int, family: str, key: tuple | None) -> None:
        boot = self.boot
        started = bool(boot.events) or bool(boot.config_printers)
        if family == "version":
            held = boot.config.get("vllm_version")
            start = started or (held is not None and held[3] == family)
        elif family in ("non_default_args", "namespace_args"):
            start = started or any(held[3] == family for held in boot.config.values())
        elif family == "engine_config":
            start = boot.kv_reached or "startup_done" in boot.flags or key in boot.config_printers
        else:
            return
        if start:
            self._close()
            self.boot = Boot(boot.index + 1, number)

    def _config(self, number: int, raw: int | str, family: str, columns: tuple) -> None:
        """Hold each of ``columns`` unless a more trusted family set it (:data:`CONFIG_PRIORITY`)."""
        config = self.boot.config
        priority = CONFIG_PRIORITY[family]
        for column, value in columns:
            held = config.get(column)
            if held is None:
                config[column] = (value, number, raw, family)
                continue
            if held[3] == family and column in IDENTITY_FIELDS and str(held[0]) != str(value):
                self.boot.conflicts.append((column, (held[0], held[1]), (value, number)))
            if CONFIG_PRIORITY[held[3]] > priority:
                config[column] = (value, number, raw, family)

    def _close(self) -> None:
        boot = self.boot
        if boot.events or boot.config:
            self.close(boot)


_KV_SIZED = frozenset(KV_SIZED_COLUMNS)


def boot_key(boot: Boot) -> tuple[dict, dict, tuple | None]:
    """The boot's compatibility key, per field its ``(line, raw)`` (defaults: no line), and its release."""
    key: dict = dict.fromkeys(KEY_COLUMNS, pd.NA)
    origin: dict = {}
    args = False  # whether the 'non-default args' line was read
    for column, held in boot.config.items():
        if column in key:
            key[column], origin[column] = held[0], held[1:3]
        if held[3] == "non_default_args":
            args = True
    unset = [name for name in ("gpu_memory_utilization", "max_model_len") if missing(key[name])]
    for event in boot.events if unset else ():
        for name in unset:
            if name in event.values and missing(key[name]):
                key[name], origin[name] = event.values[name], (event.line, event.raw)
    version = _release(key["vllm_version"])
    if version is not None:
        defaults = {"gpu_memory_utilization": 0.92 if version >= (0, 20) else 0.9, "block_size": 16}
        for name, value in defaults.items():
            if missing(key[name]):
                key[name], origin[name] = value, (pd.NA, f"default of vLLM {key['vllm_version']}")
    # vLLM names a worker ``Worker_DP{d}…`` only when DP > 1: then an unstated DP size is unknown, not 1
    # (issue 26; the ledger refuses a budget for it)
    every_name = (name for names in boot.names.values() for name in names if "DP" in name)
    dp_named = any(group == "DP" for name in every_name for group, _rank in worker_groups(name) or ())
    unknown = {"data_parallel_size"} if dp_named else set()
    if boot.config_printers:
        for name in ("pipeline_parallel_size", "data_parallel_size"):
            if missing(key[name]) and name not in unknown:
                key[name], origin[name] = 1, (pd.NA, "not in the engine config: 1")
    if args:
        # 'non-default args' lists what differs from the defaults: a size it does not list is 1
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if missing(key[name]) and name not in unknown:
                key[name], origin[name] = 1, (pd.NA, "not in the non-default args: 1")
    return key, origin, version


#: :func:`~kvplan.releases.version_tuple` of each version string once.
_release = lru_cache(maxsize=256)(version_tuple)
