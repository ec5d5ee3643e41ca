"""What-if exploration: move the reserve, guard, block size, length or a co-tenant and watch the budget.

Two layers. :func:`evaluate` is a pure function from a :class:`Scenario` (every input in bytes) to an
:class:`Outcome` (the budget, what it buys, the drift): it only calls :mod:`kvplan.budget`,
:mod:`kvplan.capacity` (or the scenario's :class:`~kvplan.kvspec.KVSpec`) and :mod:`kvplan.drift`, so
it is tested without a browser. Small helpers turn a ledger into a scenario and a budget into the
headline text and the "fix the weak rank or tune the value?" verdict the notebooks print, and give
the notebooks one call for each step they show (:func:`read_launch`, :func:`launch_spec`,
:func:`coverage`, :func:`concurrency_figure`), so a notebook holds no
logic of its own. :class:`WhatIfPanel` wires ipywidgets controls to it and redraws the budget table and the
:mod:`kvplan.charts` figures whenever a control moves.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from kvplan import charts
from kvplan.budget import Budget, kv_cache_flag, round_down_to_blocks, uniform_budget
from kvplan.capacity import (
    DEFAULT_BLOCK_SIZE,
    Capacity,
    block_bytes_from_token_bytes,
    bytes_for_sequences,
    capacity,
    concurrency_curve,
)
from kvplan.columns import MEASUREMENTS
from kvplan.drift import Drift, drift_budget
from kvplan.io import ReadMetadata, read_vllm_logs
from kvplan.io.nvidia_smi import join_snapshots
from kvplan.ledger import compatibility_key, launch_settings
from kvplan.plan import Decision, Evidence, ModelLayout, Policy, decide, layout_spec
from kvplan.units import bytes_to_gib, format_size, parse_size

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from kvplan.kvspec import KVCapacity, KVSpec

#: Block sizes vLLM accepts on CUDA (``CacheConfig.block_size``), offered by the panel.
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Scenario:
    """Inputs of one what-if evaluation; sizes in bytes, per-rank tuples in rank order.

    ``add_back_bytes`` raises a rank's room, e.g. by the memory of a co-tenant that moved away.
    Capacity needs ``max_model_len`` and either a ``kv_spec`` (:func:`kvplan.kvspec.kv_spec`: vLLM's
    own block, token and concurrency arithmetic for the model, layout and release) or a plain
    ``bytes_per_token`` per rank. ``block_size=None`` means the spec's block size (else 16). Drift
    needs ``ref_free_bytes`` and ``boot_free_bytes`` (startup free memory per rank of the profiled
    reference and of the later boot), against which ``guard_bytes`` is kept. ``max_position_embeddings``
    is the longest context the model config states (``None``: the one :func:`launch_spec` read for
    ``kv_spec``, if any); a longer ``max_model_len`` is warned about in the headline.
    """

    room_bytes: tuple[int, ...]
    reserve_bytes: int
    ranks: tuple[int, ...] | None = None
    add_back_bytes: tuple[int, ...] | None = None
    bytes_per_token: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None
    target_concurrency: float | None = None
    guard_bytes: int = 0
    ref_free_bytes: tuple[int, ...] | None = None
    boot_free_bytes: tuple[int, ...] | None = None
    kv_spec: KVSpec | None = None
    max_position_embeddings: int | None = None

    @classmethod
    def from_decision(cls, decision: Decision, **options) -> Scenario:
        """A scenario over a decision's worst room per rank, its reserve and its KV spec.

        ``options`` are the other fields (``max_model_len``, ``target_concurrency``, ``guard_bytes``,
        ``boot_free_bytes``, ...); ``ref_free_bytes`` defaults to the decision's ``F_ref``.
        """
        budget = decision.budget
        defaults = {"kv_spec": decision.spec, "ref_free_bytes": decision.ref_free_bytes}
        return cls(budget.room_bytes, budget.reserve_bytes, ranks=budget.ranks, **{**defaults, **options})

    @classmethod
    def from_ledger(cls, ledger: pd.DataFrame, reserve_bytes: int, assume_uniform: bool = False,
                    **options) -> Scenario:
        """:meth:`from_decision` of the pipeline's decision over a ledger (no model: ``kv_spec`` option)."""
        decision = decide(Evidence(ledger), Policy(reserve_bytes, assume_uniform=assume_uniform))
        return cls.from_decision(decision, **{"kv_spec": None, "ref_free_bytes": None, **options})

    @property
    def effective_block_size(self) -> int:
        """Block size in tokens: the one given, else the spec's, else vLLM's default 16."""
        if self.block_size is not None:
            return self.block_size
        return self.kv_spec.block_size if self.kv_spec is not None else DEFAULT_BLOCK_SIZE

    @property
    def position_limit(self) -> int | None:
        """The model's longest context in tokens: the one given, else the config's behind ``kv_spec``."""
        if self.max_position_embeddings is not None:
            return self.max_position_embeddings
        return self.kv_spec.arch.max_position_embeddings if self.kv_spec is not None else None

    @property
    def rank_ids(self) -> tuple[int, ...]:
        """Rank ids, 0..n-1 unless given."""
        return tuple(range(len(self.room_bytes))) if self.ranks is None else tuple(self.ranks)


