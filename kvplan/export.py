"""Export: an approved launch in the forms deployments read, from a verified bundle only (:func:`verified_launch`),
and vLLM 0.33's startup plan file per rank (``v1/worker/startup_plan.py``; :func:`startup_plans`)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas and the readers only once a bundle is read: ``kvplan --help`` starts light
    from kvplan.checks.gate import Approved
    from kvplan.evidence import Verified
    from kvplan.io.vllm.manual import StartupPlanLine

#: The annotation (and comment key) that names the bundle an output came from.
DIGEST_ANNOTATION = "kvplan.io/bundle-digest"
#: vLLM's flag of each key field a launch sets, in output order (0.33 ``engine/arg_utils.py``; dotted: a JSON field).
LAYOUT_FLAGS = {
    "model": "model",
    "revision": "revision",
    "dtype": "dtype",
    "quantization": "quantization",
    "tensor_parallel_size": "tensor-parallel-size",
    "pipeline_parallel_size": "pipeline-parallel-size",
    "data_parallel_size": "data-parallel-size",
    "decode_context_parallel_size": "decode-context-parallel-size",
    "max_model_len": "max-model-len",
    "kv_cache_dtype": "kv-cache-dtype",
    "block_size": "block-size",
    "enforce_eager": "enforce-eager",
    "cudagraph_mode": "compilation-config.cudagraph_mode",
}
#: Key fields no flag sets: where the launch runs (the gate compares them), and U (the decision's companion).
NOT_LAUNCH_FLAGS = frozenset(("vllm_version", "gpu_name", "driver_version", "gpu_memory_utilization"))
#: vLLM's default in every release, written by leaving the flag out (older releases have no such flag or --no-*).
_LEFT_OUT = {"enforce_eager": False, "data_parallel_size": 1, "decode_context_parallel_size": 1}
#: What vLLM 0.33's ``--dtype`` and ``cudagraph_mode`` take (``config/model.py``, ``config/compilation.py``).
_CHOICES = {
    "dtype": ("auto", "half", "float16", "bfloat16", "float", "float32"),
    "cudagraph_mode": ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"),
}


@dataclass(frozen=True)
class Launch:
    """An approved launch: the bundle digest (hex SHA-256 of ``budget.json``), the value [bytes], the companion U
    (None: unknown), the ``layout`` flags (:func:`launch_layout`), the reserve and allowed preemptions."""

    digest: str
    kv_cache_memory_bytes: int
    gpu_memory_utilization: float | None
    layout: Mapping[str, object] = field(default_factory=dict)
    reserve_bytes: int = 0
    max_preemptions: int = 0

    @property
    def options(self) -> dict[str, object]:
        """Every flag name (without ``--``) to its value: the layout, the value, the utilization."""
        options = {**self.layout, "kv-cache-memory-bytes": self.kv_cache_memory_bytes}
        if self.gpu_memory_utilization is not None:
            options["gpu-memory-utilization"] = self.gpu_memory_utilization
        return options

    @property
    def args(self) -> list[str]:
        """The options as ``vllm serve`` takes them: ``--flag=value`` (U to two decimals), a switch on as the flag
        alone."""
        return [
            f"--{name}"
            if value is True
            else f"--{name}={value:.2f}"
            if isinstance(value, float)
            else f"--{name}={value}"
            for name, value in self.options.items()
        ]

    @property
    def digest_text(self) -> str:
        """``sha256:<hex>``, as every output names the bundle."""
        return f"sha256:{self.digest}"


def _comment(launch: Launch) -> str:
    return f"# {DIGEST_ANNOTATION}: {launch.digest_text}\n"


def _yaml(value: object) -> str:
    import yaml  # PyYAML: only the YAML formats need it

    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=False)


def vllm_config(launch: Launch) -> str:
    """YAML for ``vllm serve --config FILE``: flat ``flag-name: value`` keys (0.33 ``load_config_file``)."""
    options = {name: float(f"{v:.2f}") if isinstance(v, float) else v for name, v in launch.options.items()}
    return _comment(launch) + _yaml(options)


def args(launch: Launch) -> str:
    """One ``--flag=value`` a line, after a comment line naming the bundle."""
    return _comment(launch) + "".join(f"{arg}\n" for arg in launch.args)


def helm_production_stack(launch: Launch) -> str:
    """A values fragment for vLLM production-stack's Helm chart (``servingEngineSpec.modelSpec[0]``)."""
    model = str(launch.layout.get("model", "model"))
    spec = {
        "name": _helm_name(model),
        "modelURL": model,
        "vllmConfig": {"extraArgs": [arg for arg in launch.args if not arg.startswith("--model=")]},
        "podAnnotations": {DIGEST_ANNOTATION: launch.digest_text},
    }
    return _comment(launch) + _yaml({"servingEngineSpec": {"modelSpec": [spec]}})


def kserve(launch: Launch) -> str:
    """A KServe ``InferenceService`` patch: ``spec.predictor.model.args`` and the digest annotation."""
    patch = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"annotations": {DIGEST_ANNOTATION: launch.digest_text}},
        "spec": {"predictor": {"model": {"args": launch.args}}},
    }
    return _comment(launch) + _yaml(patch)


