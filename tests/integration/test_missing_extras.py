"""Without the extras most users do not need ([report]: matplotlib, [redis]: redis) the rest of
llmtop works, and the feature that needs one says in one line what to install, with a non-zero
exit and no traceback. The real CLI in a fresh interpreter, the package made unimportable
there (`sys.modules[name] = None`, as when it is not installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RECORDING = Path(__file__).parent.parent / "fixtures" / "incidents" / "healthy-idle.jsonl.gz"
WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "del sys.argv[1]\n"
)
"""The prelude that makes the packages named in argv[1] unimportable."""
CLI = WITHOUT + "from llmtop.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def llmtop_without(packages: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CLI, packages, *args], capture_output=True, text=True, timeout=120
    )


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_the_report_charts_without_matplotlib_say_what_to_install(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = llmtop_without("matplotlib", "report", str(RECORDING), "--out", str(out))
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("llmtop: the report's charts need matplotlib: ")
    assert "pip install 'llmtop-console[report]'" in line
    assert not out.exists()  # nothing half-written


def test_the_report_itself_needs_no_matplotlib() -> None:
    done = llmtop_without("matplotlib", "report", str(RECORDING))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# ")  # the markdown report, on stdout
    assert "Traceback" not in done.stderr


def test_shared_limits_without_redis_say_what_to_install() -> None:
    done = llmtop_without(
        "redis", "gateway", "--vllm", "http://127.0.0.1:9", "--listen", "127.0.0.1:0",
        "--redis", "redis://127.0.0.1:9/0",
    )  # fmt: skip
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("llmtop: shared limits (--redis) need redis: ")
    assert "pip install 'llmtop-console[redis]'" in line


def test_everything_else_imports_and_a_gateway_builds_without_either() -> None:
    """Every module of llmtop imports with neither package, and a gateway without --redis is
    built as usual: neither is imported before the feature that needs it runs."""
    code = WITHOUT + (
        "import importlib, pkgutil\n"
        "import llmtop\n"
        "names = [m.name for m in pkgutil.walk_packages(llmtop.__path__, 'llmtop.')]\n"
        "for name in names:\n"
        "    if not name.endswith('__main__'):\n"
        "        importlib.import_module(name)\n"
        "from llmtop.gateway.server.app import create_app\n"
        "from llmtop.settings import GatewaySettings\n"
        "app = create_app(GatewaySettings(upstream='http://127.0.0.1:9'))\n"
        "print(len(names), app.state.gateway.shared.status()['backend'])\n"
    )
    command = [sys.executable, "-c", code, "matplotlib,redis"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, backend = done.stdout.split()
    assert int(count) > 100
    assert backend == "local"