@dataclass(frozen=True, eq=False)
class Outcome:
    """Everything one scenario gives: the budget, and where inputs allow, capacity and drift.

    ``target_length`` is the longest request length (≤ ``max_model_len``) at which the target
    concurrency (rounded up to whole sequences) still fits, 0 when not even one token does. ``spec``
    is the model spec at the block size in effect (vLLM may raise the one asked for). Compared by
    identity (it holds a DataFrame); compare ``budget`` or ``capacity`` instead.
    """

    scenario: Scenario
    budget: Budget
    capacity: Capacity | KVCapacity | None
    curve: pd.DataFrame | None
    target_bytes: int | None
    drift: Drift | None
    target_length: int | None = None
    spec: KVSpec | None = None

    @property
    def boot_budget_bytes(self) -> int | None:
        """Under drift, the value for this boot: :func:`boot_budget_bytes` (whole blocks); else None."""
        return None if self.drift is None else boot_budget_bytes(self.drift, self.budget.block_bytes)

    @property
    def target_sequences(self) -> int | None:
        """The target concurrency in whole sequences (rounded up), None without a target."""
        target = self.scenario.target_concurrency
        return math.ceil(target) if target else None

    def table(self) -> pd.DataFrame:
        """Per-rank table in bytes: room (after add-back), safe, uniform, stranded, limiting.

        Under drift, ``uniform_budget_bytes`` and ``limiting`` are this boot's (the adjusted value in
        whole blocks and the drift's limiting rank), after ``adjusted_bytes``; the reference's are kept
        as ``ref_uniform_budget_bytes``, ``ref_stranded_bytes`` and ``ref_limiting``.
        """
        frame = self.budget.to_frame()
        frame.insert(1, "add_back_bytes", list(self.scenario.add_back_bytes or [0] * len(frame)))
        if self.drift is not None:
            frame = frame.rename(columns={"uniform_budget_bytes": "ref_uniform_budget_bytes",
                                          "stranded_bytes": "ref_stranded_bytes", "limiting": "ref_limiting"})
            frame["adjusted_bytes"] = list(self.drift.adjusted_bytes)
            frame["uniform_budget_bytes"] = self.boot_budget_bytes
            frame["limiting"] = [rank == self.drift.limiting_rank for rank in self.drift.ranks]
        return frame

    def headline(self) -> dict[str, str]:
        """The figures a reviewer asks for first, as readable text.

        >>> GiB = 2**30
        >>> outcome = evaluate(Scenario((13 * GiB, 18 * GiB), reserve_bytes=GiB))
        >>> outcome.headline()["uniform budget"], outcome.headline()["limiting rank"]
        ('12 GiB', '0')
        """
        lines = budget_headline(self.budget)
        if self.drift is not None:
            boot_value = self.boot_budget_bytes
            lines = {
                "after drift": (
                    f"{format_size(boot_value)} (rank {self.drift.limiting_rank} limits"
                    + ("; re-profile to raise" if self.drift.reprofile_to_raise else "")
                    + ")"
                ),
                "flag for this boot": kv_cache_flag(boot_value),
                "limiting rank": str(self.drift.limiting_rank),
                "reference budget": lines["uniform budget"],
                "reference flag": lines["flag"],
                "reference limiting rank": lines["limiting rank"],
                "reference stranded total": lines["stranded total"],
                "reference min/median": lines["min/median"],
            }
        if self.capacity is not None:
            cap = self.capacity
            note = getattr(cap, "block_size_note", "")
            lines["block size"] = f"{cap.block_size} tokens" + (f" ({note})" if note else "")
            lines["tokens"] = f"{cap.tokens:,}"
            lines["max concurrency"] = f"{cap.max_concurrency:.2f}× at {cap.max_model_len:,}"
            if getattr(cap, "approximate_reason", ""):
                lines["approximate"] = cap.approximate_reason
        elif self.spec is not None:
            note = self.spec.block_size_note
            lines["block size"] = f"{self.spec.block_size} tokens" + (f" ({note})" if note else "")
        elif self.budget.block_bytes is not None:
            lines["block size"] = f"{self.scenario.effective_block_size} tokens"
        length = self.scenario.max_model_len
        if self.target_bytes is not None:
            target, sequences = self.scenario.target_concurrency, self.target_sequences
            rounded = f" ({target:g} rounded up to {sequences})" if sequences != target else ""
            needed = format_size(self.target_bytes)
            lines["target needs"] = f"{needed} per rank for {sequences:,} sequences of {length:,}{rounded}"
        if self.target_length is not None and self.target_length < (length or 0):
            sequences = self.target_sequences
            lines["target fits"] = (
                f"{sequences:,} sequences up to {self.target_length:,} tokens each"
                if self.target_length > 0
                else f"no: {sequences:,} sequences do not fit at any length (not even 1 token each)"
            )
        warning = length_warning(length, self.scenario.position_limit)
        if warning:
            lines["max model length"] = warning
        return lines


def boot_budget_bytes(drift: Drift, block_bytes: int | None = None) -> int:
    """The drift-adjusted uniform value for a later boot, rounded down to whole blocks when known.

    >>> GiB = 2**30
    >>> drift = drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB])  # 29 GiB
    >>> boot_budget_bytes(drift), boot_budget_bytes(drift, 3 * GiB) // GiB  # 9 blocks of 3 GiB
    (31138512896, 27)
    """
    value = drift.adjusted_uniform_bytes
    return value if not block_bytes else round_down_to_blocks(value, block_bytes)


def length_warning(max_model_len: int | None, position_limit: int | None) -> str:
    """A warning when ``max_model_len`` exceeds the model's ``max_position_embeddings``; else "".

    >>> length_warning(10_000_000, 131_072).startswith("10,000,000 tokens exceeds")
    True
    >>> length_warning(32_768, 131_072), length_warning(10_000_000, None)
    ('', '')
    """
    if max_model_len is None or position_limit is None or max_model_len <= position_limit:
        return ""
    return (
        f"{max_model_len:,} tokens exceeds the model config's max_position_embeddings "
        f"({position_limit:,}): vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
        "and the model was not trained that long"
    )


