"""Lazy re-exports between sibling modules that import each other (internal helper).

``specsim.recommend`` re-exports the tuning study of ``specsim.tuning`` and ``specsim.validation``
the figures of ``specsim.validation_figures``; each of those imports the module re-exporting it,
so the names are resolved on first access (PEP 562 module ``__getattr__`` / ``__dir__``) instead of
imported at the top, and either module may be imported first.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable


def lazy_reexports(module_globals: dict, source: str, names: Iterable[str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for a module that re-exports ``names`` of module ``source``.

    Parameters
    ----------
    module_globals : dict
        The re-exporting module's ``globals()``; a resolved name is cached there.
    source : str
        Absolute module name holding the names (e.g. ``"specsim.tuning"``).
    names : iterable of str
        The re-exported names.

    Returns
    -------
    tuple of callables
        Assign them to the module's ``__getattr__`` and ``__dir__``.  Unknown names raise
        ``AttributeError`` as for any module.
    """
    names = frozenset(names)
    mod_name = module_globals["__name__"]

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(source), name)
            module_globals[name] = value
            return value
        raise AttributeError(f"module {mod_name!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*module_globals, *names})

    return __getattr__, __dir__
