"""One module per subcommand: `HELP`, `add_arguments(parser)` and `run(args) -> int`.

These modules import only argparse and settings at top level, so `llmtop --help` stays fast;
each `run` imports the heavy machinery it needs.
"""

NAMES: tuple[str, ...] = (
    "top",
    "demo",
    "sim",
    "gateway",
    "snapshot",
    "load",
    "replay",
    "report",
    "whatif",
    "serve",
    "rules",
)
