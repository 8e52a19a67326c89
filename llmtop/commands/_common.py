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


def kube_flags(selector_help: str) -> tuple[Flag, ...]:
    """--k8s-selector (`selector_help`: what the command does with the pods), --inference-pool
    and where to find them: the same rows on top, gateway and whatif."""
    return (
        ("k8s_selector", "--k8s-selector", selector_help, {"metavar": "LABELS"}),
        ("inference_pool", "--inference-pool",
         "instead of --k8s-selector: the pods of this InferencePool (its selector and target "
         "port)", {"metavar": "NAME"}),
        ("k8s_namespace", "--k8s-namespace",
         "the pods' namespace, 'all' for every one (else the context's)", {"metavar": "NS"}),
        ("k8s_context", "--k8s-context", "the kubeconfig context", {"metavar": "NAME"}),
        ("kubeconfig", "--kubeconfig", "the kubeconfig file", {"metavar": "F"}),
    )  # a table: one flag a row, read down its options  # fmt: skip


P = TypeVar("P", argparse.ArgumentParser, argparse._ArgumentGroup)
Row = tuple[str, str, dict[str, Any]]
"""(option, help, argparse keywords): one row of a command's table of flags that no settings
field backs (`rows`)."""


def rows(parser: P, table: Iterable[Row], **common: Any) -> P:
    """Add a table of plain flags, each with the `common` keywords under its own; returns
    `parser`."""
    for option, help, kwargs in table:
        parser.add_argument(option, help=help, **(common | kwargs))
    return parser


SLO_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("ttft_s", "--ttft-slo-s", "TTFT SLO of a request, seconds"),
    ("itl_s", "--itl-slo-s", "ITL SLO (mean gap between tokens), seconds"),
)
"""(field of SloSettings, flag, help): the SLO, the same on every command."""


def slo_flags(parser: argparse.ArgumentParser) -> None:
    """--ttft-slo-s and --itl-slo-s: the one [slo], what every judge in llmtop reads."""
    for name, option, help in SLO_FLAGS:
        flag(parser, settings.SloSettings, name, option, metavar="S", type=float, help=help)


def slo_rows() -> tuple[Row, ...]:
    """The SLO flags as (option, help, argparse keywords) rows, for a command with a flag
    table of its own (`serve`): the same names, help and settings as `slo_flags`."""
    return tuple(
        (
            option,
            f"{help} {settings.describe(settings.SloSettings, name)}",
            {"metavar": "S", "type": float, "dest": name},
        )
        for name, option, help in SLO_FLAGS
    )


def limit_flags(cls: type[Any]) -> tuple[Flag, ...]:
    """The gateway limits `cls` can set at start, as flag rows, from the one table of limits."""
    from dataclasses import fields

    from llmtop.core.base.admin_api import LIMITS

    at_start = {f.name for f in fields(cls)}
    kinds = {"int": int, "float": float, "choice": str}
    return tuple(
        (s.field, s.option, s.help, {"metavar": s.metavar, "type": kinds[s.kind]} | choices)
        for s in LIMITS
        if s.field in at_start
        for choices in ({"choices": s.choices} if s.choices else {},)
    )


def load(cls: type[T], args: argparse.Namespace) -> T:
    """One settings section from the parsed flags, the environment and the config file."""
    config = settings.read_config(getattr(args, "config", None))
    return settings.load(cls, flags=vars(args), config=config)
