"""The layering of ARCHITECTURE.md holds: import-linter contracts, and a cheap `llmtop --help`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LLMTOP = sorted((ROOT / "llmtop").rglob("*.py"))


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_help_imports_no_heavy_package() -> None:
    code = (
        "import sys; from llmtop.cli import build_parser; build_parser();"
        "heavy = [m for m in ('textual', 'httpx', 'starlette', 'uvicorn', 'pynvml', 'plotext')"
        " if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def _import_graph(package: str = "llmtop") -> dict[str, set[str]]:
    """A package's modules -> the modules of it each imports, `if TYPE_CHECKING` and
    function-level imports included (grimp, which import-linter runs on)."""
    import grimp

    graph = grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: each strongly connected group of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(imports.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = [stack.pop()]
            while group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_cycles_are_found_types_only_ones_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from cyclic import a\n")
    (package / "c.py").write_text("import cyclic.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles(_import_graph("cyclic")) == [["cyclic.a", "cyclic.b"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [
        ["a", "b", "c"]
    ]


def test_no_import_cycle_in_llmtop() -> None:
    """core's homes stack one way (the layers contract); inside a home, and anywhere else in
    llmtop, no two modules import each other either, not even for types."""
    assert _cycles(_import_graph()) == []


def _private_uses(path: Path, module: str) -> list[str]:
    """Where `module` (at `path`) uses another llmtop module's _private name: `from m import
    _x`, `m._x` for a module `m` it imported, or a private module outside its own package."""
    import ast

    tree = ast.parse(path.read_text(), str(path))
    package = module.rpartition(".")[0]
    aliases: dict[str, str] = {}  # local name -> the llmtop module it is bound to
    out: list[str] = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("llmtop"):
            parts = node.module.split(".")
            for i, part in enumerate(parts):
                owner = ".".join(parts[:i])  # a package's _module is that package's own
                if private(part) and package != owner and not package.startswith(owner + "."):
                    out.append(f"{module}:{node.lineno} imports {node.module}")
            for alias in node.names:
                if private(alias.name) and node.module != module:
                    out.append(f"{module}:{node.lineno} {node.module}.{alias.name}")
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("llmtop") and alias.asname:
                    aliases[alias.asname] = alias.name
    modules = {p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".") for p in LLMTOP}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and private(node.attr)
            and isinstance(node.value, ast.Name)
            and aliases.get(node.value.id) in modules
            and aliases[node.value.id] != module
        ):
            out.append(f"{module}:{node.lineno} {aliases[node.value.id]}.{node.attr}")
    return out


def test_private_uses_are_found(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from llmtop.core.exposition import promtext\n"
        "from llmtop.core.vllm.names import _hidden\n"
        "from llmtop.commands._common import x\n"
        "print(promtext._gone, promtext.parse, _hidden, x)\n"
    )
    assert _private_uses(sample, "llmtop.sources.sample") == [
        "llmtop.sources.sample:2 llmtop.core.vllm.names._hidden",
        "llmtop.sources.sample:3 imports llmtop.commands._common",
        "llmtop.sources.sample:4 llmtop.core.exposition.promtext._gone",
    ]
    assert _private_uses(sample, "llmtop.commands.sample") == [
        "llmtop.commands.sample:2 llmtop.core.vllm.names._hidden",
        "llmtop.commands.sample:4 llmtop.core.exposition.promtext._gone",
    ]


def test_no_module_uses_another_modules_private_names() -> None:
    """What a module shares is public; a `_name` is that module's own (a package's `_module`,
    that package's own). Attributes of objects are left to review: only imports are read."""
    found = []
    for path in LLMTOP:
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        found += _private_uses(path, module.removesuffix(".__init__"))
    assert found == []
