"""The what-if panel: ipywidgets controls over a scenario, safe under a kernel handling widget messages on
several threads: no pyplot state, one state rendered at a time under a lock, the last state wins."""

from __future__ import annotations

import base64
import html
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace

import ipywidgets as widgets
import pandas as pd

from kvplan.notebook.figures import (
    ChartStep,
    LiveChart,
    figure_alt,
    figure_png,
    ledger_parts,
    panel_axes,
    panel_charts,
    sentence,
)
from kvplan.notebook.headlines import readable_table
from kvplan.notebook.launch import co_tenant_bytes as ledger_co_tenants
from kvplan.notebook.whatif import (
    BLOCK_SIZES,
    Outcome,
    Scenario,
    add_back_bytes,
    add_back_limits,
    evaluate,
    gib_to_bytes,
)
from kvplan.units import bytes_to_gib, format_size


class WhatIfPanel:
    """Controls over a :class:`Scenario`: each change shows :func:`evaluate`'s verdict, headline, table and
    charts (against the notebook's, faintly); ``co_tenant_bytes`` (default ``ledger``'s) caps the add-backs.
    Bad input shows in the verdict line, a chart that fails says why in its place (``chart_errors``)."""

    def __init__(
        self,
        scenario: Scenario,
        co_tenant_bytes: Sequence[int | None] | None = None,
        ledger: pd.DataFrame | None = None,
    ) -> None:
        self.base = scenario
        self.ledger = ledger
        try:  # the ledger chart's parts, read once; a ledger they cannot be read from fails in the chart's place
            self._ledger_shown = None if ledger is None else ledger_parts(ledger, scenario.rank_ids)
        except ValueError:
            self._ledger_shown = ledger
        self.outcome: Outcome | None = None
        self.error: str | None = None
        self.chart_errors: dict[str, str] = {}
        if co_tenant_bytes is None and ledger is not None:
            co_tenant_bytes = ledger_co_tenants(ledger, scenario.rank_ids)
        self.add_back_limits = add_back_limits(scenario, co_tenant_bytes)
        self.controls = _controls(scenario, co_tenant_bytes, self.add_back_limits)
        self._initial = {name: control.value for name, control in self.controls.items()}
        self.baseline = evaluate(scenario)  # the notebook's parameters: drawn faintly, sets the axes
        self.axes = panel_axes(self.baseline)
        self.verdict_html = widgets.HTML()
        self.verdict_html.add_class("kvplan-verdict")
        self.table_html = widgets.HTML()
        self.table_html.add_class("kvplan-table")
        self.images = {step.name: widgets.HTML() for step in self.chart_steps()}  # one output per chart
        shown = [self.verdict_html, self.table_html, *self.images.values()]
        self.box = widgets.VBox([widgets.VBox(list(self.controls.values())), *shown])
        self.box.add_class("kvplan-panel")
        self._holding = False  # set_values: one redraw after all its changes
        self._drawn: dict[str, tuple[tuple, str, bytes | None]] = {}  # chart: (inputs, HTML, PNG) last shown
        self._live: dict[str, LiveChart] = {}  # chart: its figure, drawn into again at each state
        self._pngs: list[bytes] = []
        self._render_lock = threading.Lock()
        self._ticket_lock = threading.Lock()
        self._ticket = 0
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    def scenario(self) -> Scenario:
        """The scenario the controls describe (untouched controls keep the exact bytes)."""
        moved = {n: c.value for n, c in self.controls.items() if c.value != self._initial[n]}
        changes = {field: read(moved[name]) for name, (field, read) in _FIELDS.items() if name in moved}
        ranks = self.base.rank_ids
        if any(f"add_back_{rank}" in moved for rank in ranks):
            base = self.base.add_back_bytes or (0,) * len(ranks)
            changes["add_back_bytes"] = tuple(
                add_back_bytes(moved[f"add_back_{rank}"], limit) if f"add_back_{rank}" in moved else extra
                for rank, extra, limit in zip(ranks, base, self.add_back_limits)
            )
        return replace(self.base, **changes)

    def verdict(self) -> str:
        """The verdict line: :meth:`Outcome.verdict`, or why there is no safe budget."""
        if self.outcome is None:
            return f"DOES NOT FIT: no safe budget: {self.error}"
        return self.outcome.verdict()

    def chart_steps(self, outcome: Outcome | None = None) -> list[ChartStep]:
        """The panel's charts for ``outcome`` (default: the baseline), a moved state against the baseline."""
        outcome = outcome or self.baseline
        moved = outcome.scenario != self.base
        return panel_charts(outcome, self._ledger_shown, self.axes, self.baseline if moved else None)

    def chart_pngs(self) -> list[bytes]:
        """The PNG of every chart with axes of the current state, as shown."""
        return list(self._pngs)

    def figures(self) -> list:
        """The chart figures of the current outcome."""
        return [] if self.outcome is None else [step.draw() for step in self.chart_steps(self.outcome)]

    def update(self) -> None:
        """Re-evaluate the controls' scenario and redraw, unless superseded while waiting."""
        with self._ticket_lock:
            self._ticket += 1
            ticket = self._ticket
        with self._render_lock:
            if ticket != self._ticket:
                return  # a newer change is waiting for the lock: it renders the latest state
            self._render(self.scenario(), ticket)

    def _render(self, scenario: Scenario, ticket: int | None = None) -> None:
        """Evaluate and show ``scenario``; superseded by a newer ``ticket``, stop and show nothing."""
        try:
            outcome, error = evaluate(scenario), None
        except ValueError as exc:
            outcome, error = None, str(exc)
        errors: dict[str, str] = {}
        images: dict[str, str] = {}
        pngs: list[bytes] = []
        if outcome is not None:  # everything is drawn first, then shown at once: text and charts agree
            for step in self.chart_steps(outcome):
                if ticket is not None and ticket != self._ticket:
                    return
                try:
                    images[step.name], png = self._chart(step)
                    pngs += [png] if png is not None else []
                except Exception as exc:  # any failure is shown, never raised from a control
                    errors[step.name] = f"{type(exc).__name__}: {exc}"
                    images[step.name] = (
                        f"<b>The {step.name} chart cannot be drawn:</b> {html.escape(errors[step.name])}"
                    )
                    self._drawn.pop(step.name, None)
        self.outcome, self.error, self.chart_errors, self._pngs = outcome, error, errors, pngs
        for name, value in images.items():
            if self.images[name].value != value:  # an unchanged chart is not sent to the browser again
                self.images[name].value = value
        self.table_html.value = "" if outcome is None else _tables_html(outcome)
        self.verdict_html.value = f"<b>{html.escape(self.verdict())}</b>"

    def _chart(self, step: ChartStep) -> tuple[str, bytes | None]:
        """A chart's HTML and PNG (None for a sentence), the last ones while its inputs are the same."""
        last = self._drawn.get(step.name)
        if last is not None and last[0] == step.inputs:
            return last[1], last[2]
        live = self._live.setdefault(step.name, LiveChart())
        figure = step.draw(figure=live.figure)
        png = None if sentence(figure) is not None else live.png(figure)
        shown = _image_html(figure, png)
        self._drawn[step.name] = (step.inputs, shown, png)
        return shown, png

    def snapshot_html(self) -> str:
        """The panel at the notebook's parameters as static HTML."""
        outcome = self.baseline
        images = [_image_html(step.draw()) for step in self.chart_steps(outcome)]
        return (
            '<div class="kvplan-snapshot"><p><i>What-if panel, shown at the notebook\'s parameters (open the '
            "notebook in JupyterLab with a live kernel to move its controls).</i></p>"
            f"<p><b>{html.escape(outcome.verdict())}</b></p>{_tables_html(outcome)}{''.join(images)}</div>"
        )

    def set_values(self, values: Mapping[str, object]) -> None:
        """Set several controls by name and redraw once."""
        self._holding = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._holding = False
        self.update()

    def _on_change(self, _change: dict) -> None:
        if not self._holding:
            self.update()

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        if bundle is not None:
            bundle["text/plain"] = "What-if panel: open the notebook in JupyterLab with a live kernel."
            bundle["text/html"] = self.snapshot_html()
        return bundle