def budget_headline(budget: Budget) -> dict[str, str]:
    """Uniform budget, flag, limiting rank, stranded total and min/median of a budget, as text.

    >>> budget_headline(uniform_budget([13 * 2**30, 18 * 2**30], 2**30))["stranded total"]
    '5 GiB'
    """
    return {
        "uniform budget": format_size(budget.uniform_budget_bytes),
        "flag": budget.flag,
        "limiting rank": str(budget.limiting_rank),
        "stranded total": format_size(budget.stranded_total_bytes),
        "min/median": f"{budget.min_median_ratio:.3f}",
    }


def spec_headline(spec: KVSpec) -> dict[str, str]:
    """What a model spec says per rank: bytes per token and per block, block size and why, approximate or not.

    >>> from kvplan.kvspec import kv_spec
    >>> spec = kv_spec({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    ...                 "head_dim": 128, "torch_dtype": "bfloat16"}, tp=4, vllm_version="0.26.0")
    >>> spec_headline(spec)["bytes per block"]
    '1,310,720 (1.25 MiB)'
    """
    note = f" ({spec.block_size_note})" if spec.block_size_note else ""
    return {
        "model": spec.arch.name,
        "bytes per token per layer": f"{spec.bytes_per_token_per_layer:,}",
        "bytes per token per rank": f"{spec.bytes_per_token:,}",
        "block size": f"{spec.block_size} tokens{note}",
        "bytes per block": f"{spec.block_bytes:,} ({format_size(spec.block_bytes)})",
        "approximate": spec.approximate_reason or "no: exact for this model and release",
    }


def drift_headline(drift: Drift) -> dict[str, str]:
    """The drift-adjusted value, its limiting rank, whether to re-profile, and the flag for this boot.

    >>> GiB = 2**30
    >>> drift_headline(drift_budget(30 * GiB, 42 * GiB, [41 * GiB, 42 * GiB]))["adjusted uniform budget"]
    '29 GiB'
    """
    return {
        "adjusted uniform budget": format_size(drift.adjusted_uniform_bytes),
        "limiting rank": str(drift.limiting_rank),
        "re-profile to raise": str(drift.reprofile_to_raise),
        "flag for this boot": kv_cache_flag(boot_budget_bytes(drift)),
    }


def warnings_markdown(warnings: Sequence[str], none: str = "No warnings.") -> str:
    """The reader's warnings as a Markdown bullet list, or ``none`` when there are none.

    >>> print(warnings_markdown(["a.log:3: rank 1 shows no room", "b.log: no model name"]))
    - a.log:3: rank 1 shows no room
    - b.log: no model name
    """
    return "\n".join(f"- {warning}" for warning in warnings) or none


def format_headline(lines: Mapping[str, str]) -> str:
    """Headline figures as aligned ``name  value`` lines, stable enough to pin in a notebook test.

    >>> print(format_headline({"uniform budget": "12 GiB", "limiting rank": "2"}))
    uniform budget  12 GiB
    limiting rank   2
    """
    width = max(len(name) for name in lines)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in lines.items())


def weak_rank_verdict(budget: Budget, loss_threshold: float = 0.10) -> str:
    """Fix the weak rank or tune the value? Decided by ``1 − min/median`` against a threshold.

    When the weakest rank removes at least ``loss_threshold`` of the median rank's safe budget,
    the weak rank (its co-tenant, its extra memory) is the lever; otherwise the ranks agree and the
    reserve is the lever. The 10 % default is a policy choice, not a vLLM figure.

    >>> GiB = 2**30
    >>> weak_rank_verdict(uniform_budget([13 * GiB, 19 * GiB, 19 * GiB], GiB))[:36]
    'Fix the weak rank: rank 0 (12 GiB) r'
    """
    loss = budget.weak_rank_loss_fraction
    rank, weakest = budget.limiting_rank, format_size(budget.min_safe_bytes)
    median = format_size(budget.median_safe_bytes)
    if loss >= loss_threshold:
        return (
            f"Fix the weak rank: rank {rank} ({weakest}) removes {loss:.1%} of the median rank's "
            f"safe budget ({median}); find what else holds memory on its GPU before tuning the value."
        )
    return (
        f"Tune the value: the weakest rank ({rank}, {weakest}) is within {loss:.1%} of the median "
        f"({median}); the reserve is the lever."
    )


def budgets_by_boot(ledger: pd.DataFrame, reserve_bytes: int, block_bytes: int | None = None,
                    assume_uniform: bool = False) -> dict[str, Budget]:
    """The budget each boot of a ledger would give on its own, keyed ``"<file> #<boot>"``.

    Feeds :func:`kvplan.charts.spread_chart`: a weak rank that limits every boot is a property of
    the machine; one that moves is noise the worst-boot rule already covers.
    """
    budgets = {}
    for (source, boot), rows in ledger.groupby(["source", "boot"], sort=False):
        label = f"{Path(str(source)).name} #{int(boot)}"
        policy = Policy(reserve_bytes, assume_uniform=assume_uniform)
        budgets[label] = decide(Evidence(rows), policy, block_bytes=block_bytes).budget
    return budgets


