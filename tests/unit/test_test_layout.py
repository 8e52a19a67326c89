"""The layout of the tests and the benchmarks, read from their import statements (ast, so an
import inside a function counts too):

- no test module imports another (a test module is test_*.py or conftest.py): what tests share
  lives in tests/support/, the one home of test helpers outside tests/fixtures/;
- bench/ and tests/ are independent: neither imports the other; what both run lives in
  harness/, which imports neither.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT

TESTS = ROOT / "tests"


def python_files(top: Path) -> list[Path]:
    return sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in `path`; `from x import y` yields both x
    and x.y, since y may be a module."""
    package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def is_test_module(name: str) -> bool:
    last = name.rpartition(".")[2]
    return name.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def top(name: str) -> str:
    return name.partition(".")[0]


def offences(files: list[Path], wrong: str) -> list[str]:
    """`file:line imports module` for each import of a top-level package named `wrong`, or (for
    bench) of a bench script by its bare name, as the scripts import each other."""
    bench_scripts = {p.stem for p in (ROOT / "bench").glob("*.py")}
    found = []
    for path in files:
        for line, name in imported(path):
            if top(name) == wrong or (wrong == "bench" and top(name) in bench_scripts):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(found))


def test_no_test_module_imports_another() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in python_files(TESTS)
        for line, name in imported(path)
        if is_test_module(name)
    ]
    assert found == [], "move what they share into tests/support/:\n" + "\n".join(found)


def test_test_helpers_live_in_tests_support() -> None:
    """Outside tests/fixtures/ (its generators), a module of tests/ that holds no tests is
    tests/support/'s."""
    stray = [
        str(p.relative_to(ROOT))
        for p in python_files(TESTS)
        if not is_test_module(module_of(p))
        and p.name != "__init__.py"
        and not p.is_relative_to(TESTS / "support")
        and not p.is_relative_to(TESTS / "fixtures")
    ]
    assert stray == [], "test helpers belong in tests/support/: " + ", ".join(stray)


@pytest.mark.parametrize(
    ("where", "wrong"),
    [("bench", "tests"), ("tests", "bench"), ("harness", "tests"), ("harness", "bench")],
)
def test_bench_and_tests_are_independent(where: str, wrong: str) -> None:
    files = python_files(ROOT / where)
    assert files, f"no Python files under {where}/"
    found = offences(files, wrong)
    assert found == [], f"{where}/ must not import {wrong}/ (harness/ holds what both need):\n" + (
        "\n".join(found)
    )


def test_the_reading_sees_imports() -> None:
    """The rules above would pass on a reader that sees nothing: it finds these."""
    names = {name for _, name in imported(TESTS / "unit" / "test_admission_share.py")}
    assert "tests.support.admission.FakeClock" in names
    bench = offences(python_files(ROOT / "bench"), "harness")
    assert any("imports harness" in line for line in bench), bench