def _image_html(figure, png: bytes | None = None) -> str:
    """A chart as an inline ``<img>`` with alt text, or its sentence as a paragraph."""
    words = sentence(figure)
    if words is not None:
        return f'<p class="kvplan-chart-sentence">{html.escape(words)}</p>'
    data = base64.b64encode(png or figure_png(figure)).decode()
    return (
        f'<img class="kvplan-chart" src="data:image/png;base64,{data}" '
        f'alt="{html.escape(figure_alt(figure))}" style="max-width:100%">'
    )


def _tables_html(outcome: Outcome) -> str:
    """The headline and the per-rank table as HTML."""
    headline = (
        pd.Series(outcome.headline(), name="value").to_frame().to_html(classes="kvplan-headline", border=0)
    )
    return headline + readable_table(outcome.table()).to_html(classes="kvplan-ranks", border=0)


#: The scenario field each control sets, and how its value reads.
_FIELDS = {
    "reserve_gib": ("reserve_bytes", gib_to_bytes),
    "guard_gib": ("guard_bytes", gib_to_bytes),
    "block_size": ("block_size", int),
    "max_model_len": ("max_model_len", int),
    "target_concurrency": ("target_concurrency", lambda value: int(value) or None),
}

#: Widget labels as wide as their text.
_STYLE = {"description_width": "initial"}


