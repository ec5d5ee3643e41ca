"""What a decision is asked under: the policy, the admission plan, the load policy, the model layout.

All sizes are bytes. These are the pipeline's inputs besides the evidence itself
(:func:`kvplan.plan.read_evidence`); :func:`kvplan.plan.decide` turns both into one
:class:`~kvplan.plan.Decision`.

>>> Policy(reserve_bytes=966_367_641).guard_bytes
0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Policy:
    """The approver's policy: reserve kept free per rank, canary guard (bytes), rank-0 assumption."""

    reserve_bytes: int
    guard_bytes: int = 0
    assume_uniform: bool = False


@dataclass(frozen=True)
class AdmissionPlan:
    """The admission plan: ``target_concurrency`` full sequences of ``seq_len`` tokens at once."""

    target_concurrency: int
    seq_len: int


@dataclass(frozen=True)
class LoadPolicy:
    """How load-test evidence is read and judged at approval.

    ``max_preemptions`` is the number of preemptions the run may show (default 0); ``year`` anchors
    vLLM's yearless ``MM-DD HH:MM:SS`` log stamps (None: times stay yearless unless /metrics give one);
    ``max_capacity_loss_pct`` bounds the KV tokens a run at a manual value may give up against the
    profiled boot [%] (None: the loss is reported without a bound).

    >>> LoadPolicy(max_preemptions=-1)
    Traceback (most recent call last):
    ...
    ValueError: max_preemptions must be a count ≥ 0, got -1
    >>> LoadPolicy(max_capacity_loss_pct=-2.0)
    Traceback (most recent call last):
    ...
    ValueError: max_capacity_loss_pct must be a percentage ≥ 0, got -2.0
    """

    max_preemptions: int = 0
    year: int | None = None
    max_capacity_loss_pct: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_preemptions, int) or self.max_preemptions < 0:
            raise ValueError(f"max_preemptions must be a count ≥ 0, got {self.max_preemptions!r}")
        if self.year is not None and (not isinstance(self.year, int) or self.year <= 0):
            raise ValueError(f"year must be a positive whole number, got {self.year!r}")
        bound = self.max_capacity_loss_pct
        if bound is not None and (
            not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound < 0
        ):
            raise ValueError(f"max_capacity_loss_pct must be a percentage ≥ 0, got {bound!r}")


@dataclass(frozen=True)
class ModelLayout:
    """How KV bytes per token were derived: the model config (an input file) and the layout options.

    ``options`` are the keyword arguments of :func:`kvplan.kvspec.kv_spec` other than the config
    (``tp``, ``pp``, ``dcp``, ``kv_cache_dtype``, ``block_size``, ``vllm_version``,
    ``max_num_batched_tokens``), recorded so that :func:`kvplan.evidence.verify_bundle` rebuilds the
    same spec. A ``vllm_version`` or ``block_size`` left None is taken from the logs' compatibility key.
    ``name`` is how the config is quoted where it names no model (a bundle's copy ``inputs/config.json``,
    so approval and verification read the same text wherever the bundle lies); None: its path.
    """

    config: Path | str
    options: Mapping[str, object] = field(default_factory=dict)
    name: str | None = None
