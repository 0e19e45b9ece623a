"""Lazy package faces: a package's public names, each imported from the module that defines it on first access.

Why: importing one module of a package runs the package's ``__init__`` first; an ``__init__`` that imported its
modules eagerly would load torch for a caller that needs none of them (``plan`` reads config.json alone, the CLI's
``--help`` loads nothing heavy).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_face"]


def lazy_face(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's module-level ``__getattr__`` and ``__dir__`` for ``names`` (public name -> the module, relative
    to ``package``, that defines it).

    Example:
        >>> getattr_, dir_ = lazy_face("mathneuro_edit", {"InputError": "errors"})
        >>> getattr_("InputError").__name__, dir_()
        ('InputError', ['InputError'])
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)  # the next access is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