def co_tenant_bytes(ledger: pd.DataFrame, ranks: Sequence[int] | None = None) -> list[int | None]:
    """Per rank (rank order), the most memory other processes held on its GPU in any boot.

    ``None`` where no nvidia-smi snapshot joined the ledger; labels :class:`WhatIfPanel`'s sliders.

    >>> co_tenant_bytes(pd.DataFrame({"rank": [0, 1, 1], "other_process_bytes": [None, 5, 7]}))
    [None, 7]
    """
    wanted = sorted({int(rank) for rank in ledger["rank"].dropna()}) if ranks is None else list(ranks)
    if "other_process_bytes" not in ledger.columns:
        return [None] * len(wanted)
    most = ledger.groupby("rank")["other_process_bytes"].max()
    return [None if rank not in most.index or pd.isna(most[rank]) else int(most[rank]) for rank in wanted]


_ledger_co_tenants = co_tenant_bytes  # for WhatIfPanel, whose parameter has the same name


#: The snapshot files :func:`read_launch` looks for next to the logs (the README's nvidia-smi commands).
NVIDIA_SMI_NAMES = ("nvidia-smi-gpu.csv", "nvidia-smi-apps.csv")


def snapshots_in(folder: str | Path) -> list[Path]:
    """The nvidia-smi snapshots saved in ``folder`` under the :data:`NVIDIA_SMI_NAMES`, in that order.

    The rule by which :func:`read_launch` finds them when ``nvidia_smi`` is None; a name that is not a
    file there (or a ``folder`` that is a file or a glob) gives none.

    >>> from kvplan.config import DATA_DIR
    >>> [path.name for path in snapshots_in(DATA_DIR / "boots" / "four-rank")]
    ['nvidia-smi-gpu.csv', 'nvidia-smi-apps.csv']
    >>> snapshots_in(DATA_DIR / "boots" / "four-rank" / "boot.log")
    []
    """
    folder = Path(folder)
    return [folder / name for name in NVIDIA_SMI_NAMES if (folder / name).is_file()]


def launch_snapshots(
    log_paths: Sequence[str | Path], nvidia_smi: Sequence[str | Path] | None = None
) -> list[Path]:
    """The nvidia-smi snapshots of a launch given as log files: ``nvidia_smi`` when given, else found.

    ``None`` takes :func:`snapshots_in` each distinct folder of ``log_paths`` (the rule of
    :func:`read_launch`); ``[]`` gives none. The result is what :func:`kvplan.evidence.approve` takes as
    ``nvidia_smi_paths``.

    >>> from kvplan.config import DATA_DIR
    >>> logs = [DATA_DIR / "boots" / "four-rank" / "boot.log"]
    >>> [path.name for path in launch_snapshots(logs)]
    ['nvidia-smi-gpu.csv', 'nvidia-smi-apps.csv']
    >>> launch_snapshots(logs, [])
    []
    """
    if nvidia_smi is not None:
        return [Path(path) for path in nvidia_smi]
    folders = dict.fromkeys(Path(path).parent for path in log_paths)
    return [path for folder in folders for path in snapshots_in(folder)]


def read_launch(
    log_dir: str | Path, nvidia_smi: Sequence[str | Path] | None = None
) -> tuple[pd.DataFrame, ReadMetadata]:
    """The ledger and reader metadata of a launch's logs, with nvidia-smi snapshots joined when given.

    ``log_dir`` is what :func:`kvplan.io.read_vllm_logs` takes (a folder of ``*.log``, a file, a
    glob). ``nvidia_smi=None`` takes the :data:`NVIDIA_SMI_NAMES` files found in ``log_dir`` (a
    folder), so pointing a notebook at another folder needs no second parameter; ``[]`` joins none.
    Ranks are matched to GPUs by pid, else GPU index = rank (:func:`kvplan.io.nvidia_smi.gpu_index_by_rank`).
    """
    ledger, metadata = read_vllm_logs(log_dir)
    if nvidia_smi is None:
        nvidia_smi = snapshots_in(log_dir)
    if nvidia_smi:
        joined, _, joined_metadata = join_snapshots(ledger, nvidia_smi, warn=False)  # warnings listed below
        metadata = metadata.with_warnings(joined_metadata.warnings)
        ledger = joined
    return ledger, metadata


def launch_spec(ledger: pd.DataFrame, model: str | Path, tp: int | None = None, **options) -> KVSpec:
    """The KV spec of ``model`` (a name in ``data/models/`` or a config.json) on the launch the logs show.

    Layout (TP, PP, DCP), KV dtype, block size and vLLM release come from the logs' compatibility
    key unless given in ``options`` (:func:`kvplan.kvspec.kv_spec` keywords); a ``tp`` other than
    the logs' is refused (:func:`kvplan.kvspec.options_for_logs`).
    """
    key = {**compatibility_key(ledger), **launch_settings(ledger)}
    return layout_spec(ModelLayout(model, {"tp": tp, **options}), key)


def launch_max_model_len(ledger: pd.DataFrame, given: int | None = None) -> int:
    """The maximum model length to plan with: ``given`` when set, else the one the launch logged.

    Raises :class:`ValueError` naming ``MAX_MODEL_LEN`` (the notebooks' parameter) when ``given`` is
    None and the logs do not print ``max_model_len``, or when ``given`` is not a positive whole number;
    logs whose boots disagree are refused by :func:`kvplan.ledger.compatibility_key`.

    >>> ledger = pd.DataFrame({"source": "a.log", "boot": 0, "rank": [0, 1], "max_model_len": 32768})
    >>> launch_max_model_len(ledger), launch_max_model_len(ledger, 8192)
    (32768, 8192)
    >>> launch_max_model_len(ledger.drop(columns="max_model_len"))
    Traceback (most recent call last):
    ...
    ValueError: the logs show no max_model_len: set MAX_MODEL_LEN to the length the launch used
    """
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given <= 0:
            raise ValueError(f"MAX_MODEL_LEN must be a positive whole number of tokens, got {given!r}")
        return given
    logged = compatibility_key(ledger).get("max_model_len")
    if logged is None or pd.isna(logged):
        raise ValueError("the logs show no max_model_len: set MAX_MODEL_LEN to the length the launch used")
    return int(logged)


