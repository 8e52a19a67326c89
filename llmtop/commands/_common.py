"""Helpers shared by the subcommand modules: settings-backed flags and settings loading."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any, TypeVar

from llmtop import settings

T = TypeVar("T")


def flag(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type[Any],
    name: str,
    *names: str,
    help: str,
    **kwargs: Any,
) -> None:
    """Add a flag backed by a settings field; its help shows the default and the variable."""
    parser.add_argument(
        *names, dest=name, default=None, help=f"{help} {settings.describe(cls, name)}", **kwargs
    )


Flag = tuple[str, str, str, dict[str, Any]]
"""(settings field, option, help, argparse keywords): one row of a command's flag table."""


def flags(parser: argparse.ArgumentParser, cls: type[Any], table: Iterable[Flag]) -> None:
    """Add a table of settings-backed flags (see `flag`)."""
    for name, option, help, kwargs in table:
        flag(parser, cls, name, option, help=help, **kwargs)


def load(cls: type[T], args: argparse.Namespace) -> T:
    """One settings section from the parsed flags, the environment and the config file."""
    config = settings.read_config(getattr(args, "config", None))
    return settings.load(cls, flags=vars(args), config=config)
