"""What watching costs: llmtop's TUI against the monitors an on-call engineer would otherwise run.

Every monitor polls the same static server (the real 53 KB vLLM 0.32 /metrics capture,
tests/fixtures/metrics-load.txt, plus /v1/models, /health and /version; in its own process, so
its CPU is not counted) at a 1 s refresh, in tmux (a real 120x40 terminal: rendering and
terminal writes count). Runs are interleaved, monitor after monitor, round after round, so load
from other processes hits each alike. CPU = utime + stime of the monitor and its children
(/proc) over a window after a warm-up, as % of one core; the ratio to llmtop is per round, then
the median. Time to first frame = launch to the first screen showing the served model's data.

The peers come from PyPI into a separate venv (never the project's):

    python3 -m venv /work/bench-peers/venv
    /work/bench-peers/venv/bin/pip install vllmstat vllm-top
    python bench/bench_monitor.py [--seconds 30] [--rounds 3] [--peers /work/bench-peers/venv]

`--against PATH` (a checkout of another commit) adds that tree's llmtop as one more monitor
(PYTHONPATH at it), interleaved with this tree's round after round: one engine, side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "metrics-load.txt"
TICK = os.sysconf("SC_CLK_TCK")
SIZE = (120, 40)
MODELS = {
    "object": "list",
    "data": [{"id": "tinyllm", "object": "model", "owned_by": "vllm", "max_model_len": 2048}],
}


def serve(port: int) -> None:
    """Child process: the capture and the endpoints the monitors ask for, stdlib only."""
    routes = {
        "/metrics": (FIXTURE.read_bytes(), "text/plain; version=0.0.4; charset=utf-8"),
        "/v1/models": (json.dumps(MODELS).encode(), "application/json"),
        "/health": (b"", "text/plain"),
        "/version": (b'{"version": "0.32.0"}', "application/json"),
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body, ctype = routes.get(self.path.split("?")[0], (b"not found", "text/plain"))
            self.send_response(200 if self.path.split("?")[0] in routes else 404)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a monitor killed mid-request resets its connection; nothing to report

    server = Server(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


@dataclass(frozen=True)
class Monitor:
    name: str
    command: str
    marker: str
    """Text on screen once the first data frame is drawn."""
    version: str


def monitors(url: str, port: int, peers: Path, against: Path | None = None) -> list[Monitor]:
    trees = [("llmtop", ROOT)] + ([(f"llmtop at {against.name}", against)] if against else [])
    found = [
        Monitor(
            name,
            f"env PYTHONPATH={tree} {sys.executable} -m llmtop --vllm {url} --gateway off"
            " --interval-s 1",
            "tinyllm",
            version("llmtop", sys.executable),
        )
        for name, tree in trees
    ]
    bin_dir = peers / "bin"
    py = str(bin_dir / "python")
    if (bin_dir / "vllmstat").exists():
        found.append(
            Monitor(
                "vllmstat",
                f"{bin_dir / 'vllmstat'} -u {url} -i 1",
                "tinyllm",
                version("vllmstat", py),
            )
        )
    if (bin_dir / "vllm-top").exists():
        found.append(
            Monitor(
                "vllm-top",
                f"{bin_dir / 'vllm-top'} --host 127.0.0.1 --port {port} --interval 1",
                "Running Requests",
                version("vllm-top", py),
            )
        )
    return found


def version(dist: str, python: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def descendants(pid: int) -> list[int]:
    """pid and every live process below it."""
    out = [pid]
    for p in out:
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out.extend(int(k) for k in kids)
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid and its live descendants, plus their reaped children."""
    total = 0
    for p in descendants(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / TICK


def rss_mib(pid: int) -> float:
    total = 0
    for p in descendants(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


SOCKET = f"llmtop-bench-monitor-{os.getpid()}"
"""A tmux server of our own: others' `tmux kill-server` on the shared one cannot end a run."""


def tmux(*args: str) -> str:
    """Run tmux on our socket; retried briefly, since a server exiting with its last session
    refuses a new-session sent in that instant."""
    for attempt in range(5):
        done = subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True)
        if done.returncode == 0 or attempt == 4:
            break
        time.sleep(0.2)
    done.check_returncode()
    return done.stdout


class Died(Exception):
    """The monitor was gone at the end of the window: the run measures nothing."""


@dataclass(frozen=True)
class Run:
    first_paint_s: float
    first_frame_s: float
    cpu_pct: float
    rss_mib: float


def one_run(m: Monitor, seconds: float, warmup_s: float) -> Run:
    session = f"bench-mon-{os.getpid()}-{m.name}"
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", str(SIZE[0]), "-y", str(SIZE[1]),
         f"exec {m.command}")  # fmt: skip
    try:
        tmux("set-option", "-t", session, "remain-on-exit", "on")  # keep a crash's last words
        pid = int(tmux("list-panes", "-t", session, "-F", "#{pane_pid}").split()[0])
        paint = first = None
        while time.monotonic() - t0 < 30:
            screen = tmux("capture-pane", "-p", "-t", session)
            now = time.monotonic() - t0
            if paint is None and screen.strip():
                paint = now
            if m.marker in screen:
                first = now
                break
            time.sleep(0.02)
        if first is None or paint is None:
            raise SystemExit(f"{m.name} showed no data within 30 s; screen:\n{screen[-400:]}")
        time.sleep(warmup_s)
        c0, w0 = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = cpu_seconds(pid), time.monotonic()
        if not Path(f"/proc/{pid}").exists():
            last = tmux("capture-pane", "-p", "-t", session).strip()[-600:]
            raise Died(f"{m.name} exited during the measured window; its screen:\n{last}")
        return Run(paint, first, 100.0 * (c1 - c0) / (w1 - w0), rss_mib(pid))
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-session", "-t", session], capture_output=True)


