"""kvplan: safe, evidenced per-GPU KV-cache budgets for multi-GPU vLLM servers.

The core is pure functions over ``int`` bytes: :mod:`kvplan.budget` (uniform budget over ranks),
:mod:`kvplan.capacity` (bytes → tokens → concurrency), :mod:`kvplan.drift` (reuse on a later boot);
:mod:`kvplan.units` turns text into bytes and back.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kvplan-kit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"