def coverage(ledger: pd.DataFrame) -> pd.DataFrame:
    """Which measurements each boot × rank printed: one row per ledger measurement, True where shown.

    Columns are ``(boot, rank)`` (``(source, boot, rank)`` when the ledger holds several files); a
    measurement the ledger has no column for is False everywhere.

    >>> ledger = pd.DataFrame({"boot": [0, 0], "rank": [0, 1], "room_bytes": [5, None]})
    >>> print(coverage(ledger).loc["room_bytes"])
    boot  rank
    0     0        True
          1       False
    Name: room_bytes, dtype: bool
    """
    index = ["boot", "rank"]
    if "source" in ledger.columns and ledger["source"].nunique() > 1:
        index = ["source", *index]
    shown = ledger.set_index(index).reindex(columns=list(MEASUREMENTS))
    return shown.notna().T


def weak_rank_at_median(outcome: Outcome) -> Scenario:
    """The same scenario with the limiting rank's safe budget raised to the median rank's.

    "What would the launch buy if its weak rank were a typical one?": the answer to "fix the weak
    rank or tune the value?" in tokens. The uniform value then follows the next weakest rank.

    >>> GiB = 2**30
    >>> outcome = evaluate(Scenario((13 * GiB, 17 * GiB, 19 * GiB), GiB))  # safe 12, 16, 18 GiB
    >>> evaluate(weak_rank_at_median(outcome)).budget.uniform_budget_bytes // GiB
    16
    """
    scenario, budget = outcome.scenario, outcome.budget
    add_back = list(scenario.add_back_bytes or (0,) * len(scenario.room_bytes))
    position = budget.ranks.index(budget.limiting_rank)
    add_back[position] += budget.median_safe_bytes - budget.min_safe_bytes
    return replace(scenario, add_back_bytes=tuple(add_back))


def sequence_lengths(max_model_len: int, shortest: int = 256) -> list[int]:
    """Powers of two from ``shortest`` up to ``max_model_len``, plus ``max_model_len`` itself [tokens].

    >>> sequence_lengths(32768)
    [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    >>> sequence_lengths(10000, shortest=2048)
    [2048, 4096, 8192, 10000]
    """
    if max_model_len <= 0:
        raise ValueError(f"max_model_len must be positive, got {max_model_len}")
    lengths = []
    length = shortest
    while length < max_model_len:
        lengths.append(length)
        length *= 2
    return [*lengths, max_model_len]


def evaluate(scenario: Scenario, seq_lens: Sequence[int] | None = None) -> Outcome:
    """The budget and what it buys for one scenario (pure: no widgets, no drawing).

    Room per rank is ``room_bytes + add_back_bytes``; the budget is rounded to whole blocks when
    ``bytes_per_token`` is known; the drift reference budget per rank is the safe budget
    (room − reserve), as the gate uses it.

    >>> GiB = 2**30
    >>> s = Scenario((13 * GiB, 18 * GiB), GiB, bytes_per_token=256 * 1024, max_model_len=8192)
    >>> o = evaluate(s)
    >>> o.budget.uniform_budget_bytes // GiB, o.capacity.tokens, o.capacity.max_concurrency
    (12, 49152, 6.0)
    >>> evaluate(replace(s, add_back_bytes=(6 * GiB, 0))).budget.limiting_rank  # 19 vs 18 GiB
    1
    """
    ranks = scenario.rank_ids
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    if len(add_back) != len(scenario.room_bytes):
        raise ValueError(f"{len(add_back)} add-back values for {len(scenario.room_bytes)} ranks")
    room = [r + extra for r, extra in zip(scenario.room_bytes, add_back)]
    block_size = scenario.effective_block_size
    spec = scenario.kv_spec
    if spec is not None and spec.block_size != block_size:
        spec = spec.with_settings(block_size=block_size)
    bpt = scenario.bytes_per_token
    if spec is not None:
        block_bytes = spec.block_bytes
    else:
        block_bytes = None if bpt is None else block_bytes_from_token_bytes(bpt, block_size)
    budget = uniform_budget(room, scenario.reserve_bytes, block_bytes=block_bytes, ranks=ranks)
    cap = curve = target = target_length = None
    length = scenario.max_model_len
    if block_bytes is not None and length is not None:
        kv_bytes = budget.uniform_budget_bytes
        lengths = list(seq_lens) if seq_lens is not None else sequence_lengths(length)
        sequences = math.ceil(scenario.target_concurrency) if scenario.target_concurrency else None
        if spec is not None:
            cap = spec.capacity(kv_bytes, length)
            curve = spec_concurrency_curve(spec, kv_bytes, lengths)
            if sequences:
                target = sequences * spec.blocks_per_request(length) * spec.block_bytes

            def concurrency_at(seq_len: int) -> float:
                return spec.capacity(kv_bytes, seq_len).max_concurrency
        else:
            cap = capacity(kv_bytes, bpt, length, block_size)
            curve = concurrency_curve(kv_bytes, bpt, lengths, block_size)
            if sequences:
                target = bytes_for_sequences(sequences, length, bpt, block_size)

            def concurrency_at(seq_len: int) -> float:
                return capacity(kv_bytes, bpt, seq_len, block_size).max_concurrency
        if sequences:
            target_length = longest_length_at(concurrency_at, sequences, length)
    drift = None
    if scenario.boot_free_bytes is not None:
        if scenario.ref_free_bytes is None:
            raise ValueError("drift needs the reference boot's free memory per rank (ref_free_bytes)")
        drift = drift_budget(
            list(budget.safe_bytes), list(scenario.ref_free_bytes), list(scenario.boot_free_bytes),
            scenario.guard_bytes, ranks,
        )
    return Outcome(scenario, budget, cap, curve, target, drift, target_length, spec)