def _controls(
    scenario: Scenario, co_tenant_bytes: Sequence[int | None] | None, limits: Sequence[int | None]
) -> dict[str, widgets.Widget]:
    """The panel's controls by name: reserve, guard (drift), block size, length and target (a spec), add-backs."""
    reserve_gib = bytes_to_gib(scenario.reserve_bytes)
    controls = {
        "reserve_gib": _gib_slider(reserve_gib, max(4.0, 2 * reserve_gib), 0.05, "reserve per rank [GiB]")
    }
    if scenario.boot_free_bytes is not None:
        guard_gib = bytes_to_gib(scenario.guard_bytes)
        controls["guard_gib"] = _gib_slider(guard_gib, max(2.0, 2 * guard_gib), 0.05, "drift guard [GiB]")
    if scenario.bytes_per_token is not None or scenario.kv_spec is not None:
        block_size = scenario.effective_block_size
        controls["block_size"] = widgets.Dropdown(
            options=sorted({*BLOCK_SIZES, block_size}),
            value=block_size,
            description="block size asked [tokens]",
            style=_STYLE,
            tooltip="vLLM may raise it (hybrid and MLA models): the headline shows the block size in effect",
        )
        if scenario.max_model_len is not None:
            target = math.ceil(scenario.target_concurrency or 0)
            for name, value, low, high, step, description in (
                ("max_model_len", scenario.max_model_len, 1, 10_000_000, 1024, "max model length [tokens]"),
                ("target_concurrency", target, 0, 100_000, 1, "target concurrency [sequences] (0 = none)"),
            ):
                box = widgets.Layout(width="420px")  # the label and a seven-digit number
                bounds = {"min": low, "max": high, "step": step}
                controls[name] = widgets.BoundedIntText(
                    value, description=description, style=_STYLE, layout=box, **bounds
                )
    add_back = scenario.add_back_bytes or (0,) * len(scenario.room_bytes)
    co_tenants = list(co_tenant_bytes) if co_tenant_bytes is not None else [None] * len(add_back)
    for rank, extra, co_tenant, limit in zip(scenario.rank_ids, add_back, co_tenants, limits):
        known = co_tenant is not None and not pd.isna(co_tenant)
        note = f"other processes {format_size(int(co_tenant))}" if known else "other processes unknown"
        tooltip = _ADD_BACK_TIPS[(bool(known and limit), bool(known))]
        description = f"rank {rank}: add back [GiB] ({note})"
        slider = _gib_slider(bytes_to_gib(extra), bytes_to_gib(limit or 0), 0.1, description)
        slider.disabled, slider.tooltip = not limit, tooltip
        controls[f"add_back_{rank}"] = slider
    return controls


#: An add-back slider's tooltip by (something to add back, co-tenant memory known).
_ADD_BACK_TIPS = {
    (True, True): "up to what other processes hold on this GPU",
    (False, True): "no other processes on this GPU: nothing to add back",
    (False, False): "no nvidia-smi snapshot joined for this rank: its co-tenant memory is unknown, "
    "so nothing can be added back",
}


def _gib_slider(value_gib: float, top_gib: float, step_gib: float, description: str) -> widgets.FloatSlider:
    """A slider from 0 to ``top_gib`` [GiB], reporting only when released."""
    shown = {"min": 0.0, "readout_format": ".2f", "style": _STYLE, "continuous_update": False}
    layout = widgets.Layout(width="640px")
    return widgets.FloatSlider(
        value=value_gib, max=top_gib, step=step_gib, description=description, layout=layout, **shown
    )
