"""A real terminal for the installed `llmtop`: tmux on a private server, one pane, keys sent in
one write per `send`, the screen read back with capture-pane; and the real sim and gateway as
processes on free loopback ports.

Everything waits on a condition with a deadline (`wait_for`), never on a fixed sleep. Each
terminal has its own tmux server (`-L`, a unique name) and each server process its own port
(bound to 0 by the server, read back from its first line), so tests can run in parallel.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

DEADLINE_S = 45.0
"""How long a condition may take: long enough for a first frame on a loaded machine, so that a
test fails only on a condition that does not come."""
POLL_S = 0.1


def llmtop_command() -> list[str]:
    """The installed console script, else this interpreter's `python -m llmtop`."""
    found = shutil.which("llmtop")
    return [found] if found else [sys.executable, "-m", "llmtop"]


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """This process's environment (PYTHONPATH included) without LLMTOP_* settings or NO_COLOR,
    a config home and a state home of its own (no config file of the user's; a gateway's
    history starts empty, not with an earlier run's on a reused port), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMTOP_") and k != "NO_COLOR"}
    for name, folder in (("XDG_CONFIG_HOME", "config"), ("XDG_STATE_HOME", "state")):
        (tmp / folder).mkdir(exist_ok=True)
        env[name] = str(tmp / folder)
    env.update(extra)
    return env


def wait_until(done: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    """`done()`'s first truthy value, polled until the deadline; else AssertionError(what)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = done()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(POLL_S)


class Process:
    """`llmtop ARGS` as a process of its own (its own process group, output to `log`),
    stopped with its group."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*llmtop_command(), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class Server(Process):
    """`llmtop sim` or `llmtop gateway` on the port it bound (it says which on its first line)."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        super().__init__(args, env, log)
        self.url = wait_until(self._url, f"{args[0]} said where it listens ({log})")

    def _url(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"exited {self.proc.returncode}: {self.log.read_text()}")
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", self.log.read_text(errors="replace"))
        return found.group(1) if found else None


def get_json(url: str) -> Any:
    """One GET on loopback, its JSON."""
    r = httpx.get(url, timeout=5.0)
    r.raise_for_status()
    return r.json()


def engine_waiting(sim_url: str) -> float:
    """vllm:num_requests_waiting, read from the sim's /metrics as a scraper would."""
    text = httpx.get(f"{sim_url}/metrics", timeout=5.0).text
    found = re.search(r"^vllm:num_requests_waiting(?:\{[^}]*\})? (\S+)$", text, re.M)
    assert found, "the sim exports vllm:num_requests_waiting"
    return float(found.group(1))


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(children.get(p, ()))
    return found


def alive(pids: Iterable[int]) -> set[int]:
    """Those of `pids` that still exist (and are not zombies)."""
    out = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


SGR = re.compile(r"\x1b\[([0-9;:]*)m")
GREY_BASIC = {0, 7, 8, 15}
"""Of the 16 basic colours: black, white and their bright forms."""


