"""Names a package imports on first use (PEP 562), so that importing it costs only what is used.

``kvplan.io`` and ``kvplan.plan`` import the modules that need pandas only when one of their names
is first asked for: ``kvplan load``'s stats readers and ``kvplan budget --room`` start without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: each name of ``modules`` is imported from
    ``package.<modules[name]>`` when first asked for, then kept in the package.

    >>> names = lazy_names("kvplan.io", {"read_ledger_csv": "ledger_csv"})
    >>> names("read_ledger_csv").__module__
    'kvplan.io.ledger_csv'
    >>> names("read_everything")
    Traceback (most recent call last):
    AttributeError: module 'kvplan.io' has no attribute 'read_everything'
    """

    def __getattr__(name: str) -> object:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{modules[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
