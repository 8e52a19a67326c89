"""`llmtop serve`: the plan, the commands it implies, and running them with the TUI attached.

vLLM listens on a free loopback port; the gateway, capped at the plan's max sequences, takes the
public address; the TUI watches both. Leaving the TUI (`q`), Ctrl-C or SIGTERM stops the gateway
and then vLLM, each as a whole process group."""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmtop.errors import UsageError
from llmtop.serve.inputs import device_memory, read_model, weights
from llmtop.serve.plan import GIB, Plan, make_plan, parse_engine_args
from llmtop.serve.stack import (
    LOOPBACK,
    Stack,
    check_free,
    free_port,
    term_is_interrupt,
    wait_headless,
)


@dataclass(frozen=True)
class ServeOptions:
    """`llmtop serve`'s own options (everything after MODEL that is not one goes to vLLM)."""

    model: str
    vllm_args: tuple[str, ...] = ()
    listen: str = "127.0.0.1:9000"
    expect_prompt_tokens: int = 1000
    expect_output_tokens: int = 250
    gpu_memory_gb: float | None = None
    reserve_gb: float = 2.0
    dry_run: bool = False
    tui: bool = True
    vllm_bin: str | None = None
    engine_cmd: str | None = None
    """Test hook: a command template standing in for `vllm serve` ({python}, {host}, {port},
    {model}, {max_model_len}, {max_num_seqs}, {kv_tokens})."""
    ready_timeout_s: float = 600.0
    log_dir: str | None = None
    admin_token_file: str | None = None
    slo: tuple[str, ...] = ()
    """The SLO flags given (--ttft-slo-s S, --itl-slo-s S), passed on to the gateway (the TUI
    reads them from the same flags)."""


@dataclass(frozen=True)
class Commands:
    """What `serve` runs: the engine, the gateway, and the URLs the TUI watches."""

    engine: tuple[str, ...]
    gateway: tuple[str, ...]
    engine_url: str
    gateway_url: str


OPTION_FLAGS = (
    "listen",
    "expect_prompt_tokens",
    "expect_output_tokens",
    "gpu_memory_gb",
    "reserve_gb",
    "dry_run",
    "vllm_bin",
    "engine_cmd",
    "log_dir",
    "admin_token_file",
)
"""The flags (argparse's names) that are ServeOptions fields as they are."""


OTHER_ENGINES = (
    ("llama-server", "llama.cpp's llama-server"),
    ("llama-cli", "llama.cpp"),
    ("sglang", "SGLang"),
    ("trtllm-serve", "TensorRT-LLM's trtllm-serve"),
    ("lmdeploy", "LMDeploy"),
    ("text-generation-launcher", "TGI"),
    ("dynamo", "NVIDIA Dynamo"),
)
"""An executable's name -> the engine it starts: what `--vllm-bin` must not name."""
AS_VLLM = ("", "vllm", "auto", "off", "none")
"""`--engine-kind` / LLMTOP_ENGINE_KIND words serve takes as its vLLM: vLLM's, or detection's
(settings' off/none/auto)."""
ELSEWHERE = (
    "llmtop serve starts vLLM only; start {engine} yourself and put"
    " `llmtop gateway --engine URL --autopilot` in front of it ({why})"
)


