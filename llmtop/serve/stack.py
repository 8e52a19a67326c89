"""`llmtop serve`'s processes: the engine and the gateway, each in a new session (its own process
group), so the terminal's Ctrl-C reaches only llmtop, which stops them in order, gateway then
engine: INT to the whole group (vLLM's EngineCore and workers are in it), KILL after a grace to
what is left. On Linux a child also gets SIGTERM if llmtop dies (PR_SET_PDEATHSIG), so no orphan
holds the GPU. Children's output goes to log files: the TUI owns the terminal."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from llmtop.errors import ServeError

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port free on `host` right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_free(host: str, port: int) -> None:
    """ServeError when host:port is taken: a server already there could pass for ours."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def _child_setup() -> None:
    """In the child before exec: SIGINT at its default, since `stop` sends it and an ignored
    signal stays ignored across exec (a shell's background job inherits SIGINT ignored);
    SIGTERM when the parent dies (Linux prctl; else nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if sys.platform != "linux":
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """A started server: its name, command, process (the leader of its group) and log."""

    name: str
    argv: tuple[str, ...]
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of its log, to say why it did not start."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])


def spawn(name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> Child:
    """Start `argv` in its own session, output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_child_setup,
                env=env,
            )
        except OSError as e:
            raise ServeError(f"could not start the {name} ({argv[0]}): {e}") from None
    return Child(name, tuple(argv), log, proc)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(child: Child, grace_s: float = 15.0) -> None:
    """INT its process group (a person stopped the stack: the gateway skips the readiness grace
    a load balancer needs and drains what is in flight), KILL what is left after `grace_s`; reap
    the leader."""
    pgid = child.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if child.proc.poll() is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.proc.wait(timeout=5.0)


def wait_ready(child: Child, url: str, timeout_s: float) -> None:
    """Poll `url` until it answers 200; ServeError (with the log's tail) if the child exits
    or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = child.proc.poll()
        if code is not None:
            raise ServeError(
                f"the {child.name} exited with code {code} before it was ready "
                f"(log {child.log}):\n{child.log_tail()}"
            )
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=2.0) as r,
        ):
            if r.status == 200:
                return
        if time.monotonic() > deadline:
            raise ServeError(
                f"the {child.name} did not answer {url} within {timeout_s:.0f} s "
                f"(log {child.log}):\n{child.log_tail()}"
            )
        time.sleep(0.25)


@dataclass
class Stack:
    """The started children, stopped in reverse order of starting."""

    children: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        ready_url: str,
        timeout_s: float,
        env: dict[str, str] | None = None,
    ) -> Child:
        child = spawn(name, argv, log, env)
        self.children.append(child)
        wait_ready(child, ready_url, timeout_s)
        return child

    def exited(self) -> Child | None:
        """The first child that has exited, if any."""
        return next((c for c in self.children if c.proc.poll() is not None), None)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            stop(child)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def term_is_interrupt() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP stop the stack (the `finally` runs). SIGINT too because a
    process that starts with it ignored (a shell's background job: `llmtop serve ... &`) gets
    no KeyboardInterrupt handler from Python, and would ignore Ctrl-C and `kill -INT`."""
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, _raise_interrupt) for s in stops}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def wait_headless(stack: Stack, say: Callable[[str], None], poll_s: float = 0.5) -> int:
    """Without the TUI: wait for Ctrl-C (0) or for a child to exit on its own (1)."""
    try:
        while True:
            gone = stack.exited()
            if gone is not None:
                say(
                    f"the {gone.name} exited with code {gone.proc.returncode} "
                    f"(log {gone.log}):\n{gone.log_tail()}"
                )
                return 1
            time.sleep(poll_s)
    except KeyboardInterrupt:
        return 0
