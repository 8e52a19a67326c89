"""A cheaper `__init__` for the frozen dataclasses a fleet builds many times a poll. Pure.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (its
own `__setattr__` raises), ~0.3 µs a field: an `EngineStats` (44 fields) cost ~15 µs, and a
hundred replicas a second each build a dozen such objects (stats, snapshot, findings, the
rules' context). `quick_init` gives the class an `__init__` that fills the instance's `__dict__`
in one update instead: the same parameters (order, defaults, default factories, keyword-only),
so the same object afterwards — equal, same repr and hash, still frozen (tests/unit/
test_quickinit.py). Classes with `__post_init__`, init-only or `init=False` fields, or slots
are refused rather than half-supported.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_NO_DEFAULT = object()


def quick_init(cls: type[T]) -> type[T]:
    """Replace the frozen dataclass `cls`'s `__init__` (see the module docstring)."""
    params = cls.__dict__.get("__dataclass_params__")
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__}: quick_init is for frozen dataclasses")
    if hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: __post_init__ or slots: keep the generated __init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if len(fields) != len(cls.__dataclass_fields__):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: init-only fields")
    names: dict[str, Any] = {"_NO_DEFAULT": _NO_DEFAULT}
    positional: list[str] = []
    keyword: list[str] = []
    factories: list[str] = []
    for f in fields:
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: init=False")
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
            param = f"{f.name}=_default_{f.name}"
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            factories.append(
                f"    if {f.name} is _NO_DEFAULT:\n        {f.name} = _factory_{f.name}()\n"
            )
            param = f"{f.name}=_NO_DEFAULT"
        else:
            param = f.name
        (keyword if f.kw_only else positional).append(param)
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    stores = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    source = (
        f"def __init__({signature}):\n"
        + "".join(factories)
        + f"    self.__dict__.update({{{stores}}})\n"
    )
    exec(source, names)  # the technique dataclasses itself uses to write __init__
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
