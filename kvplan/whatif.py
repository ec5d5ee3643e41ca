"""What-if exploration: move the reserve, guard, block size, length or a co-tenant and watch the budget.

Two layers. :func:`evaluate` is a pure function from a :class:`Scenario` (every input in bytes) to an
:class:`Outcome` (the budget, what it buys, the drift): it only calls :mod:`kvplan.budget`,
:mod:`kvplan.capacity` (or the scenario's :class:`~kvplan.kvspec.KVSpec`) and :mod:`kvplan.drift`, so
it is tested without a browser. Small helpers turn a ledger into a scenario and a budget into the
headline text and the "fix the weak rank or tune the value?" verdict the notebooks print.
:class:`WhatIfPanel` wires ipywidgets controls to it and redraws the budget table and the
:mod:`kvplan.charts` figures whenever a control moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from kvplan import charts
from kvplan.budget import Budget, uniform_budget
from kvplan.capacity import (
    DEFAULT_BLOCK_SIZE,
    Capacity,
    block_bytes_from_token_bytes,
    bytes_for_sequences,
    capacity,
    concurrency_curve,
)
from kvplan.drift import Drift, drift_budget
from kvplan.ledger import budget_from_ledger, room_per_rank
from kvplan.units import bytes_to_gib, format_size, parse_size

if TYPE_CHECKING:
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
    reference and of the later boot), against which ``guard_bytes`` is kept.
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

    @classmethod
    def from_ledger(cls, ledger: pd.DataFrame, reserve_bytes: int, assume_uniform: bool = False,
                    **options) -> Scenario:
        """A scenario over the worst room per rank of a ledger (:func:`kvplan.ledger.room_per_rank`).

        ``options`` are the other fields (``kv_spec``, ``max_model_len``, ``target_concurrency``, ...).
        """
        rooms = room_per_rank(ledger, assume_uniform=assume_uniform)
        return cls(
            tuple(int(room) for room in rooms["room_bytes"]), reserve_bytes,
            ranks=tuple(int(rank) for rank in rooms.index), **options,
        )

    @property
    def effective_block_size(self) -> int:
        """Block size in tokens: the one given, else the spec's, else vLLM's default 16."""
        if self.block_size is not None:
            return self.block_size
        return self.kv_spec.block_size if self.kv_spec is not None else DEFAULT_BLOCK_SIZE

    @property
    def rank_ids(self) -> tuple[int, ...]:
        """Rank ids, 0..n-1 unless given."""
        return tuple(range(len(self.room_bytes))) if self.ranks is None else tuple(self.ranks)


@dataclass(frozen=True, eq=False)
class Outcome:
    """Everything one scenario gives: the budget, and where inputs allow, capacity and drift.

    Compared by identity (it holds a DataFrame); compare ``budget`` or ``capacity`` instead.
    """

    scenario: Scenario
    budget: Budget
    capacity: Capacity | KVCapacity | None
    curve: pd.DataFrame | None
    target_bytes: int | None
    drift: Drift | None

    def table(self) -> pd.DataFrame:
        """Per-rank table in bytes: room (after add-back), safe, stranded, and adjusted under drift."""
        frame = self.budget.to_frame()
        frame.insert(1, "add_back_bytes", list(self.scenario.add_back_bytes or [0] * len(frame)))
        if self.drift is not None:
            frame["adjusted_bytes"] = list(self.drift.adjusted_bytes)
        return frame

    def headline(self) -> dict[str, str]:
        """The figures a reviewer asks for first, as readable text.

        >>> GiB = 2**30
        >>> outcome = evaluate(Scenario((13 * GiB, 18 * GiB), reserve_bytes=GiB))
        >>> outcome.headline()["uniform budget"], outcome.headline()["limiting rank"]
        ('12 GiB', '0')
        """
        lines = budget_headline(self.budget)
        if self.capacity is not None:
            cap = self.capacity
            lines["tokens"] = f"{cap.tokens:,}"
            lines["max concurrency"] = f"{cap.max_concurrency:.2f}× at {cap.max_model_len:,}"
        if self.target_bytes is not None:
            lines["target needs"] = (
                f"{format_size(self.target_bytes)} per rank for {self.scenario.target_concurrency:g} "
                f"sequences of {self.scenario.max_model_len:,}"
            )
        if self.drift is not None:
            lines["after drift"] = (
                f"{format_size(self.drift.uniform_budget_bytes)} (rank {self.drift.limiting_rank} limits"
                + ("; re-profile to raise" if self.drift.reprofile_to_raise else "")
                + ")"
            )
        return lines


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
        budgets[label] = budget_from_ledger(rows, reserve_bytes, block_bytes=block_bytes,
                                            assume_uniform=assume_uniform)
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
    cap = curve = target = None
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
        else:
            cap = capacity(kv_bytes, bpt, length, block_size)
            curve = concurrency_curve(kv_bytes, bpt, lengths, block_size)
            if sequences:
                target = bytes_for_sequences(sequences, length, bpt, block_size)
    drift = None
    if scenario.boot_free_bytes is not None:
        if scenario.ref_free_bytes is None:
            raise ValueError("drift needs the reference boot's free memory per rank (ref_free_bytes)")
        drift = drift_budget(
            list(budget.safe_bytes), list(scenario.ref_free_bytes), list(scenario.boot_free_bytes),
            scenario.guard_bytes, ranks,
        )
    return Outcome(scenario, budget, cap, curve, target, drift)


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


def gib_to_bytes(value_gib: float) -> int:
    """Bytes in a slider's GiB value, to the nearest byte (0.9 → parse_size("0.9GiB")).

    >>> gib_to_bytes(0.9) == parse_size("0.9GiB"), gib_to_bytes(12)
    (True, 12884901888)
    """
    return parse_size(f"{value_gib:.6f}GiB")


class WhatIfPanel:
    """Sliders and fields over a :class:`Scenario`; every change re-runs :func:`evaluate` and redraws.

    Shows the headline, the per-rank table (GiB) and the charts: safe budget per rank, stranded
    capacity, concurrency (with a spec or ``bytes_per_token``, and ``max_model_len``) and drift
    (with boot free memory). ``co_tenant_bytes`` (per rank, e.g. the ledger's
    ``other_process_bytes``) labels the add-back sliders so a planner can ask "what if the
    co-tenant on rank 2 moved?". Display the panel by making it the last expression of a cell.
    Bad input (a reserve above a rank's room) shows the error in place of the charts.
    """

    def __init__(self, scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None = None) -> None:
        self.base = scenario
        self.outcome: Outcome | None = None
        self.error: str | None = None
        self.controls = _controls(scenario, co_tenant_bytes)
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
            changes["target_concurrency"] = float(moved["target_concurrency"]) or None
        ranks = self.base.rank_ids
        if any(f"add_back_{rank}" in moved for rank in ranks):
            base = self.base.add_back_bytes or (0,) * len(ranks)
            changes["add_back_bytes"] = tuple(
                gib_to_bytes(moved[f"add_back_{rank}"]) if f"add_back_{rank}" in moved else extra
                for rank, extra in zip(ranks, base)
            )
        return replace(self.base, **changes)

    def update(self) -> None:
        """Re-evaluate the current scenario and redraw the table and charts."""
        try:
            self.outcome, self.error = evaluate(self.scenario()), None
        except ValueError as exc:
            self.outcome, self.error = None, str(exc)
        with self.output:
            self.output.clear_output(wait=True)
            if self.error is not None:
                display(widgets.HTML(f"<b>No safe budget:</b> {self.error}"))
                return
            display(pd.Series(self.outcome.headline(), name="value").to_frame())
            display(charts.gib_table(self.outcome.table()))
            for figure in self.figures():
                display(figure)
                plt.close(figure)

    def figures(self) -> list:
        """The charts for the current outcome (the caller closes them)."""
        outcome = self.outcome
        if outcome is None:
            return []
        figures = [charts.safe_budget_chart(outcome.budget), charts.stranded_chart(outcome.budget)]
        if outcome.curve is not None:
            figures.append(
                charts.concurrency_chart(
                    {f"uniform {format_size(outcome.budget.uniform_budget_bytes)}": outcome.curve},
                    outcome.scenario.max_model_len,
                    outcome.scenario.target_concurrency,
                )
            )
        if outcome.drift is not None:
            figures.append(charts.drift_chart(outcome.drift))
        return figures

    def _on_change(self, _change: dict) -> None:
        self.update()

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/plain"] = "What-if panel: open the notebook in JupyterLab with a live kernel."
        return bundle


def _controls(scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None) -> dict[str, widgets.Widget]:
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
            description="block size [tokens]", style=style,
        )
        if scenario.max_model_len is not None:
            controls["max_model_len"] = widgets.BoundedIntText(
                value=scenario.max_model_len, min=1, max=10_000_000, step=1024,
                description="max model length [tokens]", style=style,
            )
            controls["target_concurrency"] = widgets.BoundedFloatText(
                value=scenario.target_concurrency or 0.0, min=0.0, max=100_000.0, step=1.0,
                description="target concurrency (0 = none)", style=style,
            )
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    co_tenants = list(co_tenant_bytes) if co_tenant_bytes is not None else [None] * len(add_back)
    for rank, extra, co_tenant in zip(scenario.rank_ids, add_back, co_tenants):
        note = f" (other processes {format_size(int(co_tenant))})" if co_tenant else ""
        ceiling = max(8.0, bytes_to_gib(int(co_tenant or 0)), bytes_to_gib(extra))
        controls[f"add_back_{rank}"] = widgets.FloatSlider(
            value=bytes_to_gib(extra), min=0.0, max=math.ceil(ceiling), step=0.1, readout_format=".2f",
            description=f"rank {rank}: add back [GiB]{note}", style=style, layout=layout,
            continuous_update=False,
        )
    return controls