def ray_serve(launch: Launch) -> str:
    """Ray Serve LLM: ``engine_kwargs`` (vLLM's engine argument names, underscores) as JSON, beside the digest."""
    kwargs = {name.replace("-", "_"): value for name, value in launch.options.items() if name != "model"}
    if "compilation_config.cudagraph_mode" in kwargs:  # a field of EngineArgs' compilation_config dict
        kwargs["compilation_config"] = {"cudagraph_mode": kwargs.pop("compilation_config.cudagraph_mode")}
    document = {
        DIGEST_ANNOTATION: launch.digest_text,
        "model_loading_config": {"model_id": launch.layout.get("model")},
        "engine_kwargs": kwargs,
    }
    return json.dumps(document, indent=2) + "\n"


def prometheus_rules(launch: Launch) -> str:
    """Prometheus alert rules of the launch (:func:`kvplan.io.prometheus.alert_rules`)."""
    from kvplan.io.prometheus import alert_rules

    return alert_rules(
        launch.digest, launch.kv_cache_memory_bytes, launch.reserve_bytes, launch.max_preemptions
    )


def _helm_name(model: str) -> str:
    """A Kubernetes-safe name from a model name: lower case, ``[a-z0-9-]``, at most 63 characters."""
    tail = model.rsplit("/", 1)[-1].lower()
    name = "".join(c if c.isalnum() and c.isascii() else "-" for c in tail).strip("-")
    return ("-".join(part for part in name.split("-") if part) or "model")[:63]


#: Every deployment format ``kvplan export`` writes, by name.
EXPORTERS: dict[str, Callable[[Launch], str]] = {
    "vllm-config": vllm_config,
    "args": args,
    "helm-production-stack": helm_production_stack,
    "kserve": kserve,
    "ray-serve": ray_serve,
    "prometheus-rules": prometheus_rules,
}


#: A worker name's ``_EP<rank>`` part means ``--enable-expert-parallel`` (0.33 ``v1/executor/multiproc_executor.py``).
_EXPERT_WORKER = re.compile(r"_EP\d+$")
#: What a value may hold to be written into a flag, a YAML scalar or an argument list unchanged.
_PLAIN = re.compile(r"[A-Za-z0-9_./:@+=-]{1,512}")


def verified_launch(bundle: str | os.PathLike, digest: str | None = None) -> tuple[Verified, Launch]:
    """The verified bundle and its :class:`Launch` (a changed bundle raises); ``digest`` pins the bundle."""
    from kvplan.evidence import verified_approval

    verified, approved = verified_approval(bundle, digest)
    decision = verified.decision
    layout = launch_layout(
        approved.compatibility_key, decision.defaulted_key_fields if decision else frozenset()
    )
    workers = decision.ledger.get("process", ()) if decision and decision.ledger is not None else ()
    if any(_EXPERT_WORKER.search(str(name)) for name in workers):
        layout["enable-expert-parallel"] = True
    load = decision.load if decision else None  # the load policy as the verified decision recomputed it
    utilization = decision.gpu_memory_utilization if decision else None
    preemptions = load["max_preemptions"] if load else 0  # no load evidence: none allowed
    launch = Launch(
        verified.digest, approved.budget_bytes, utilization, layout, approved.reserve_bytes, preemptions
    )
    return verified, launch


def launch_layout(key: Mapping[str, object], defaulted: frozenset[str] = frozenset()) -> dict[str, object]:
    """vLLM's flag names (no ``--``) to the key fields a launch sets; ValueError naming one no flag takes."""
    layout = {}
    for name in [*LAYOUT_FLAGS, *sorted(set(key) - set(LAYOUT_FLAGS) - NOT_LAUNCH_FLAGS)]:
        value = key.get(name)
        left_out = name in _LEFT_OUT and type(value) is type(_LEFT_OUT[name]) and value == _LEFT_OUT[name]
        if value is None or value == "None" or name in defaulted or left_out:
            continue
        layout[LAYOUT_FLAGS.get(name, name)] = _plain(name, value)
    return layout


def _plain(field: str, value: object) -> object:
    """``value`` as the flag takes it; refused where it would change the launch or an argument list."""
    if field == "dtype" and isinstance(value, str):
        value = value.removeprefix("torch.")  # the logs print torch.bfloat16; --dtype takes bfloat16
    reason = ""
    if field not in LAYOUT_FLAGS:
        reason = "kvplan knows no vLLM flag for it"
    elif isinstance(value, bool) != (field == "enforce_eager") or not isinstance(value, (int, str)):
        reason = "not a value a launch flag takes"
    elif field in _CHOICES and value not in _CHOICES[field]:
        reason = f"vLLM's flag takes one of {', '.join(_CHOICES[field])}"
    elif isinstance(value, str) and not _PLAIN.fullmatch(value):
        reason = (
            "it holds characters that would change the exported argument list or file (spaces, quotes, …)"
        )
    if reason:
        raise ValueError(
            f"the bundle's compatibility key {field} is {value!r}: {reason}; export refuses rather than write a "
            "launch other than the approved one"
        )
    return value


