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
    old: str | None = None,
    **kwargs: Any,
) -> None:
    """Add a flag backed by a settings field; its help shows the default and the variable.
    `old`: the flag's former name, still taken with a one-line warning (`renamed`)."""
    parser.add_argument(
        *names, dest=name, default=None, help=f"{help} {settings.describe(cls, name)}", **kwargs
    )
    if old is not None:
        renamed(parser, old, names[0], dest=name, **kwargs)


Flag = tuple[str, str, str, dict[str, Any]]
"""(settings field, option, help, argparse keywords): one row of a command's flag table."""


def flags(parser: argparse.ArgumentParser, cls: type[Any], table: Iterable[Flag]) -> None:
    """Add a table of settings-backed flags (see `flag`)."""
    for name, option, help, kwargs in table:
        flag(parser, cls, name, option, help=help, **kwargs)  # kwargs may name its `old` flag


P = TypeVar("P", argparse.ArgumentParser, argparse._ArgumentGroup)
Row = tuple[str, str, dict[str, Any]]
"""(option, help, argparse keywords): one row of a command's table of flags that no settings
field backs (`rows`)."""


def rows(parser: P, table: Iterable[Row], **common: Any) -> P:
    """Add a table of plain flags, each with the `common` keywords under its own; a row's `old`
    keyword names its former spelling, still taken with a warning (`renamed`), as in `flags`.
    Returns `parser`."""
    for option, help, kwargs in table:
        given = common | kwargs
        old = given.pop("old", None)
        action = parser.add_argument(option, help=help, **given)
        if old is not None:
            renamed(parser, old, option, **(given | {"dest": action.dest}))
    return parser


class Renamed(argparse.Action):
    """An old flag name kept working: it sets what the new one sets, and says the new name in
    one line on stderr (its help is hidden, so --help shows only the new name)."""

    def __init__(
        self, option_strings: list[str], dest: str, *, new: str, append: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new
        self.append = append
        """Each use adds to a list (the new flag's action is "append")."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        settings.deprecated(option_string or self.option_strings[0], self.new)
        if self.const is not None and values == []:  # a switch: no value of its own
            values = self.const
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)


def renamed(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    old: str,
    new: str,
    *,
    dest: str,
    **kwargs: Any,
) -> None:
    """Keep `old` working as `new` (same dest and type), hidden from --help, with a warning.

    `kwargs` are the new flag's: its type, choices and default carry over; "append" appends;
    a switch (store_true/store_const) takes no value."""
    action = kwargs.get("action")
    keep: dict[str, Any] = {k: kwargs[k] for k in ("type", "choices", "default") if k in kwargs}
    if action in ("store_true", "store_const"):
        keep = {"nargs": 0, "const": kwargs.get("const", True)} | (
            {"default": kwargs["default"]} if "default" in kwargs else {}
        )
    parser.add_argument(
        old, dest=dest, help=argparse.SUPPRESS, action=Renamed, new=new,
        append=action == "append", **keep,
    )  # fmt: skip


SLO_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    ("ttft_s", "--ttft-slo-s", "--ttft-slo", "TTFT SLO of a request, seconds"),
    ("itl_s", "--itl-slo-s", "--itl-slo", "ITL SLO (mean gap between tokens), seconds"),
)
"""(field of SloSettings, flag, the flag's old name, help): the SLO, the same on every command."""


def slo_flags(parser: argparse.ArgumentParser) -> None:
    """--ttft-slo-s and --itl-slo-s (the one [slo]: what every judge in llmtop reads), and
    their old names --ttft-slo and --itl-slo, which still work with a warning."""
    for name, option, old, help in SLO_FLAGS:
        flag(parser, settings.SloSettings, name, option, metavar="S", type=float, help=help,
             old=old)  # fmt: skip


def slo_rows() -> tuple[Row, ...]:
    """The SLO flags as (option, help, argparse keywords) rows, for a command with a flag
    table of its own (`serve`): the same names, help and settings as `slo_flags`."""
    return tuple(
        (option, f"{help} {settings.describe(settings.SloSettings, name)}",
         {"metavar": "S", "type": float, "dest": name})
        for name, option, _, help in SLO_FLAGS
    )  # fmt: skip


def load(cls: type[T], args: argparse.Namespace) -> T:
    """One settings section from the parsed flags, the environment and the config file."""
    config = settings.read_config(getattr(args, "config", None))
    return settings.load(cls, flags=vars(args), config=config)
