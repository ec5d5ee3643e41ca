"""kvplan: safe, evidenced per-GPU KV-cache budgets for multi-GPU vLLM servers.

The core is pure functions over ``int`` bytes: :mod:`kvplan.budget` (uniform budget over ranks),
:mod:`kvplan.capacity` (bytes → tokens → concurrency), :mod:`kvplan.drift` (reuse on a later boot);
:mod:`kvplan.units` turns text into bytes and back. ``kvplan.__version__`` is read from the installed
package metadata when first asked for (``importlib.metadata`` is slow to import).
"""


def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's version ("0.0.0+unknown" from a bare checkout)."""
    if name != "__version__":
        raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvplan-kit")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0.0.0+unknown"
