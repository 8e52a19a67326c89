"""tui/ opens no connection and starts no thread of its own: its data comes through the
source and the AdminClient built from sources/ (tui/launch.py wires them), so no module here
imports an IO or threading package, or hands work to a thread."""

from __future__ import annotations

import ast
from pathlib import Path

import llmtop.tui

IO = {
    "threading", "concurrent", "multiprocessing", "subprocess", "socket", "selectors", "ssl",
    "httpx", "httpcore", "aiohttp", "httptools", "urllib", "http", "requests", "redis",
}  # fmt: skip
"""Top-level packages whose import in tui/ would mean IO or a thread started there."""
TO_A_THREAD = {"to_thread", "run_in_executor", "call_soon_threadsafe", "Thread", "Timer"}


def io_imports(tree: ast.Module) -> list[str]:
    """The IO or threading packages `tree` imports (absolute imports only)."""
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [
        n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
    ]
    return [n for n in names if n.split(".")[0] in IO]


def thread_handoffs(tree: ast.Module) -> list[str]:
    """The names in `tree` that hand work to a thread (`asyncio.to_thread`, `Thread`, ...)."""
    return [
        node.attr if isinstance(node, ast.Attribute) else node.id
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in TO_A_THREAD)
        or (isinstance(node, ast.Name) and node.id in TO_A_THREAD)
    ]


def modules() -> dict[str, ast.Module]:
    root = Path(llmtop.tui.__file__).parent
    return {
        str(p.relative_to(root)): ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(root.rglob("*.py"))
    }


def test_no_module_of_the_tui_imports_an_io_or_thread_package() -> None:
    found = {name: io_imports(tree) for name, tree in modules().items()}
    assert {name: io for name, io in found.items() if io} == {}
    assert "keys.py" in found  # the scan read the package


def test_no_module_of_the_tui_hands_work_to_a_thread() -> None:
    found = {name: thread_handoffs(tree) for name, tree in modules().items()}
    assert {name: t for name, t in found.items() if t} == {}


def test_the_scans_find_what_they_look_for() -> None:
    tree = ast.parse(
        "import threading\nfrom httpx import get\nfrom .x import y\n"
        "asyncio.to_thread(get)\nthreading.Timer(1, y)\n"
    )
    assert io_imports(tree) == ["threading", "httpx"]
    assert sorted(thread_handoffs(tree)) == ["Timer", "to_thread"]
