"""The release a user picks up: `python -m build` makes an sdist and a wheel that `twine check
--strict` passes, whose metadata carries the name, the version from git and the extras.

Built offline (`--no-isolation`: hatchling and hatch-vcs come with the test extra) into tmp_path,
from this checkout and from a clone of it given a tag.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from importlib.metadata import version
from pathlib import Path

import pytest

for _needed in ("build", "twine", "hatchling", "hatch_vcs"):
    pytest.importorskip(_needed, reason="in the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {"report": "matplotlib", "redis": "redis"}
"""Each extra most users do not need, and the package it brings."""


def build(source: Path, out: Path, *kinds: str) -> list[Path]:
    """`python -m build` of `source` into `out`; the files made, the sdist first."""
    command = [sys.executable, "-m", "build", "--no-isolation", *kinds, "--outdir", str(out)]
    done = subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return sorted(out.iterdir(), key=lambda p: p.suffix != ".gz")


def in_git(path: Path) -> bool:
    done = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"],
        capture_output=True, text=True,
    )  # fmt: skip
    return done.returncode == 0


def wheel_metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(name).decode("utf-8"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return build(ROOT, tmp_path_factory.mktemp("dist"))


@pytest.mark.slow(15)
def test_the_sdist_and_wheel_pass_twine_check_strict(dist: list[Path]) -> None:
    assert [p.suffix for p in dist] == [".gz", ".whl"]
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


@pytest.mark.slow(15)
def test_the_wheel_names_its_version_and_extras(dist: list[Path]) -> None:
    meta = wheel_metadata(dist[1])
    assert meta["Name"] == "llmtop-console"
    assert meta["Requires-Python"] == ">=3.10"
    if in_git(ROOT):  # the version from git: a dev version before the first tag
        assert meta["Version"] != "0.0.0"
    assert set(meta.get_all("Provides-Extra") or []) >= {*EXTRAS, "test", "vllm"}
    requires = meta.get_all("Requires-Dist") or []
    for extra, package in EXTRAS.items():
        mine = [r for r in requires if r.startswith(package + ">") or r.startswith(package + ";")]
        assert any(f"extra == '{extra}'" in r for r in mine), f"{package} not in [{extra}]"
        assert all("extra == " in r for r in mine), f"{package} is not optional: {mine}"
    for gone in ("httptools", "sniffio"):
        assert not any(r.startswith(gone) for r in requires), gone
    with zipfile.ZipFile(dist[1]) as z:
        names = z.namelist()
        entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "llmtop = llmtop.cli:main" in z.read(entry).decode()
    assert "llmtop/cli.py" in names
    assert not any(n.startswith("tests/") for n in names)
    with tarfile.open(dist[0]) as sdist:
        top = [m for m in sdist.getmembers() if m.name.count("/") == 1]
        pkg_info = next(m for m in top if m.name.endswith("/PKG-INFO"))
        extracted = sdist.extractfile(pkg_info)
        assert extracted is not None
        assert Parser().parsestr(extracted.read().decode())["Version"] == meta["Version"]


@pytest.mark.slow(20)
def test_a_tag_is_the_version(tmp_path: Path) -> None:
    """A clone of this repository's commits tagged v0.2.0 builds as 0.2.0: the version comes
    from the tag, not from a file someone has to remember to edit."""
    if not in_git(ROOT):
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, capture_output=True
    )
    subprocess.run(["git", "-C", str(clone), "tag", "v0.2.0"], check=True, capture_output=True)
    (wheel,) = build(clone, tmp_path / "dist", "--wheel")
    assert wheel.name.startswith("llmtop_console-0.2.0-")
    assert wheel_metadata(wheel)["Version"] == "0.2.0"


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmtop", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"llmtop {version('llmtop-console')}\n"
