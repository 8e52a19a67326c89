"""For real: Debian's Prometheus loads `llmtop rules`, scrapes `llmtop sim` and `llmtop gateway`
every second and sends its alerts to Debian's Alertmanager, which posts them to a webhook here.

- The seed burst reaches a gateway at cap 2 in front of a healthy seed sim: the gateway's queue
  alert reaches the webhook with its annotations (the oldest age, the cap to raise it to with
  the KV arithmetic, the llmtop command) within scrape + evaluation + for: of the first request
  crossing the TTFT SLO (plus the notifiers' own second or two), and resolves after the cap is
  raised, within keep_firing_for of the queue draining.
- A sim with `--fault scheduler-stuck` and three requests waiting: its scheduler-stuck alert
  arrives once its threshold and for: have passed.

Binaries: found on PATH, else installed by .ci/install-system-tools; the test is skipped, naming
why, when they cannot be had. Bounded: ~60 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.http_ready import wait_ready
from harness.system_tools import system_binary
from llmtop.serve.stack import free_port
from tests.support.gateway_queue import Burst, Stack, load_command
from tests.support.prometheus import procs

__all__ = ["procs"]  # the fixture, used by name
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SCRAPE_S, EVAL_S, FOR_S, KEEP_S = 1.0, 1.0, 3.0, 10.0
NOTIFY_SLACK_S = 3.0
"""Prometheus' notifier and Alertmanager's dispatch between them add a second or two; a slow
shared box more."""
STUCK_AFTER_S = 5.0


class Hook:
    """A webhook receiver: every alert Alertmanager posts, with when it arrived."""

    def __init__(self) -> None:
        self.got: list[tuple[float, dict[str, Any]]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                for alert in body["alerts"]:
                    hook.got.append((time.time(), alert))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def first(self, name: str, status: str = "firing") -> tuple[float, dict[str, Any]] | None:
        for at, alert in self.got:
            if alert["labels"].get("alertname") == name and alert["status"] == status:
                return at, alert
        return None

    def wait(self, name: str, status: str, deadline_s: float) -> tuple[float, dict[str, Any]]:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            found = self.first(name, status)
            if found is not None:
                return found
            time.sleep(0.1)
        seen = sorted({(a["labels"]["alertname"], a["status"]) for _, a in self.got})
        raise AssertionError(f"no {status} {name} within {deadline_s:g} s; got {seen}")


def _start(args: list[str], procs: list[subprocess.Popen[str]]) -> None:
    procs.append(
        subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    )


def llmtop(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmtop", *args]


def _alertmanager(binary: str, hook: Hook, tmp: Path, procs: list[Any]) -> str:
    port = free_port()
    (tmp / "alertmanager.yml").write_text(
        "route:\n  receiver: hook\n  group_by: [alertname, instance]\n"
        "  group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\n"
        f"receivers:\n  - name: hook\n    webhook_configs:\n"
        f"      - url: {hook.url}\n        send_resolved: true\n"
    )
    _start(
        [
            binary,
            f"--config.file={tmp / 'alertmanager.yml'}",
            f"--storage.path={tmp / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip port on 0.0.0.0
        ],
        procs,
    )
    wait_ready(f"http://127.0.0.1:{port}/-/ready")
    return f"127.0.0.1:{port}"


def _prometheus(
    binary: str, rules: Path, am: str, jobs: dict[str, list[str]], tmp: Path, procs: list[Any]
) -> str:
    port = free_port()
    scrape = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: [{', '.join(targets)}]\n"
        for job, targets in jobs.items()
    )
    (tmp / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_S:g}s\n  evaluation_interval: {EVAL_S:g}s\n"
        f"rule_files: [{rules}]\n"
        f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [{am}]\n"
        f"scrape_configs:\n{scrape}"
    )
    _start(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        procs,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/-/ready")
    return url


def _until(what: str, check: Callable[[], bool], deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not within {deadline_s:g} s")


def _host(url: str) -> str:
    return url.removeprefix("http://")


def test_the_alerts_reach_alertmanager_and_resolve(
    tmp_path: Path, procs: list[subprocess.Popen[str]]
) -> None:
    prometheus = system_binary("prometheus")
    alertmanager = system_binary("prometheus-alertmanager")
    rules = tmp_path / "llmtop.rules.yml"
    env = {**os.environ, "LLMTOP_SCHEDULER_STUCK_AFTER_S": f"{STUCK_AFTER_S:g}"}
    made = subprocess.run(
        llmtop("rules", "--interval-s", f"{EVAL_S:g}", "--vllm-selector", '{job="vllm"}',
               "--gateway-selector", '{job="gateway"}', "--out", str(rules)),
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    hook = Hook()
    stuck_port = free_port()
    stuck = f"http://127.0.0.1:{stuck_port}"
    _start(
        llmtop("sim", "--profile", "fast", "--port", str(stuck_port), "--fault", "scheduler-stuck"),
        procs,
    )
    with Stack(("--profile", "seed"), ("--max-concurrency", "2")) as stack:
        wait_ready(stuck + "/health")
        am = _alertmanager(alertmanager, hook, tmp_path, procs)
        jobs = {"vllm": [_host(stack.sim_url), _host(stuck)], "gateway": [_host(stack.gateway_url)]}
        prom = _prometheus(prometheus, rules, am, jobs, tmp_path, procs)
        prom_proc = procs[-1]

        def all_up() -> bool:
            answer = httpx.get(f"{prom}/api/v1/query", params={"query": "sum(up)"}).json()
            result = answer["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) == 3

        _until("Prometheus scraping the three targets", all_up, 30)
        _start(
            llmtop("load", "--url", stuck, "--concurrency", "3", "--requests", "3",
                   "--prompt-tokens", "64", "--output-tokens", "16", "--duration-s", "90"),
            procs,
        )  # fmt: skip
        stuck_since = time.time()
        _start(load_command(stack.gateway_url, Burst(duration_s=90)), procs)
        onset: list[float] = []

        def queued() -> bool:
            stats = httpx.get(stack.gateway_url + "/admin/stats", timeout=5).json()
            if stats["queued"] and stats["oldest_queued_s"] is not None:
                onset.append(stats["time"] - stats["oldest_queued_s"])
            return bool(onset)

        _until("the burst queued in the gateway", queued, 30)
        crossed = onset[0] + 2.0  # the first request past the 2 s TTFT SLO
        bound = SCRAPE_S + EVAL_S + FOR_S + NOTIFY_SLACK_S
        at, alert = hook.wait("LlmtopGatewayQueueOverSlo", "firing", 60)
        took = at - crossed
        assert took <= bound, f"{took:.1f} s after the first late request (bound {bound:g} s)"
        labels, notes = alert["labels"], alert["annotations"]
        assert labels["finding"] == "gateway-queue-over-slo"
        assert labels["bottleneck"] == "gateway"
        assert labels["instance"] == _host(stack.gateway_url)
        assert "requests in its queue, the oldest waiting" in notes["summary"]
        assert "past the TTFT SLO (2s), at 2/2 in flight" in notes["summary"]
        assert "raise the cap from 2 to ~" in notes["action"], notes["action"]
        assert "press + or :cap" in notes["action"]
        assert f"--gateway {stack.gateway_url}" in notes["llmtop"]
        assert f"--vllm {stack.sim_url}" in notes["llmtop"]
        assert not any(httpx.get(stack.gateway_url + "/admin/stats").json()["rejections"].values())

        # the cap the action names, applied: the queue drains and the alert resolves
        httpx.patch(stack.gateway_url + "/admin/limits", json={"max_concurrency": 32}, timeout=5)
        _until(
            "the queue drained",
            lambda: not httpx.get(stack.gateway_url + "/admin/stats").json()["queued"],
            30,
        )
        drained = time.time()
        at, _ = hook.wait("LlmtopGatewayQueueOverSlo", "resolved", 60)
        assert at - drained <= KEEP_S + SCRAPE_S + EVAL_S + NOTIFY_SLACK_S, at - drained

        at, alert = hook.wait("LlmtopSchedulerStuck", "firing", 60)
        assert alert["labels"]["instance"] == _host(stuck)
        assert alert["labels"]["severity"] == "critical"
        assert at - stuck_since >= STUCK_AFTER_S
        assert "the scheduler admits nothing" in alert["annotations"]["summary"]
        assert alert["annotations"]["llmtop"] == f"llmtop --vllm {stuck}"
        prom_proc.terminate()  # Prometheus first: its targets stopping are no incident
    print({"queue alert after the first late request s": round(took, 1)})
    if os.environ.get("LLMTOP_ALERTS_DUMP"):  # what reached the webhook, for docs/alerts.md
        Path(os.environ["LLMTOP_ALERTS_DUMP"]).write_text(json.dumps(hook.got, indent=1))
