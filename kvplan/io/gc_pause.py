"""The cyclic garbage collector paused while a reader builds many small objects that live on.

A reader allocates millions of tuples, dicts and strings that it keeps (rows, provenance). Each of
CPython's full collections walks every one of them, and a 300 MB log triggers ten: 9 % of its read
(``benchmarks/dense_startup.py``). Readers make no reference cycles worth collecting mid-read, so
they pause the collector and restore it as they found it, also when they raise.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; on leaving, it is on again if it was on before.

    Nests: an inner pause leaves the collector off for the outer one.

    >>> with gc_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
