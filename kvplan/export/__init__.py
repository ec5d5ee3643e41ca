"""Export: an approved launch in the forms deployments read, from a verified bundle only.

:mod:`~kvplan.export.formats` (the registry :data:`EXPORTERS`: ``vllm-config``, ``args``,
``helm-production-stack``, ``kserve``, ``ray-serve``, ``prometheus-rules``; a new format is one more entry),
:mod:`~kvplan.export.bundle` (what a verified bundle gives: its :class:`Launch`, and vLLM 0.33's own per-rank
startup plan files).

>>> sorted(EXPORTERS)
['args', 'helm-production-stack', 'kserve', 'prometheus-rules', 'ray-serve', 'vllm-config']
"""

from kvplan.export.formats import DIGEST_ANNOTATION, EXPORTERS, Exporter, Launch

__all__ = ["DIGEST_ANNOTATION", "EXPORTERS", "Exporter", "Launch"]
