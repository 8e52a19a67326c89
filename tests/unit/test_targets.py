"""The targets file: URLs, optional names, comments; a bad line is named."""

from __future__ import annotations

import re

import pytest

from llmtop.core.targets import Target, default_name, parse_targets, targets_from_urls
from llmtop.errors import ConfigError


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
