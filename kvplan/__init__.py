"""kvplan: safe, evidenced per-GPU KV-cache budgets for multi-GPU vLLM servers.

Here: where the bundled data lives (:data:`MODELS_DIR`, the model catalogue; :data:`DATA_DIR`, a checkout's
sample logs), ``kvplan.__version__`` (read when first asked for) and :func:`lazy_names`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The model catalogue: ``kvplan/models/<name>.json``, shipped inside the package.
MODELS_DIR = PACKAGE_DIR / "models"
PROJECT_DIR = PACKAGE_DIR.parent
#: The checkout's sample data (not installed by a wheel).
DATA_DIR = PROJECT_DIR / "data"


def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's version ("0.0.0+unknown" from a bare checkout)."""
    if name != "__version__":
        raise AttributeError(f"module 'kvplan' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvplan-kit")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "0.0.0+unknown"


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each name of ``modules`` is imported from
    ``package.<modules[name]>`` when first asked for."""

    def __getattr__(name: str) -> object:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{modules[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
