"""The layering of ARCHITECTURE.md holds: import-linter contracts, and a cheap `llmtop --help`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
