"""ARCHITECTURE.md's tables are the import contracts: each table's rows, top to bottom, are the
layers of the `layers` contract over that container in pyproject.toml (which `lint-imports`
enforces on the code), so the map a newcomer reads first cannot drift from the code."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"## Packages": "llmtop", "## core/ in homes": "llmtop.core"}
TABLES["## gateway/ in homes"] = "llmtop.gateway"
Layers = list[frozenset[str]]


def contract_layers(container: str) -> Layers:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c["containers"] == [container]]
    assert layers["exhaustive"] is True, f"the contract over {container} is not exhaustive"
    return [frozenset(x.strip() for x in row.split("|")) for row in layers["layers"]]


def doc_layers(heading: str) -> Layers:
    """The table under `heading`: its rows' second column, the names in backquotes."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    assert heading in text, f"ARCHITECTURE.md has no {heading!r}"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    return [frozenset(re.findall(r"`([^`]+)`", cells[2])) for cells in rows]


@pytest.mark.parametrize(("heading", "container"), TABLES.items())
def test_the_map_is_the_contract(heading: str, container: str) -> None:
    assert doc_layers(heading) == contract_layers(container)


def test_the_map_is_one_screen() -> None:
    lines = (ROOT / "ARCHITECTURE.md").read_text().splitlines()
    assert len(lines) <= 70, "ARCHITECTURE.md is the one screen a newcomer reads first"


def test_every_package_is_on_the_map() -> None:
    """What the exhaustive contract also says, named here as a newcomer reads it."""
    pkg = ROOT / "llmtop"
    on_disk = {p.stem for p in pkg.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    on_map = frozenset().union(*doc_layers("## Packages"))
    assert on_disk - {"__init__"} == on_map
