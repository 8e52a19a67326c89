"""The chaos run's processes: a real redis-server, two `llmtop sim` replicas, two `llmtop gateway`
processes sharing limits through Redis, and the TUI recording in a real terminal (tmux). Each
is on a fixed loopback port across its restarts, each run of a process logs to its own file, and
every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.http_ready import wait_ready
from harness.redis_server import RedisServer
from harness.terminal import Terminal, clean_env
from llmtop.serve.stack import free_port

GATEWAY_FLAGS = [
    "--max-concurrency", "8", "--max-queue", "48", "--queue-timeout-s", "4",
    "--trust-client-headers", "--eject-s", "1", "--lease-ttl-s", "2",
    "--replica-deadline-s", "2", "--drain-grace-s", "2", "--drain-timeout-s", "30",
]  # fmt: skip
"""The gateways' limits: a global cap of 8 over both, a bounded queue, the drain's grace
longer than the clients' readiness poll (0.25 s), so no client is refused a connection."""
MAX_BODY_BYTES = 65536
"""The gateways' max_body_bytes (env LLMTOP_MAX_BODY_BYTES): an oversized request is 70 KB."""


@dataclass
class Proc:
    """`llmtop ARGS` on a fixed port; each run logs to NAME-RUN.log under `logs`."""

    name: str
    args: list[str]
    port: int
    logs: Path
    env: dict[str, str]
    health: str
    run: int = -1
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def incarnation(self) -> str:
        return f"{self.name}#{self.run}"

    def log(self, run: int | None = None) -> Path:
        return self.logs / f"{self.name}-{self.run if run is None else run}.log"

    def start(self, timeout_s: float = 30.0) -> None:
        self.spawn()
        wait_ready(self.url + self.health, timeout_s)

    def spawn(self) -> None:
        """Start it, not waiting for it to answer."""
        self.run += 1
        with self.log().open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "llmtop", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        self.stopped = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        self.stopped = sig == signal.SIGSTOP

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 45.0, *, signalled: bool = False) -> int:
        """SIGTERM (unless `signalled` already: a second would cut its drain) and wait for the
        exit (its drain, for a gateway); its return code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            if not signalled:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def sockets_by_peer(self) -> dict[int, int]:
        """Its TCP connections by the remote port (0: listening), from /proc (Linux)."""
        inodes = []
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.append(target[8:-1])
        table: dict[str, int] = {}
        for name in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(name) as f:
                for line in f.readlines()[1:]:
                    parts = line.split()
                    table[parts[9]] = int(parts[2].rsplit(":", 1)[1], 16)
        out: dict[int, int] = {}
        for i in inodes:
            if i in table:
                out[table[i]] = out.get(table[i], 0) + 1
        return out

    def rss_kib(self) -> int:
        text = Path(f"/proc/{self.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
        return int(found.group(1)) if found else 0

    def stopped_counts(self, run: int) -> dict[str, object] | None:
        """The gateway's `stopped:` line of one run (None: it did not stop cleanly)."""
        text = self.log(run).read_text(errors="replace")
        found = re.search(r"^llmtop gateway: stopped: (\{.*\})$", text, re.M)
        return json.loads(found.group(1)) if found else None


@dataclass
class Stack:
    """Redis, the replicas, the gateways and the recording TUI of one chaos run."""

    out: Path
    redis: RedisServer = field(init=False)
    sims: list[Proc] = field(default_factory=list)
    gateways: list[Proc] = field(default_factory=list)
    terminal: Terminal | None = None
    recording: Path = field(init=False)

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.recording = self.out / "chaos.jsonl"
        env = clean_env(self.out, PYTHONUNBUFFERED="1")
        self.redis = RedisServer()
        for i in range(2):
            port = free_port()
            args = ["sim", "--profile", "fast", "--port", str(port)]
            self.sims.append(Proc(f"sim{i}", args, port, self.out, env, "/health"))
        gw_env = {**env, "LLMTOP_MAX_BODY_BYTES": str(MAX_BODY_BYTES)}
        for i in range(2):
            port = free_port()
            args = ["gateway", "--listen", f"127.0.0.1:{port}", "--redis", self.redis.url]
            for s in self.sims:
                args += ["--vllm", s.url]
            self.gateways.append(
                Proc(f"gw{i}", [*args, *GATEWAY_FLAGS], port, self.out, gw_env, "/readyz")
            )

    def start(self) -> None:
        self.redis.start()
        procs = [*self.sims, *self.gateways]
        for p in procs:
            p.spawn()
        for p in procs:
            wait_ready(p.url + p.health, 60)

    def stop_gateways(self) -> list[int]:
        """SIGTERM to every gateway at once; their exit codes once drained."""
        for g in self.gateways:
            g.signal(signal.SIGTERM)
        return [g.terminate(signalled=True) for g in self.gateways]

    def start_tui(self, tmux: str) -> None:
        """The console in a real 120x40 terminal, watching both replicas and the first
        gateway, recording every poll."""
        self.terminal = Terminal(tmux, (120, 40), self.out)
        args = [sys.executable, "-m", "llmtop"]
        for s in self.sims:
            args += ["--vllm", s.url]
        args += ["--gateway", self.gateways[0].url, "--record", str(self.recording)]
        self.terminal.start(args, clean_env(self.out))
        self.terminal.wait_for("fleet of 2 replicas, 2 up", "the TUI's first poll shown", 60)

    def stop_tui(self) -> int | None:
        """Quit the TUI with its key; its exit status (None: it did not exit)."""
        t = self.terminal
        if t is None:
            return None
        t.send("q")
        deadline = time.monotonic() + 20
        while t.exit_status() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return t.exit_status()

    def close(self) -> None:
        for p in [*self.gateways, *self.sims]:
            if p.proc is not None and p.proc.poll() is None:
                p.kill9()
        self.redis.kill()
        if self.terminal is not None:
            self.terminal.close()

    def logs(self) -> list[Path]:
        return sorted(self.out.glob("*.log"))
