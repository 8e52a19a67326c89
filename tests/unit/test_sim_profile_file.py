"""`llmtop sim --profile FILE.json`: a profile read from a file (one fitted to a real engine)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.errors import UsageError
from llmtop.settings import SimSettings
from llmtop.sim.profiles import PROFILES, get_profile, profile_from_json
from llmtop.sim.server import build_engine


def _write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "fitted.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_profile_file_round_trips_and_sizes_the_engine(tmp_path: Path) -> None:
    fitted = dataclasses.replace(
        PROFILES["fast"], name="fitted", kv_tokens=4096, block_size=128, max_num_seqs=8
    )
    path = _write(tmp_path, dataclasses.asdict(fitted))
    assert get_profile(path) == fitted
    engine = build_engine(SimSettings(profile=path), now=0.0)
    assert engine.config.kv_tokens == 4096
    assert engine.config.num_gpu_blocks == 32
    assert engine.config.max_num_seqs == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"layers": 2.5}, "layers must be int"),
        ({"layers": True}, "layers must be int"),
        ({"flops_per_s": 0}, "flops_per_s must be positive"),
        ({"step_overhead_s": -0.1}, "step_overhead_s must be positive"),
        ({"kv_tokens": "many"}, "kv_tokens must be int | None"),
    ],
)
def test_a_wrong_field_is_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    data = {**dataclasses.asdict(PROFILES["fast"]), **change}
    with pytest.raises(UsageError, match=message):
        get_profile(_write(tmp_path, data))


def test_missing_unreadable_and_malformed_files(tmp_path: Path) -> None:
    data = dataclasses.asdict(PROFILES["fast"])
    del data["params"]
    with pytest.raises(UsageError, match="missing field 'params'"):
        get_profile(_write(tmp_path, data))
    with pytest.raises(UsageError, match="No such file"):
        get_profile(str(tmp_path / "absent.json"))
    with pytest.raises(UsageError, match="not JSON"):
        profile_from_json("{", "x.json")
    with pytest.raises(UsageError, match="expected a JSON object"):
        profile_from_json("[1, 2]", "x.json")


def test_the_cli_says_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": 3}')
    proc = subprocess.run(
        [sys.executable, "-m", "llmtop", "sim", "--port", "0", "--profile", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "name must be str" in proc.stderr
    assert "Traceback" not in proc.stderr
