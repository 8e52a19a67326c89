"""Command line: argparse subcommands, each run by its module in llmtop.commands.

Every `LlmtopError` becomes one line on stderr and its exit code, Ctrl-C exit 130; a user never
sees a traceback (LLMTOP_DEBUG=1 prints one for bug reports). Process-wide settings, such as the
polling commands' GC threshold (`tune_gc`), belong here at the entry, not in a library object."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from llmtop.commands import NAMES
from llmtop.errors import LlmtopError, TargetError, UsageError

EPILOG = """\
Settings: flags > LLMTOP_* environment > config file (--config, default
$XDG_CONFIG_HOME/llmtop/config.toml) > defaults. A flag backed by a setting names its
default, variable and config key in its help.

Exit codes: 0 ok; 1 error; 2 bad usage or config; 3 target unreachable; 4 a server could
not start; 5 admin API refused; 6 bad recording; 130 interrupted. `llmtop snapshot` exits
with its verdict: 0 ok, 1 degraded, 2 critical, 3 unknown (unreachable included); 64 bad
usage or config; 70 any other error.
"""


POLLING_COMMANDS = frozenset({"top", "snapshot"})
"""The commands that poll engines (a fleet of a hundred, say) every second for as long as
they run: they get `tune_gc`."""
GC_GEN0_THRESHOLD = 10_000
"""The garbage collector's youngest-generation threshold for `POLLING_COMMANDS`: a poll of a
hundred replicas allocates ~20,000 short-lived containers, which at Python's default (700)
cost dozens of collections a poll; at 10,000 about two, and no figure changes."""


def tune_gc() -> None:
    """Raise the collector's youngest threshold to `GC_GEN0_THRESHOLD` (never lower it)."""
    gen0, *older = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_GEN0_THRESHOLD), *older)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2 (or the command's own
    `USAGE_EXIT_CODE`), and takes a flag by its whole name only: a prefix (`--window` for
    `--window-s`) is a usage error, not a guess that a new flag would make ambiguous."""

    usage_exit_code = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"llmtop: {message} (see '{self.prog} --help')\n")
        raise SystemExit(self.usage_exit_code)


class _Version(argparse.Action):
    """`--version`: prints `llmtop <version>` and exits 0; the version is read only when asked
    (`llmtop.__version__`), not each time the parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
            help="show llmtop's version and exit",
        )  # fmt: skip

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        import llmtop

        sys.stdout.write(f"llmtop {llmtop.__version__}\n")
        parser.exit()


def exit_code(mod: ModuleType | None, error: LlmtopError) -> int:
    """The exit code of `error` in the command `mod`: its own, or the command's
    `USAGE_EXIT_CODE` / `ERROR_EXIT_CODE` where its verdicts use the usual codes (snapshot)."""
    if isinstance(error, UsageError):
        return int(getattr(mod, "USAGE_EXIT_CODE", error.exit_code))
    if isinstance(error, TargetError):
        return error.exit_code
    return int(getattr(mod, "ERROR_EXIT_CODE", error.exit_code))


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"llmtop.commands.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, subcommands included; with `only`, that subcommand alone, so
    `llmtop` imports and builds one command's table, not eleven."""
    parser = _Parser(
        prog="llmtop",
        description="Watch, diagnose and control self-hosted LLM inference (vLLM) from a terminal."
        " With no subcommand, runs the TUI (`llmtop top`).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    common = _Parser(add_help=False)
    common.add_argument("--config", metavar="PATH", help="TOML config file")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in NAMES if only is None else (only,):
        mod = _module(name)
        p = sub.add_parser(
            name,
            help=mod.HELP,
            description=mod.HELP,
            parents=[common],
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.usage_exit_code = getattr(mod, "USAGE_EXIT_CODE", 2)
        mod.add_arguments(p)
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand `name`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    return parser


def _with_default_command(argv: list[str]) -> list[str]:
    """`llmtop` and `llmtop --vllm URL` mean `llmtop top ...`."""
    if not argv:
        return ["top"]
    first = argv[0]
    if first in NAMES or first in ("-h", "--help", "--version"):
        return argv
    if first.startswith("-"):
        return ["top", *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llmtop` console script; returns the exit code."""
    args_list = _with_default_command(list(sys.argv[1:] if argv is None else argv))
    command = args_list[0] if args_list and args_list[0] in NAMES else None
    parser = build_parser(command)
    try:
        args, extra = parser.parse_known_args(args_list)
        if extra:  # named by the subcommand's parser, so the pointer is to its own --help
            _subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command in POLLING_COMMANDS:
            tune_gc()
        return int(_module(args.command).run(args) or 0)
    except LlmtopError as e:
        if os.environ.get("LLMTOP_DEBUG"):
            raise
        sys.stderr.write(f"llmtop: {e}\n")
        return exit_code(_module(command) if command else None, e)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `llmtop snapshot | head`
        return 0