def only_vllm(given: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """`llmtop serve` plans and starts vLLM, nothing else: UsageError, in one line, when it is
    asked for another engine (`--engine-kind sglang`, `--vllm-bin llama-server`); a note when
    LLMTOP_ENGINE_KIND names another (that setting is the monitor's and the gateway's: serve
    reads its vLLM as vLLM), else None."""
    kind = given.get("engine_kind")
    if kind is not None and str(kind).strip().lower() not in AS_VLLM:
        from llmtop.core.dialects.catalog import dialect_of

        try:
            engine = dialect_of(str(kind).strip()).title
        except UsageError as e:
            raise UsageError(f"--engine-kind: {e}; llmtop serve starts vLLM only") from None
        raise UsageError(ELSEWHERE.format(engine=engine, why=f"--engine-kind {kind}"))
    binary = given.get("vllm_bin")
    if binary:
        name = Path(str(binary)).name.lower()
        for exe, engine in OTHER_ENGINES:
            if name.startswith(exe):
                why = f"--vllm-bin {binary} starts {engine}, not `vllm serve`"
                raise UsageError(ELSEWHERE.format(engine=engine, why=why))
    env = environ.get("LLMTOP_ENGINE_KIND", "").strip()
    if env.lower() not in AS_VLLM:
        return (
            f"LLMTOP_ENGINE_KIND={env} not used here: llmtop serve starts vLLM and reads it as vLLM"
        )
    return None


def options_from(model: str, vllm_args: Sequence[str], given: Mapping[str, Any]) -> ServeOptions:
    """The options of `llmtop serve MODEL` from the flags given (a flag not given keeps its
    default); UsageError names a bad one."""
    for flag in ("expect_prompt_tokens", "expect_output_tokens"):
        if flag in given and given[flag] < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1")
    return ServeOptions(
        model=model,
        vllm_args=tuple(vllm_args),
        **{k: given[k] for k in OPTION_FLAGS if k in given},
        **({"ready_timeout_s": given["ready_timeout"]} if "ready_timeout" in given else {}),
        tui=not given.get("no_tui", False),
        slo=tuple(
            part
            for name, flag in (("ttft_s", "--ttft-slo-s"), ("itl_s", "--itl-slo-s"))
            if name in given
            for part in (flag, repr(float(given[name])))
        ),
    )


def plan_for(opts: ServeOptions) -> Plan:
    """Read the model and the memory, and do the arithmetic."""
    shape, model_dir = read_model(opts.model)
    engine = parse_engine_args(opts.vllm_args)
    dtype = shape.dtype if engine.dtype in (None, "auto") else str(engine.dtype)
    return make_plan(
        shape,
        engine,
        device_memory(opts.gpu_memory_gb),
        weights(shape, model_dir, dtype),
        expect_prompt_tokens=opts.expect_prompt_tokens,
        expect_output_tokens=opts.expect_output_tokens,
        reserve_bytes=int(opts.reserve_gb * GIB),
    )


def _priority_scheduling(vllm_args: Sequence[str]) -> bool:
    """Whether vLLM is asked for --scheduling-policy priority."""
    args = list(vllm_args)
    for i, arg in enumerate(args):
        if arg == "--scheduling-policy=priority":
            return True
        if arg == "--scheduling-policy" and args[i + 1 : i + 2] == ["priority"]:
            return True
    return False


def commands_for(opts: ServeOptions, plan: Plan, engine_port: int) -> Commands:
    """The engine's and the gateway's command lines for a plan."""
    engine_url = f"http://{LOOPBACK}:{engine_port}"
    if opts.engine_cmd is not None:
        values = {
            "python": sys.executable,
            "host": LOOPBACK,
            "port": str(engine_port),
            "model": opts.model,
            "max_model_len": str(plan.max_model_len),
            "max_num_seqs": str(plan.max_num_seqs),
            "kv_tokens": str(plan.kv_tokens),
        }
        engine = tuple(part.format(**values) for part in shlex.split(opts.engine_cmd))
    else:
        vllm = opts.vllm_bin or shutil.which("vllm") or "vllm"
        engine = (
            vllm,
            "serve",
            opts.model,
            "--host",
            LOOPBACK,
            "--port",
            str(engine_port),
            *plan.engine_flags,
            *opts.vllm_args,
        )
    mode = ["--autopilot"]  # the preset: footprint admission, deadline queue, mode auto
    if opts.engine_cmd is None:  # vLLM, whatever LLMTOP_ENGINE_KIND or [gateway] says
        mode += ["--engine-kind", "vllm"]
    if _priority_scheduling(opts.vllm_args):
        mode.append("--engine-priority")  # the gateway's priorities hold inside vLLM too
    gateway = [
        sys.executable,
        "-m",
        "llmtop",
        "gateway",
        "--vllm",
        engine_url,
        "--listen",
        opts.listen,
        "--max-concurrency",
        str(plan.max_num_seqs),
        *mode,
        *opts.slo,
    ]
    if opts.admin_token_file:
        gateway += ["--admin-token-file", opts.admin_token_file]
    host, _, port = opts.listen.rpartition(":")
    return Commands(
        engine=engine,
        gateway=tuple(gateway),
        engine_url=engine_url,
        gateway_url=f"http://{host.strip('[]') or LOOPBACK}:{port}",
    )


def describe(plan: Plan, cmds: Commands) -> str:
    """The arithmetic and the commands, as `--dry-run` prints them and `serve` before starting."""
    kind = " --engine-kind vllm" if "--engine-kind" in cmds.gateway else ""
    return "\n".join(
        [
            *plan.lines,
            "",
            f"engine   {shlex.join(cmds.engine)}",
            f"gateway  {shlex.join(cmds.gateway)}",
            "         autopilot on (--autopilot: KV budget moved by vLLM's signals)",
            f"tui      llmtop top --vllm {cmds.engine_url} --gateway {cmds.gateway_url}{kind}",
        ]
    )


def _check_engine(cmds: Commands, opts: ServeOptions) -> None:
    if opts.engine_cmd is None and shutil.which(cmds.engine[0]) is None:
        raise UsageError(
            f"vLLM not found ({cmds.engine[0]}): install it"
            " (pip install 'llmtop-console[vllm]') "
            "or name its executable with --vllm-bin PATH"
        )


def serve(
    opts: ServeOptions,
    *,
    say: Callable[[str], None],
    tui: Callable[[Commands, Plan], int] | None = None,
) -> int:
    """Plan, print, and unless dry-run start the stack; return the exit code."""
    plan = plan_for(opts)
    cmds = commands_for(opts, plan, free_port())
    say(describe(plan, cmds))
    if opts.dry_run:
        return 0
    _check_engine(cmds, opts)
    host, _, port = opts.listen.rpartition(":")
    if not port.isdigit():
        raise UsageError(f"--listen {opts.listen!r}: expected HOST:PORT")
    check_free(host.strip("[]") or LOOPBACK, int(port))
    logs = Path(opts.log_dir or Path.home() / ".cache" / "llmtop" / "serve") / time.strftime(
        "%Y%m%d-%H%M%S"
    )
    stack = Stack()
    with term_is_interrupt():
        try:
            say(f"\nlogs in {logs}")
            engine = stack.start(
                "engine",
                cmds.engine,
                logs / "engine.log",
                cmds.engine_url + "/health",
                opts.ready_timeout_s,
            )
            say(f"engine  pid {engine.pid} ready on {cmds.engine_url}")
            gateway = stack.start(
                "gateway", cmds.gateway, logs / "gateway.log", cmds.gateway_url + "/healthz", 60.0
            )
            say(f"gateway pid {gateway.pid} ready on {cmds.gateway_url}")
            if opts.tui and tui is not None:
                return tui(cmds, plan)
            say("no TUI: Ctrl-C stops everything")
            return wait_headless(stack, say)
        except KeyboardInterrupt:
            return 130
        finally:
            stack.stop_all()
            say(
                "stopped: " + ", ".join(f"{c.name} (pid {c.pid})" for c in reversed(stack.children))
            )


def split_args(args: Sequence[str]) -> tuple[str, ...]:
    """The vLLM arguments, without a leading `--` separator."""
    rest = list(args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    return tuple(rest)