#: The ``schema`` of vLLM 0.33's plan files (``startup_plan.py`` ``PLAN_SCHEMA_VERSION``).
PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class StartupPlan:
    """One rank's plan file [bytes]: its fingerprint (read at ``where``, file:line) and values."""

    rank: int
    fingerprint: str
    kv_cache_memory_bytes: int
    free_memory_baseline: int
    where: str
    digest: str

    @property
    def file_name(self) -> str:
        """``startup_plan_<fingerprint>.json``, the name vLLM looks for under ``{VLLM_CACHE_ROOT}/startup_plan``."""
        return f"startup_plan_{self.fingerprint}.json"

    @property
    def text(self) -> str:
        """The file as vLLM writes one (``json.dump``), plus the bundle's digest (a key vLLM does not read)."""
        return json.dumps(
            {
                "schema": PLAN_SCHEMA_VERSION,
                "fingerprint": self.fingerprint,
                "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
                "free_memory_baseline": self.free_memory_baseline,
                DIGEST_ANNOTATION: f"sha256:{self.digest}",
            }
        )


def plan_values(
    budget_bytes: int, guard_bytes: int, drift_bytes: int, block_bytes: int | None, ref_free_bytes: int
) -> tuple[int, int]:
    """``(B − G − D rounded down to whole blocks, F_ref − D)`` [bytes]; refused when either is not positive."""
    value = budget_bytes - guard_bytes - drift_bytes
    if block_bytes:
        value = value // block_bytes * block_bytes
    baseline = ref_free_bytes - drift_bytes
    if value <= 0 or baseline <= 0:
        raise ValueError(
            f"--tolerate-drift {drift_bytes:,} B leaves no plan: value {value:,} B, baseline {baseline:,} B "
            "(both must be positive); tolerate less drift"
        )
    return value, baseline


def startup_plans(
    bundle: str | os.PathLike, drift_bytes: int = 0, digest: str | None = None
) -> list[StartupPlan]:
    """The plan of every approved rank of a verified bundle (ValueError naming a rank without one)."""
    from kvplan.evidence import verified_approval

    return plans_of(*verified_approval(bundle, digest), drift_bytes)


def plans_of(verified: Verified, approved: Approved, drift_bytes: int = 0) -> list[StartupPlan]:
    """:func:`startup_plans` of a bundle already verified (``kvplan gate`` has it)."""
    from kvplan.io.vllm.manual import SAVED, read_startup_plan_lines

    decision = verified.decision
    if decision is None or decision.rooms is None or decision.ledger is None:
        raise ValueError(
            f"{verified.folder}: no approved boot logs to read the startup plan's fingerprints from"
        )
    saved = {  # the "Saved startup plan" lines of each approved log (read from the bundle)
        str(source): [
            line for line in read_startup_plan_lines(verified.folder / str(source)) if line.kind == SAVED
        ]
        for source in decision.ledger["source"].dropna().unique()
    }
    plans = []
    for rank, ref_free in zip(approved.ranks, approved.ref_free_bytes):
        source, boot = decision.rooms.loc[rank, "source"], decision.rooms.loc[rank, "boot"]
        line = _rank_line(decision, saved, rank, str(source), int(boot))
        if ref_free is None:
            raise ValueError(f"rank {rank}: the approved boot shows no free memory at start-up: no baseline")
        value, baseline = plan_values(
            approved.budget_bytes, approved.guard_bytes, drift_bytes, approved.block_bytes, int(ref_free)
        )
        where = f"{source}:{line.line}"
        plans.append(StartupPlan(rank, str(line.fingerprint), value, baseline, where, verified.digest))
    return plans


def _rank_line(decision, saved: dict, rank: int, source: str, boot: int) -> StartupPlanLine:
    """Rank ``rank``'s own "Saved startup plan" line in its approved boot."""
    ledger = decision.ledger
    rows = ledger[(ledger["source"] == source) & (ledger["boot"] == boot) & (ledger["rank"] == rank)]
    pids = {int(pid) for pid in rows["pid"].dropna()} if "pid" in rows else set()
    bounds = [
        (entry["first_line"], entry["last_line"])
        for entry in (decision.metadata.boots if decision.metadata is not None else ())
        if entry["source"] == source and entry["boot"] == boot
    ]
    first, last = bounds[0] if bounds else (1, float("inf"))
    lines = [line for line in saved.get(source, []) if line.pid in pids and first <= line.line <= last]
    fingerprints = {line.fingerprint for line in lines}
    if not lines:
        raise ValueError(
            f"rank {rank}: no 'Saved startup plan to …/startup_plan_<fingerprint>.json' line of its process in "
            f"{source} (boot {boot}): profile the approved boot with VLLM_ENABLE_STARTUP_PLAN=1 (vLLM ≥ 0.33), "
            "whose every rank logs the fingerprint; kvplan cannot compute it"
        )
    if len(fingerprints) > 1:
        raise ValueError(
            f"rank {rank}: its process logged {len(fingerprints)} startup plan fingerprints in {source} "
            f"(lines {', '.join(str(line.line) for line in lines)}): which plan vLLM reads is not known"
        )
    return lines[-1]
