"""The docs say what the code does: every flag, `:` word, limit, snapshot key and finding that
README.md or docs/*.md names exists, and every one the code has is documented. The tables the
code can make are made by scripts/docs_tables.py and must be current.
(The key bindings against the app's own: tests/tui/test_keyhelp.py, which may import textual.)
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from llmtop.core.base.admin_api import LIMIT_FIELDS, LIMITS
from llmtop.core.findings.catalog import DEFINITIONS
from llmtop.tui.view.commands import ACTIONS, ALIASES
from llmtop.tui.view.keyhelp import limit_word_usage

ROOT = Path(__file__).resolve().parents[2]


@cache
def tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "scripts/docs_tables.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LEADS: set[str] = set()
"""Pages the flag checks skip while someone rewrites them (none now: the autopilot's and the
sim's pages are back)."""


@cache
def current_flags() -> dict[str, set[str]]:
    return dict(tables().current_flags())


@cache
def docs() -> dict[str, str]:
    return {f: (ROOT / f).read_text() for f in tables().FILES}


def checked_docs() -> dict[str, str]:
    return {f: text for f, text in docs().items() if f not in LEADS}


def code_spans(text: str) -> list[str]:
    """Inline code and the lines of fenced blocks (a line ending in \\ joined to the next)."""
    spans: list[str] = []
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
    for block in fenced.findall(text):
        spans += block.replace("\\\n", " ").splitlines()
    for line in fenced.sub("", text).splitlines():
        spans += re.findall(r"`([^`]+)`", line)
    return spans


FOREIGN_FLAGS = {
    # vLLM's own (serve passes them on; the docs name them as vLLM's)
    "--max-num-seqs", "--max-model-len", "--max-num-batched-tokens", "--max-num-queued-reqs",
    "--gpu-memory-utilization", "--scheduling-policy", "--disable-log-stats",
    "--enable-chunked-prefill", "--tensor-parallel-size", "--kv-cache-dtype", "--dtype",
    "--block-size", "--enforce-eager", "--served-model-name", "--data-parallel-size",
    "--host", "--port", "--model", "--num-gpu-blocks-override", "--api-key",
    "--max-num-queued-tokens", "--speculative-config", "--max-loras", "--enable-lora",
    # other tools the docs show: pytest, promtool, curl, pip, ssh
    "--collect-only", "--strict-markers", "--run-real", "--dist", "--no-cache", "--fix",
    "--snapshot-update", "--extra-index-url",
}  # fmt: skip
"""Flags of other programs that the docs name as theirs."""


@cache
def script_flags() -> set[str]:
    """The flags of the bench/ and scripts/ programs the docs show with their commands."""
    found: set[str] = set()
    for path in [*ROOT.glob("bench/*.py"), *ROOT.glob("bench/run_all"), *ROOT.glob("scripts/*")]:
        if path.is_file():
            found |= set(re.findall(r"""["'](--[a-z][a-z0-9-]+)["']""", path.read_text()))
    return found


def llmtop_invocations(span: str) -> list[tuple[str, list[str]]]:
    """(command, its flags) for each `llmtop ...` in a span, up to a pipe, && or comment."""
    names = current_flags()
    found = []
    for m in re.finditer(r"(?<![\w/.-])llmtop((?:\s+[^\s|&;#]+)*)", span):
        words = m.group(1).split()
        command = words[0] if words and words[0] in names else "top"
        flags = [w.split("=")[0] for w in words if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", w)]
        found.append((command, flags))
    return found


def test_generated_tables_are_current() -> None:
    assert tables().stale() == [], "run: python scripts/docs_tables.py"


def test_every_generated_table_is_used() -> None:
    text = "\n".join(docs().values())
    unused = [n for n in tables().BLOCKS if f"docs_tables.py: {n} -->" not in text]
    assert unused == []


def test_every_flag_a_doc_gives_an_llmtop_command_is_that_commands() -> None:
    current = current_flags()
    wrong = []
    for f, text in checked_docs().items():
        for span in code_spans(text):
            for command, flags in llmtop_invocations(span):
                for flag in flags:
                    if flag in current[command]:
                        continue
                    if command == "serve" and flag in FOREIGN_FLAGS:
                        continue  # passed on to `vllm serve`
                    wrong.append(f"{f}: llmtop {command} {flag} (not in its --help)")
    assert wrong == [], "\n".join(wrong)


def test_every_flag_the_docs_name_exists() -> None:
    hidden = set().union(*tables().hidden_flags().values())  # test hooks (serve's --engine-cmd)
    known = set().union(*current_flags().values()) | hidden | FOREIGN_FLAGS | script_flags()
    wrong = []
    for f, text in checked_docs().items():
        for n, line in enumerate(text.splitlines(), 1):
            for span in re.findall(r"`([^`]+)`", line) or ([line] if "--" in line else []):
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*(?![\w.-])", span):
                    if flag not in known:
                        wrong.append(f"{f}:{n}: {flag} is no flag of llmtop or of what it shows")
    assert wrong == [], "\n".join(wrong)


def test_every_flag_of_every_command_is_documented() -> None:
    reference = docs()["docs/cli.md"]
    missing = [
        f"llmtop {command} {flag}"
        for command, flags in current_flags().items()
        for flag in sorted(flags - {"--help"})
        if f"`{flag}" not in reference
    ]
    assert missing == [], "\n".join(missing)


def test_every_colon_word_the_docs_name_exists_and_every_one_is_documented() -> None:
    words = {s.word for s in LIMITS} | set(ACTIONS) | set(ALIASES)
    wrong = [
        f"{f}: :{w}"
        for f, text in docs().items()
        for w in re.findall(r"`:([a-z_]+)", text)
        if w not in words
    ]
    assert wrong == [], "\n".join(wrong)
    readme = docs()["README.md"].replace("\\|", "|")  # a table cell's escaped pipes
    missing = [s.word for s in LIMITS if f"`{limit_word_usage(s)}`" not in readme]
    missing += [a for a in ACTIONS if f"`{a}`" not in readme]
    assert missing == [], "\n".join(missing)
    tui = docs()["docs/tui.md"]
    assert [w for w in words if f"`{w}" not in tui] == []


def test_the_limits_the_docs_list_are_the_gateways() -> None:
    wrong = []
    for f, text in docs().items():
        for span in code_spans(text) + text.splitlines():
            if "/admin/limits" not in span:
                continue
            named = set(re.findall(r'"([a-z_]+)"\s*:', span)) or set(
                re.findall(r'[{,]\s*"([a-z_]+)"(?=\s*[,}])', span)
            )
            if not named <= set(LIMIT_FIELDS):
                wrong.append(f"{f}: {sorted(named - set(LIMIT_FIELDS))} are no limits")
            if span.startswith("| `GET /admin/limits`") and named & set(LIMIT_FIELDS) != set(
                LIMIT_FIELDS
            ):
                wrong.append(f"{f}: GET /admin/limits lists {sorted(named)}")
    assert wrong == [], "\n".join(wrong)
    gateway_md = docs()["docs/gateway.md"]
    assert [s.field for s in LIMITS if f"| `{s.field}` | `:{s.word}`" not in gateway_md] == []


def schema_keys() -> set[str]:
    keys: set[str] = set()

    def walk(v: object) -> None:
        if isinstance(v, dict):
            keys.update(v)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(tables().snapshot_schema())
    return keys


def test_snapshot_json_is_documented_in_one_place_as_a_run_has_it() -> None:
    """One annotated schema of `llmtop snapshot --json` (a second copy in README drifted: it
    lacked the gateway's limits), with every key a recorded run has and none it lacks."""
    blocks = [
        (f, b)
        for f, text in docs().items()
        for b in re.findall(r"```jsonc\n(.*?)```", text, re.S)
        if '"engines"' in b
    ]
    assert [f for f, _ in blocks] == ["docs/snapshot.md"]
    text = re.sub(r'("rejected_per_s": )\{[^}]*\}', r"\1{}", blocks[0][1])
    listed = set(re.findall(r'"([a-z_0-9]+)"\s*:', text))
    assert sorted(schema_keys() - listed) == [], "missing"
    assert sorted(listed - schema_keys()) == [], "no such key"


def findings_rows(text: str) -> dict[str, str]:
    """{finding id: its bottleneck cell} from the markdown tables whose header starts with
    `| id |` and has a bottleneck column."""
    rows: dict[str, str] = {}
    for table in re.findall(r"^\| id \|.*?(?=^[^|]|\Z)", text, re.S | re.M):
        lines = table.splitlines()
        head = [c.strip() for c in lines[0].strip("|").split("|")]
        if "bottleneck" not in head:
            continue
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            for finding in re.findall(r"`([a-z0-9-]+)`", cells[0]):
                rows[finding] = cells[head.index("bottleneck")]
    return rows


@pytest.mark.parametrize("doc", ["README.md", "docs/snapshot.md"])
def test_the_findings_tables_are_the_rules(doc: str) -> None:
    rules = {d.rule.id: d.rule.bottleneck for d in DEFINITIONS}
    rows = findings_rows(docs()[doc])
    assert sorted(rows) == sorted(rules)
    wrong = {f: (cell, rules[f]) for f, cell in rows.items() if rules[f] not in cell}
    assert wrong == {}


def test_snapshots_exit_codes_are_the_codes() -> None:
    from llmtop.commands import snapshot
    from llmtop.core.output.summary import EXIT_CODES

    for f in ("README.md", "docs/snapshot.md"):
        text = " ".join(docs()[f].split())
        said = ", ".join(f"{code} {status}" for status, code in EXIT_CODES.items())
        assert said in text, f
        assert f"{snapshot.USAGE_EXIT_CODE} bad usage" in text, f
        assert f"{snapshot.ERROR_EXIT_CODE} any other error" in text, f


def test_readme_states_no_count_or_timing_that_no_command_makes() -> None:
    readme = docs()["README.md"]
    assert re.findall(r"\d[\d,]* tests", readme) == []
    assert re.findall(r"\d+(?:\.\d+)? minutes on", readme) == []


def test_the_quick_start_is_the_ci_line() -> None:
    ci = (ROOT / ".ci/run").read_text()
    line = next(x for x in ci.splitlines() if x.startswith("pip install"))
    readme = docs()["README.md"]
    assert f"{line}\n" in readme
    assert line.endswith("&& scripts/check"), line
    assert line.replace("&& scripts/check", "&& llmtop demo") in readme


def test_the_real_vllm_page_counts_and_names_what_pytest_collects() -> None:
    """docs/real-vllm.md says how many tests `tests/real` holds and has a row for each file,
    as `pytest --collect-only -m real_vllm tests/real` counts them."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-n", "0", "-m", "real_vllm", "tests/real"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    ids = [line for line in out.stdout.splitlines() if line.startswith("tests/real/")]
    assert ids, out.stdout + out.stderr
    page = docs()["docs/real-vllm.md"]
    assert f"{len(ids)} tests, as" in page
    files = {i.split("::")[0].removeprefix("tests/real/") for i in ids}
    assert sorted(f for f in files if f"`{f}" not in page) == []


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    """README's first screen links its detail away: each link must land."""

    def anchors(path: Path) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
        return {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in heads}

    wrong = []
    for f, text in docs().items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (ROOT / f).parent / path if path else ROOT / f
            if not file.exists():
                wrong.append(f"{f}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                wrong.append(f"{f}: {target} (no such heading)")
    assert wrong == [], "\n".join(wrong)