def longest_length_at(concurrency_at, target: float, max_model_len: int) -> int:
    """The longest length ≤ ``max_model_len`` [tokens] with ``concurrency_at(length) ≥ target``; 0 if none.

    ``concurrency_at`` (full-length requests at once for a request length) must not rise with the
    length, as vLLM's concurrency does not; found by bisection.

    >>> # 3072 blocks of 16 tokens: 8 requests fit while a request needs ≤ 3072 / 8 = 384 blocks = 6144 tokens
    >>> longest_length_at(lambda n: 3072 / -(-n // 16), 8, 32_768)
    6144
    >>> longest_length_at(lambda n: 2.0, 8, 32_768), longest_length_at(lambda n: 9.0, 8, 32_768)
    (0, 32768)
    """
    low, high = 0, max_model_len  # concurrency_at(low) ≥ target, or low = 0
    if concurrency_at(high) >= target:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if concurrency_at(middle) >= target:
            low = middle
        else:
            high = middle
    return low


def concurrency_figure(outcome: Outcome, weak_rank_fixed: bool = False) -> Figure:
    """:func:`kvplan.charts.concurrency_chart` of an outcome (needs its curve), labelled and annotated.

    With ``weak_rank_fixed``, a second curve shows the same launch with its limiting rank raised to
    the median rank (:func:`weak_rank_at_median`). Each curve's crossing of the target concurrency
    is marked at its ``target_length``, and an approximate spec says why under the title.
    """
    if outcome.curve is None:
        raise ValueError("no concurrency curve: the scenario needs a model spec (or bytes per token) "
                         "and max_model_len")
    budget = outcome.budget
    outcomes = {f"uniform {format_size(budget.uniform_budget_bytes)}": outcome}
    if weak_rank_fixed:
        fixed = evaluate(weak_rank_at_median(outcome))
        median = format_size(budget.median_safe_bytes)
        label = (f"rank {budget.limiting_rank} raised to the median ({median}): "
                 f"uniform {format_size(fixed.budget.uniform_budget_bytes)}")
        outcomes[label] = fixed
    crossings = {label: o.target_length for label, o in outcomes.items() if o.target_length is not None}
    return charts.concurrency_chart(
        {label: o.curve for label, o in outcomes.items()},
        outcome.scenario.max_model_len,
        outcome.scenario.target_concurrency,
        crossings=crossings,
        note=getattr(outcome.capacity, "approximate_reason", ""),
    )


def spec_concurrency_curve(spec: KVSpec, kv_bytes: int, seq_lens: Sequence[int]) -> pd.DataFrame:
    """:func:`kvplan.capacity.concurrency_curve` in vLLM's own arithmetic for a model spec.

    Tokens and concurrency come from ``spec.capacity`` at each length, so hybrid and sliding-window
    models are sized as vLLM sizes them (and as approximately as the spec says).
    """
    rows = []
    for length in seq_lens:
        cap = spec.capacity(kv_bytes, int(length))
        rows.append(
            {
                "seq_len": int(length),
                "blocks": cap.blocks,
                "tokens": cap.tokens,
                "max_concurrency": cap.max_concurrency,
                "whole_sequences": math.floor(cap.max_concurrency),
            }
        )
    return pd.DataFrame(rows)


def ledger_after_add_back(ledger: pd.DataFrame, scenario: Scenario) -> pd.DataFrame:
    """A copy of ``ledger`` with ``other_process_bytes`` lowered by the scenario's add-back per rank (≥ 0).

    "What if the co-tenant on rank 2 moved?" as the ledger chart draws it.

    >>> frame = pd.DataFrame({"rank": [0, 1], "other_process_bytes": [None, 5]})
    >>> scenario = Scenario((10, 10), 1, add_back_bytes=(3, 2))
    >>> ledger_after_add_back(frame, scenario)["other_process_bytes"].tolist()
    [0, 3]
    """
    shown = ledger.copy()
    if not scenario.add_back_bytes:
        return shown
    other = pd.to_numeric(shown.get("other_process_bytes", pd.Series(0, index=shown.index)), errors="coerce")
    extra = shown["rank"].map(dict(zip(scenario.rank_ids, scenario.add_back_bytes))).fillna(0)
    shown["other_process_bytes"] = (other.fillna(0) - extra).clip(lower=0).astype("int64")
    return shown


def gib_to_bytes(value_gib: float) -> int:
    """Bytes in a slider's GiB value, to the nearest byte (0.9 → parse_size("0.9GiB")).

    >>> gib_to_bytes(0.9) == parse_size("0.9GiB"), gib_to_bytes(12)
    (True, 12884901888)
    """
    return parse_size(f"{value_gib:.6f}GiB")


