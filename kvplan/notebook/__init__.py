"""What notebooks call: reading a launch, headlines, the pure what-if, figures with alt text, the panel.

One concept per module: :mod:`~kvplan.notebook.launch` (a launch's logs and snapshots, its spec and
length), :mod:`~kvplan.notebook.headlines` (text a reviewer reads first), :mod:`~kvplan.notebook.scenario`
and :mod:`~kvplan.notebook.whatif` (the pure what-if), :mod:`~kvplan.notebook.figures` (charts of an
outcome, PNG and alt text), :mod:`~kvplan.notebook.panel` (the ipywidgets panel), and the report of
``make demo``: :mod:`~kvplan.notebook.pages` (a notebook's pages) and :mod:`~kvplan.notebook.report` (its index);
:mod:`~kvplan.notebook.tables` formats tables for readers. The names below are
re-exported so a notebook imports from one place.
"""

from kvplan.kvspec.capacity import sequence_lengths
from kvplan.notebook.figures import (
    Chart,
    chart,
    concurrency_figure,
    figure_alt,
    figure_png,
    panel_charts,
    sentence,
)
from kvplan.notebook.headlines import (
    boot_budget_bytes,
    budget_headline,
    drift_headline,
    format_headline,
    launch_headline,
    length_warning,
    moved_hosts_text,
    rounding_text,
    run_headline,
    spec_headline,
    warnings_markdown,
    weak_rank_verdict,
)
from kvplan.notebook.launch import (
    LOAD_PATTERNS,
    LOG_PATTERNS,
    NVIDIA_SMI_NAMES,
    ParameterError,
    budgets_by_boot,
    co_tenant_bytes,
    coverage,
    launch_max_model_len,
    launch_snapshots,
    launch_spec,
    parameter_files,
    parameter_model,
    parameter_path,
    read_launch,
    rows_that_set_the_room,
    run_folder,
    snapshots_in,
)
from kvplan.notebook.panel import WhatIfPanel
from kvplan.notebook.scenario import BLOCK_SIZES, Outcome, Scenario
from kvplan.notebook.tables import readable_table
from kvplan.notebook.whatif import (
    add_back_bytes,
    add_back_limits,
    evaluate,
    gib_to_bytes,
    ledger_after_add_back,
    longest_length_at,
    spec_concurrency_curve,
    weak_rank_at_median,
)

__all__ = [
    "BLOCK_SIZES",
    "LOAD_PATTERNS",
    "LOG_PATTERNS",
    "NVIDIA_SMI_NAMES",
    "Chart",
    "Outcome",
    "ParameterError",
    "Scenario",
    "WhatIfPanel",
    "add_back_bytes",
    "add_back_limits",
    "boot_budget_bytes",
    "budget_headline",
    "budgets_by_boot",
    "chart",
    "co_tenant_bytes",
    "concurrency_figure",
    "coverage",
    "drift_headline",
    "evaluate",
    "figure_alt",
    "figure_png",
    "format_headline",
    "gib_to_bytes",
    "launch_headline",
    "launch_max_model_len",
    "launch_snapshots",
    "launch_spec",
    "ledger_after_add_back",
    "length_warning",
    "longest_length_at",
    "moved_hosts_text",
    "panel_charts",
    "parameter_files",
    "parameter_model",
    "parameter_path",
    "read_launch",
    "readable_table",
    "rounding_text",
    "rows_that_set_the_room",
    "run_folder",
    "run_headline",
    "sentence",
    "sequence_lengths",
    "snapshots_in",
    "spec_concurrency_curve",
    "spec_headline",
    "warnings_markdown",
    "weak_rank_at_median",
    "weak_rank_verdict",
]
