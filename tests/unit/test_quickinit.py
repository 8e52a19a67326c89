"""`quick_init` gives a frozen dataclass the same objects as its generated __init__."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field

import pytest

from llmtop.core.base.quickinit import quick_init
from llmtop.core.base.snapshot import EngineStats


@dataclass(frozen=True)
class _Plain:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: dict[str, int] = field(default_factory=dict, compare=False)
    e: float = field(default=1.5, kw_only=True)
    f: int = field(kw_only=True, default=0)


@quick_init
@dataclass(frozen=True)
class _Quick:
    a: int
    b: str = "b"
    c: list[int] = field(default_factory=list)
    d: dict[str, int] = field(default_factory=dict, compare=False)
    e: float = field(default=1.5, kw_only=True)
    f: int = field(kw_only=True, default=0)


def _same(plain: object, quick: object) -> None:
    assert vars(plain) == vars(quick)
    assert list(vars(plain)) == list(vars(quick))  # the fields in the same order
    assert repr(plain).removeprefix("_Plain") == repr(quick).removeprefix("_Quick")


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {}),
        ((1, "x"), {}),
        ((1, "x", [2]), {"d": {"k": 1}}),
        ((), {"a": 3, "f": 4, "e": -0.0}),
        ((1,), {"c": [5], "b": "y", "e": float("inf")}),
    ],
)
def test_the_same_object_as_the_generated_init(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    _same(_Plain(*args, **kwargs), _Quick(*args, **kwargs))  # type: ignore[arg-type]


def test_defaults_factories_signature_and_frozen() -> None:
    one, two = _Quick(1), _Quick(1)
    assert one.c is not two.c  # a fresh list and dict for each
    assert one.d is not two.d
    assert one == two
    kinds = [(p.name, p.kind) for p in inspect.signature(_Plain).parameters.values()]
    assert [(p.name, p.kind) for p in inspect.signature(_Quick).parameters.values()] == kinds
    with pytest.raises(TypeError):
        _Quick(1, "b", [], {}, 2.0)  # type: ignore[misc]  # e and f are keyword-only
    with pytest.raises(TypeError):
        _Quick()  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = 2  # type: ignore[misc]
    changed = dataclasses.replace(one, b="z")
    assert (changed.a, changed.b) == (1, "z")
    assert pickle.loads(pickle.dumps(one)) == one
    assert copy.deepcopy(one) == one


def test_engine_stats_as_built_everywhere() -> None:
    stats = EngineStats(url="u", up=True, running=3.0, finished_per_s={"stop": 1.0})
    assert stats == EngineStats("u", True, running=3.0, finished_per_s={"stop": 1.0})
    assert stats.admission_rejections_by_reason_per_s == {}
    assert (stats.error, stats.stats_disabled) == (None, False)


def test_hash_as_generated() -> None:
    @dataclass(frozen=True)
    class Plain:
        a: int
        b: str = "b"

    @quick_init
    @dataclass(frozen=True)
    class Quick:
        a: int
        b: str = "b"

    assert hash(Plain(1)) == hash(Quick(1))
    assert hash(Plain(1, "x")) == hash(Quick(b="x", a=1))


def test_refuses_what_it_would_get_wrong() -> None:
    @dataclass
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class Posted:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True)
    class Hidden:
        a: int
        b: int = field(default=0, init=False)

    for cls in (Mutable, Posted, Hidden):
        with pytest.raises(TypeError):
            quick_init(cls)