def add_back_bytes(value_gib: float, co_tenant: int | None) -> int:
    """An add-back slider's bytes, never more than the co-tenant holds (nothing when that is unknown).

    A slider at its maximum (the co-tenant's bytes in GiB) gives the co-tenant's exact bytes.

    >>> co_tenant = 25_845_153_792  # 24.07 GiB (rounded)
    >>> add_back_bytes(25.0, co_tenant) == add_back_bytes(co_tenant / 2**30, co_tenant) == co_tenant
    True
    >>> add_back_bytes(2.0, co_tenant), add_back_bytes(2.0, None)
    (2147483648, 0)
    """
    if co_tenant is None:
        return 0
    if value_gib >= bytes_to_gib(int(co_tenant)):  # the slider's maximum
        return int(co_tenant)
    return min(gib_to_bytes(value_gib), int(co_tenant))


def add_back_limits(scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None) -> list[int | None]:
    """The most each rank's add-back may be (rank order): its co-tenant's bytes, None where unknown.

    A scenario that already adds back more than that keeps its own value as the limit.

    >>> add_back_limits(Scenario((10, 10), 1, add_back_bytes=(0, 9)), [5, 7])
    [5, 9]
    >>> add_back_limits(Scenario((10,), 1), None)
    [None]
    """
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    co_tenants = list(co_tenant_bytes) if co_tenant_bytes is not None else [None] * len(add_back)
    if len(co_tenants) != len(add_back):
        raise ValueError(f"{len(co_tenants)} co-tenant values for {len(add_back)} ranks")
    return [
        (max(int(co_tenant), extra) if co_tenant is not None and not pd.isna(co_tenant) else (extra or None))
        for co_tenant, extra in zip(co_tenants, add_back)
    ]


#: A chart of :class:`WhatIfPanel`: its name and a function drawing it.
ChartStep = tuple[str, "Callable[[], Figure]"]