def measure(m: Monitor, seconds: float, warmup_s: float, tries: int = 3) -> Run:
    """One run, again if the monitor died mid-window (said on stderr, never averaged in)."""
    for attempt in range(tries):
        try:
            return one_run(m, seconds, warmup_s)
        except Died as e:
            print(f"{e}; again ({attempt + 1}/{tries})", file=sys.stderr)
    raise SystemExit(f"{m.name} kept exiting during the measured window")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured window per run")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", type=Path, default=Path("/work/bench-peers/venv"))
    ap.add_argument("--against", type=Path, help="another tree's llmtop, side by side")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise SystemExit("the static server did not start")
        url = f"http://127.0.0.1:{port}"
        mons = monitors(url, port, args.peers, args.against and args.against.resolve())
        runs: dict[str, list[Run]] = {m.name: [] for m in mons}
        for r in range(args.rounds):
            order = mons[r % len(mons) :] + mons[: r % len(mons)]
            for m in order:
                runs[m.name].append(measure(m, args.seconds, args.warmup))
                print(f"round {r + 1} {m.name}: {runs[m.name][-1]}", file=sys.stderr)
        report(mons, runs, args)
    finally:
        server.terminate()
        server.wait(10)
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)
    return 0


def report(mons: list[Monitor], runs: dict[str, list[Run]], args: argparse.Namespace) -> None:
    base = runs["llmtop"]
    load = os.getloadavg()[0]
    kb = FIXTURE.stat().st_size / 1000
    print("### Monitor CPU at a 1 s refresh, against the peers (bench/bench_monitor.py)\n")
    print(
        f"Each monitor in tmux ({SIZE[0]}x{SIZE[1]}) polling the same static server (the real "
        f"{kb:.0f} KB vLLM 0.32 capture) once a second; {args.rounds} interleaved rounds of "
        f"{args.seconds:.0f} s after a {args.warmup:.0f} s warm-up; {os.cpu_count()} CPUs, "
        f"load average {load:.1f} at the end. Median (min-max); the ratio is per round, then "
        "the median. First paint: launch to the first non-blank screen; first data frame: to "
        "the first screen showing the served model's data (the first poll done and drawn).\n"
    )
    print(
        "| monitor | version | CPU, % of one core | x llmtop | first paint | first data frame"
        " | RSS |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in mons:
        rs = runs[m.name]
        cpu = [x.cpu_pct for x in rs]
        ratio = statistics.median(x.cpu_pct / b.cpu_pct for x, b in zip(rs, base, strict=True))
        ff = statistics.median(x.first_frame_s for x in rs)
        fp = statistics.median(x.first_paint_s for x in rs)
        rss = statistics.median(x.rss_mib for x in rs)
        print(
            f"| {m.name} | {m.version} | {statistics.median(cpu):.2f}% "
            f"({min(cpu):.2f}-{max(cpu):.2f}) | {ratio:.2f} | {fp:.2f} s | {ff:.2f} s |"
            f" {rss:.0f} MiB |"
        )
    print()
    for m in mons:
        print(f"- `{m.name}`: `{m.command}`")
    print()


if __name__ == "__main__":
    sys.exit(main())
