"""The targets file: URLs, optional names, comments; a bad line is named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmtop.core.pipeline.targets import Target, default_name, parse_targets, targets_from_urls
from llmtop.errors import ConfigError
from llmtop.sources.targets_file import TargetsFile


def test_urls_names_and_comments() -> None:
    text = "# fleet\nhttp://10.0.0.7:8000  gpu7-a\n\nhttp://10.0.0.8:8000/  # no name\n"
    assert parse_targets(text) == (
        Target("http://10.0.0.7:8000", "gpu7-a"),
        Target("http://10.0.0.8:8000", "10.0.0.8:8000"),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http://a:1\nftp://b:2\n", "line 2: 'ftp://b:2' is not an http(s) URL"),
        ("http://a:1 x y\n", "line 1: expected 'URL [NAME]'"),
        ("http://a:1 x\nhttp://a:1 y\n", "line 2: http://a:1 is listed twice"),
        ("http://a:1 x\nhttp://b:1 x\n", "line 2: the name 'x' is used twice"),
    ],
)
def test_bad_lines_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_targets(text, "fleet.txt")


def test_vllm_urls_become_targets_once() -> None:
    assert targets_from_urls(["http://h:1/", "http://h:1", "http://g:2/metrics"]) == (
        Target("http://h:1", "h:1"),
        Target("http://g:2/metrics", "g:2"),
    )
    assert default_name("https://h/v1/metrics") == "h/v1"


def test_the_file_is_re_read_when_it_changes_and_a_bad_edit_keeps_the_list(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.txt"
    path.write_text("http://a:1 a\n")
    f = TargetsFile(path)
    assert [t.name for t in f.current()] == ["a"]
    path.write_text("http://a:1 a\nhttp://b:1 b\n")
    assert [t.name for t in f.current()] == ["a", "b"]
    path.write_text("http://a:1 a\nnot a url at all\n")
    assert [t.name for t in f.current()] == ["a", "b"]  # still watching the previous list
    assert f.error is not None
    assert "line 2" in f.error
    assert "still watching the previous 2 targets" in f.error
    path.write_text("http://c:1 c\n")
    assert [t.name for t in f.current()] == ["c"]
    assert f.error is None


def test_a_bad_or_missing_file_at_start_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        TargetsFile(tmp_path / "missing.txt").current()
    (tmp_path / "bad.txt").write_text("x\n")
    with pytest.raises(ConfigError, match="line 1"):
        TargetsFile(tmp_path / "bad.txt").current()