def _chromatic(code: list[int]) -> bool:
    """Whether one SGR colour (30-37, 90-97 and their backgrounds, 38;5;N, 38;2;R;G;B) has a
    hue; a grey does not."""
    kind = code[0]
    if kind in (38, 48) and code[1] == 2:
        return len(set(code[2:5])) > 1
    if kind in (38, 48):
        n = code[2]
        if n < 16:
            return n not in GREY_BASIC
        if n >= 232:
            return False  # the grey ramp
        n -= 16
        return len({n // 36, n // 6 % 6, n % 6}) > 1
    basic = kind % 10 + (8 if kind >= 90 else 0)
    return basic not in GREY_BASIC


def colours(screen_with_escapes: str) -> list[list[int]]:
    """The SGR colours (foreground or background) a captured screen uses."""
    found: list[list[int]] = []
    for params in SGR.findall(screen_with_escapes):
        parts = [int(p) for p in re.split(r"[;:]", params) if p]
        i = 0
        while i < len(parts):
            n = parts[i]
            if n in (38, 48) and i + 1 < len(parts):
                step = 3 if parts[i + 1] == 5 else 5
                found.append(parts[i : i + step])
                i += step
                continue
            if 30 <= n <= 37 or 40 <= n <= 47 or 90 <= n <= 97 or 100 <= n <= 107:
                found.append([n])
            i += 1
    return found


def hues(screen_with_escapes: str) -> list[list[int]]:
    """The colours with a hue (not black, white or a grey) a captured screen uses."""
    return [c for c in colours(screen_with_escapes) if _chromatic(c)]


class Terminal:
    """One tmux server of our own with one pane of `size`, running a command."""

    def __init__(self, tmux: str, size: tuple[int, int], tmp: Path) -> None:
        self.tmux = tmux
        self.size = size
        self.socket = f"llmtop-tty-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.conf = tmp / f"{self.socket}.conf"
        # status off: the pane is the whole window; remain-on-exit: the exit status stays
        self.conf.write_text("set -g status off\nset -g remain-on-exit on\n")
        self.status_file = tmp / f"{self.socket}.status"
        self.started = False

    def _run(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [self.tmux, "-L", self.socket, "-f", str(self.conf), *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, argv: Sequence[str], env: dict[str, str]) -> None:
        """Run `argv` in the pane with `env` (the new tmux server's, so the pane's, plus tmux's
        TERM), under a shell that writes its exit status to a file when it ends (tmux may
        leave it a zombie, its status unknown, for a long time)."""
        width, height = self.size
        record = '"$@"; echo $? > "$0"'
        command = "exec " + shlex.join(["sh", "-c", record, str(self.status_file), *argv])
        size = ("-x", str(width), "-y", str(height))
        self._run("new-session", "-d", "-s", "t", *size, command, env=env)
        self.started = True
        self.socket_path = self._run("display-message", "-p", "#{socket_path}").strip()
        shown = self._run("display-message", "-p", "-t", "t", "#{pane_width}x#{pane_height}")
        assert shown.strip() == f"{width}x{height}", shown

    def exit_status(self) -> int | None:
        """The command's exit status once it has ended, else None."""
        text = self.status_file.read_text().strip() if self.status_file.exists() else ""
        return int(text) if text else None

    def send(self, *keys: str) -> None:
        """One send-keys: tmux writes all of `keys` to the pane at once, as a paste or a fast
        typist delivers them (names like Enter and Escape are keys, the rest is text)."""
        self._run("send-keys", "-t", "t", "--", *keys)

    def paste(self, text: str, before: Sequence[str] = (), after: Sequence[str] = ()) -> None:
        """Paste `text` as tmux pastes (bracketed, since the TUI asks for it), with the keys
        `before` and `after` it, all in one tmux command: one write to the pane."""
        args: list[str] = ["set-buffer", "-b", "p", "--", text]
        if before:
            args += [";", "send-keys", "-t", "t", "--", *before]
        args += [";", "paste-buffer", "-p", "-d", "-b", "p", "-t", "t"]
        if after:
            args += [";", "send-keys", "-t", "t", "--", *after]
        self._run(*args)

    def screen(self, *, escapes: bool = False) -> str:
        """What the pane shows now (with its SGR attributes when `escapes`)."""
        return self._run("capture-pane", "-p", "-t", "t", *(["-e"] if escapes else []))

    def wait_for(
        self, shows: Callable[[str], bool] | str, what: str = "", timeout_s: float = DEADLINE_S
    ) -> str:
        """The screen once it `shows` (a text or a test of the screen); else AssertionError
        with the last screen."""
        test = (lambda s: shows in s) if isinstance(shows, str) else shows
        last = [""]

        def check() -> str | None:
            last[0] = self.screen()
            return last[0] if test(last[0]) else None

        try:
            return str(wait_until(check, what or repr(shows), timeout_s))
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{last[0]}") from None

    def pane_pid(self) -> int:
        """The pid of the pane's process (the shell that runs the command)."""
        return int(self._run("display-message", "-p", "-t", "t", "#{pane_pid}").strip())

    def close(self) -> None:
        """Kill our tmux server and remove its socket (kill-server leaves the file behind)."""
        if self.started:
            self._run("kill-server", check=False)
            Path(self.socket_path).unlink(missing_ok=True)


def terminals(tmux: str, tmp: Path) -> Iterator[Callable[[tuple[int, int]], Terminal]]:
    """A maker of terminals, every one killed at the end."""
    made: list[Terminal] = []

    def make(size: tuple[int, int]) -> Terminal:
        t = Terminal(tmux, size, tmp)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()
