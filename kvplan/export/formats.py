"""Deployment formats of an approved launch: one :class:`Exporter` per format in :data:`EXPORTERS`.

Each exporter turns a :class:`Launch` (the approved value, its companion utilization and the layout keys the
compatibility key fixes, read from a verified bundle by :func:`kvplan.export.bundle.verified_launch`) into the
text a deployment reads, carrying the bundle's digest (a YAML or flag-file comment, an annotation
``kvplan.io/bundle-digest``, or a JSON key). A new format is one more entry in :data:`EXPORTERS`.

>>> launch = Launch("ab" * 32, 12_884_377_600, 0.61, {"model": "m", "tensor-parallel-size": 4})
>>> print(EXPORTERS["args"].render(launch), end="")
# kvplan.io/bundle-digest: sha256:abababababababababababababababababababababababababababababababab
--model=m
--tensor-parallel-size=4
--kv-cache-memory-bytes=12884377600
--gpu-memory-utilization=0.61
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

#: The annotation (and comment key) that names the bundle an output came from.
DIGEST_ANNOTATION = "kvplan.io/bundle-digest"
#: vLLM's flag of each compatibility-key field a launch fixes, in the order outputs list them.
LAYOUT_FLAGS = {
    "model": "model",
    "tensor_parallel_size": "tensor-parallel-size",
    "pipeline_parallel_size": "pipeline-parallel-size",
    "max_model_len": "max-model-len",
    "kv_cache_dtype": "kv-cache-dtype",
    "block_size": "block-size",
}


@dataclass(frozen=True)
class Launch:
    """An approved launch as deployments take it: the bundle digest (hex SHA-256 of ``budget.json``), the
    value [bytes], the companion ``gpu_memory_utilization`` (None: unknown) and ``layout``, vLLM's flag names
    (without ``--``) to values, for the key fields the approved logs show."""

    digest: str
    kv_cache_memory_bytes: int
    gpu_memory_utilization: float | None
    layout: Mapping[str, object] = field(default_factory=dict)
    #: the approval's reserve [bytes] and its load policy's allowed preemptions (the alert rules' bounds)
    reserve_bytes: int = 0
    max_preemptions: int = 0

    @property
    def options(self) -> dict[str, object]:
        """Every flag name (vLLM's, without ``--``) to its value: the layout, then the value and utilization."""
        options = {**self.layout, "kv-cache-memory-bytes": self.kv_cache_memory_bytes}
        if self.gpu_memory_utilization is not None:
            options["gpu-memory-utilization"] = self.gpu_memory_utilization
        return options

    @property
    def args(self) -> list[str]:
        """The options as ``--flag=value`` arguments (what ``vllm serve`` takes, one a list item)."""
        return [f"--{name}={_text(value)}" for name, value in self.options.items()]

    @property
    def digest_text(self) -> str:
        """``sha256:<hex>``, as every output names the bundle."""
        return f"sha256:{self.digest}"


@dataclass(frozen=True)
class Exporter:
    """One deployment format: its name (``kvplan export NAME``), what it is for, and its text."""

    name: str
    summary: str
    render: Callable[[Launch], str]


def _text(value: object) -> str:
    """A value as vLLM's ``--config`` loader passes it on (``str(value)``), two decimals for U."""
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def _comment(launch: Launch) -> str:
    return f"# {DIGEST_ANNOTATION}: {launch.digest_text}\n"


def _yaml(value: object) -> str:
    import yaml  # PyYAML: only the YAML formats need it

    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=False)


def vllm_config(launch: Launch) -> str:
    """YAML for ``vllm serve --config FILE``: flat ``flag-name: value`` keys (vLLM 0.33
    ``FlexibleArgumentParser.load_config_file`` turns each into ``--flag value``)."""
    options = {name: float(f"{v:.2f}") if isinstance(v, float) else v for name, v in launch.options.items()}
    return _comment(launch) + _yaml(options)


def args(launch: Launch) -> str:
    """One ``--flag=value`` a line, after a comment line naming the bundle."""
    return _comment(launch) + "".join(f"{arg}\n" for arg in launch.args)


def helm_production_stack(launch: Launch) -> str:
    """A values fragment for vLLM production-stack's Helm chart: the model and the flags as
    ``servingEngineSpec.modelSpec[0].vllmConfig.extraArgs`` (merge it into your values file)."""
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
    document = {
        DIGEST_ANNOTATION: launch.digest_text,
        "model_loading_config": {"model_id": launch.layout.get("model")},
        "engine_kwargs": kwargs,
    }
    return json.dumps(document, indent=2) + "\n"


def prometheus_rules(launch: Launch) -> str:
    """Prometheus alert rules of the launch (:func:`kvplan.io.prometheus.rules.alert_rules`): the running
    value differs from the approved one, a GPU's free memory below the reserve after warm-up, preemptions
    beyond the load policy, KV usage high; each rule annotated with the bundle digest."""
    from kvplan.io.prometheus.rules import alert_rules

    return alert_rules(
        launch.digest, launch.kv_cache_memory_bytes, launch.reserve_bytes, launch.max_preemptions
    )


def _helm_name(model: str) -> str:
    """A Kubernetes-safe name from a model name: lower case, ``[a-z0-9-]``, at most 63 characters.

    >>> _helm_name("meta-llama/Llama-3.1-70B-Instruct")
    'llama-3-1-70b-instruct'
    """
    tail = model.rsplit("/", 1)[-1].lower()
    name = "".join(c if c.isalnum() and c.isascii() else "-" for c in tail).strip("-")
    return ("-".join(part for part in name.split("-") if part) or "model")[:63]


#: Every deployment format ``kvplan export`` writes, by name.
EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        Exporter("vllm-config", "YAML for vllm serve --config", vllm_config),
        Exporter("args", "one vLLM flag a line", args),
        Exporter(
            "helm-production-stack", "vLLM production-stack Helm values fragment", helm_production_stack
        ),
        Exporter("kserve", "KServe InferenceService args patch", kserve),
        Exporter("ray-serve", "Ray Serve LLM engine_kwargs JSON", ray_serve),
        Exporter("prometheus-rules", "Prometheus alert rules (promtool check rules)", prometheus_rules),
    )
}