def rows_that_set_the_room(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger rows of each rank that show its room (all of a rank's rows where none does).

    A ledger of a profiled reference and a boot started with a manual value (which shows no room)
    is charted from the reference, the boot whose room set the budget.

    >>> frame = pd.DataFrame({"rank": [0, 0, 1], "room_bytes": [None, 5, None]})
    >>> rows_that_set_the_room(frame).index.tolist()
    [1, 2]
    """
    if "room_bytes" not in ledger.columns:
        return ledger
    shown = ledger["room_bytes"].notna()
    any_shown = shown.groupby(ledger["rank"]).transform("any")
    return ledger[shown | ~any_shown]


def panel_charts(outcome: Outcome, ledger: pd.DataFrame | None = None) -> list[ChartStep]:
    """The charts an outcome allows, as ``(name, draw)`` pairs in display order (nothing drawn yet).

    Safe budget per rank; the ledger (when given, from :func:`rows_that_set_the_room` with the
    add-back taken off the co-tenants); stranded capacity; concurrency (with a curve); drift.

    >>> GiB = 2**30
    >>> [name for name, _ in panel_charts(evaluate(Scenario((13 * GiB, 18 * GiB), GiB)))]
    ['safe budget', 'stranded']
    """
    steps: list[ChartStep] = [("safe budget", lambda: charts.safe_budget_chart(outcome.budget))]
    if ledger is not None:
        steps.append(("ledger", lambda: charts.ledger_chart(
            ledger_after_add_back(rows_that_set_the_room(ledger), outcome.scenario), outcome.budget)))
    steps.append(("stranded", lambda: charts.stranded_chart(outcome.budget)))
    if outcome.curve is not None:
        steps.append(("concurrency", lambda: concurrency_figure(outcome)))
    if outcome.drift is not None:
        steps.append(("drift", lambda: charts.drift_chart(outcome.drift)))
    return steps


class WhatIfPanel:
    """Sliders and fields over a :class:`Scenario`; every change re-runs :func:`evaluate` and redraws.

    Shows the headline, the per-rank table (GiB) and the charts (:func:`panel_charts`): safe budget
    per rank, the per-rank ledger (when ``ledger`` is given; added-back memory comes off its "other
    processes"), stranded capacity, concurrency (with a spec or ``bytes_per_token``, and
    ``max_model_len``) and drift (with boot free memory). ``co_tenant_bytes`` (per rank, e.g.
    :func:`co_tenant_bytes` of the ledger; taken from ``ledger`` when not given) labels and caps the
    add-back sliders so a planner can ask "what if the co-tenant on rank 2 moved?"; a rank whose
    co-tenant memory is unknown gets a disabled slider. Display the panel by making it the last
    expression of a cell. Bad input (a reserve above a rank's room) shows the error in place of the
    charts; a chart that cannot be drawn shows why in its place (``chart_errors``).
    """

    def __init__(self, scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None = None,
                 ledger: pd.DataFrame | None = None) -> None:
        self.base = scenario
        self.ledger = ledger
        self.outcome: Outcome | None = None
        self.error: str | None = None
        self.chart_errors: dict[str, str] = {}
        if co_tenant_bytes is None and ledger is not None:
            co_tenant_bytes = _ledger_co_tenants(ledger, scenario.rank_ids)
        self.add_back_limits = add_back_limits(scenario, co_tenant_bytes)
        self.controls = _controls(scenario, co_tenant_bytes, self.add_back_limits)
        self.output = widgets.Output()
        self._initial = {name: control.value for name, control in self.controls.items()}
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.box = widgets.VBox(
            [widgets.HBox([widgets.VBox(list(self.controls.values()))]), self.output]
        )
        self.update()

    def scenario(self) -> Scenario:
        """The scenario the controls currently describe (untouched controls keep the exact bytes)."""
        moved = {
            name: control.value
            for name, control in self.controls.items()
            if control.value != self._initial[name]
        }
        changes: dict = {}
        if "reserve_gib" in moved:
            changes["reserve_bytes"] = gib_to_bytes(moved["reserve_gib"])
        if "guard_gib" in moved:
            changes["guard_bytes"] = gib_to_bytes(moved["guard_gib"])
        if "block_size" in moved:
            changes["block_size"] = int(moved["block_size"])
        if "max_model_len" in moved:
            changes["max_model_len"] = int(moved["max_model_len"])
        if "target_concurrency" in moved:
            changes["target_concurrency"] = int(moved["target_concurrency"]) or None
        ranks = self.base.rank_ids
        if any(f"add_back_{rank}" in moved for rank in ranks):
            base = self.base.add_back_bytes or (0,) * len(ranks)
            changes["add_back_bytes"] = tuple(
                add_back_bytes(moved[f"add_back_{rank}"], limit) if f"add_back_{rank}" in moved else extra
                for rank, extra, limit in zip(ranks, base, self.add_back_limits)
            )
        return replace(self.base, **changes)

    def update(self) -> None:
        """Re-evaluate the current scenario and redraw the table and charts."""
        try:
            self.outcome, self.error = evaluate(self.scenario()), None
        except ValueError as exc:
            self.outcome, self.error = None, str(exc)
        self.chart_errors = {}
        with self.output:
            self.output.clear_output(wait=True)
            if self.error is not None:
                display(widgets.HTML(f"<b>No safe budget:</b> {html.escape(self.error)}"))
                return
            display(pd.Series(self.outcome.headline(), name="value").to_frame())
            display(charts.gib_table(self.outcome.table()))
            for name, draw in panel_charts(self.outcome, self.ledger):
                try:
                    figure = draw()
                except Exception as exc:  # any failure is shown, never raised from a control
                    self.chart_errors[name] = f"{type(exc).__name__}: {exc}"
                    display(widgets.HTML(f"<b>The {name} chart cannot be drawn:</b> "
                                         f"{html.escape(self.chart_errors[name])}"))
                    continue
                display(figure)
                plt.close(figure)

    def figures(self) -> list:
        """The charts for the current outcome (the caller closes them); none is left open on failure."""
        if self.outcome is None:
            return []
        figures = []
        try:
            for _, draw in panel_charts(self.outcome, self.ledger):
                figures.append(draw())
        except Exception:
            for figure in figures:
                plt.close(figure)
            raise
        return figures

    def _on_change(self, _change: dict) -> None:
        self.update()

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/plain"] = "What-if panel: open the notebook in JupyterLab with a live kernel."
        return bundle


def _controls(scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None,
              limits: Sequence[int | None]) -> dict[str, widgets.Widget]:
    style = {"description_width": "initial"}
    layout = widgets.Layout(width="640px")
    reserve_gib = bytes_to_gib(scenario.reserve_bytes)
    controls: dict[str, widgets.Widget] = {
        "reserve_gib": widgets.FloatSlider(
            value=reserve_gib, min=0.0, max=max(4.0, 2 * reserve_gib), step=0.05, readout_format=".2f",
            description="reserve per rank [GiB]", style=style, layout=layout, continuous_update=False,
        )
    }
    if scenario.boot_free_bytes is not None:
        guard_gib = bytes_to_gib(scenario.guard_bytes)
        controls["guard_gib"] = widgets.FloatSlider(
            value=guard_gib, min=0.0, max=max(2.0, 2 * guard_gib), step=0.05, readout_format=".2f",
            description="drift guard [GiB]", style=style, layout=layout, continuous_update=False,
        )
    if scenario.bytes_per_token is not None or scenario.kv_spec is not None:
        block_size = scenario.effective_block_size
        controls["block_size"] = widgets.Dropdown(
            options=sorted({*BLOCK_SIZES, block_size}), value=block_size,
            description="block size asked [tokens]", style=style,
            tooltip="vLLM may raise it (hybrid and MLA models): the headline shows the block size in effect",
        )
        if scenario.max_model_len is not None:
            controls["max_model_len"] = widgets.BoundedIntText(
                value=scenario.max_model_len, min=1, max=10_000_000, step=1024,
                description="max model length [tokens]", style=style,
            )
            controls["target_concurrency"] = widgets.BoundedIntText(
                value=math.ceil(scenario.target_concurrency or 0), min=0, max=100_000, step=1,
                description="target concurrency [sequences] (0 = none)", style=style,
            )
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    co_tenants = list(co_tenant_bytes) if co_tenant_bytes is not None else [None] * len(add_back)
    for rank, extra, co_tenant, limit in zip(scenario.rank_ids, add_back, co_tenants, limits):
        known = co_tenant is not None and not pd.isna(co_tenant)
        note = f" (other processes {format_size(int(co_tenant))})" if known else " (other processes unknown)"
        ceiling = bytes_to_gib(limit or 0)
        controls[f"add_back_{rank}"] = widgets.FloatSlider(
            value=bytes_to_gib(extra), min=0.0, max=ceiling, step=0.1, readout_format=".2f",
            description=f"rank {rank}: add back [GiB]{note}", style=style, layout=layout,
            continuous_update=False, disabled=not limit,
            tooltip=(
                "up to what other processes hold on this GPU" if known and limit
                else "no other processes on this GPU: nothing to add back" if known
                else "no nvidia-smi snapshot joined for this rank: its co-tenant memory is unknown, "
                "so nothing can be added back"
            ),
        )
    return controls
