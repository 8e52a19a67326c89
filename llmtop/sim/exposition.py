"""What prometheus_client's exposition apps do with `?name[]=...`: only the samples named.

vLLM mounts prometheus_client's ASGI app under /metrics (its plain /metrics route ignores the
query; /metrics/ answers it), so the sim does the same, and llmtop's narrow scrapes
(`core.exposition.narrow`) meet here what they meet on a real vLLM. A family keeps its HELP and
TYPE lines when one of its samples is named, and goes when none is (prometheus_client's restricted
registry).
"""

from __future__ import annotations

from collections.abc import Collection


def restrict(text: str, names: Collection[str]) -> str:
    """The exposition `text` with only the samples whose name is in `names`."""
    out: list[str] = []
    header: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("#"):
            if line.startswith("# HELP "):
                header = [line]
            elif line.startswith("# TYPE ") and header:
                header.append(line)
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0].strip()
        if name and name in names:
            out.extend(header)
            header = []
            out.append(line)
    return "".join(out)
