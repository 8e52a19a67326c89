"""Kubernetes discovery over real HTTP: an emulated API server (tests/support/kube_api.py) over
HTTPS with a CA and a bearer token from a kubeconfig, and over plain HTTP as `kubectl proxy`
serves it; pods that appear, become Ready, restart (OOMKilled) and leave; a 403; a watch that
drops and resumes; 410 Gone; the pod proxy serving a real `llmtop sim`'s /metrics to
`llmtop snapshot`; and 500 pods with one list and one watch."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main
from llmtop.errors import ConfigError, KubeError
from llmtop.sources.kube.discovery import PodDiscovery
from tests.support.kube_api import LEFTOVER_SOCKETS, KubeEmulator, Obj, in_cluster, pod, until

SELECTOR = "app=vllm"
NEEDS = "the console needs pods get/list/watch and pods/proxy get"

pytestmark = LEFTOVER_SOCKETS


@pytest.fixture(autouse=True)
def no_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """These engines are simulated: a real GPU on the test machine is not theirs."""
    monkeypatch.setenv("LLMTOP_NVML", "false")
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.fixture
def emulator() -> Iterator[Callable[..., KubeEmulator]]:
    started: list[KubeEmulator] = []

    def start(**kwargs: Any) -> KubeEmulator:
        emu = KubeEmulator(**kwargs).start()
        started.append(emu)
        return emu

    yield start
    for emu in started:
        emu.stop()


@pytest.fixture
def api_server(emulator: Callable[..., KubeEmulator], tmp_path: Path) -> tuple[KubeEmulator, Path]:
    """An API server as a cluster serves it: HTTPS with its own CA, a bearer token."""
    emu = emulator(tls=trustme.CA(), token="s3cret-token")
    return emu, emu.write_kubeconfig(tmp_path / "kubeconfig")


def discovery(kubeconfig: Path, **kwargs: Any) -> PodDiscovery:
    return PodDiscovery(SELECTOR, kubeconfig=str(kubeconfig), retry_s=0.05, **kwargs)


async def test_pods_come_become_ready_restart_and_leave_over_https(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pod("vllm-0", ip="10.0.0.10", ports=[{"name": "http", "containerPort": 8080}]))
    emu.put(pod("other", labels={"app": "redis"}))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        assert pods.namespace == "llm"  # the context's namespace
        assert [t.name for t in pods.targets()] == ["vllm-0"]
        (target,) = pods.targets()
        assert target.url == f"{emu.url}/api/v1/namespaces/llm/pods/vllm-0:8080/proxy"

        emu.put(pod("vllm-1", ready=False, node="node-b"))
        await until(lambda: "llm/vllm-1" in pods.pods, "vllm-1 listed")
        assert [t.name for t in pods.targets()] == ["vllm-0"]  # not Ready: not scraped
        emu.put(pod("vllm-1", ready=True, node="node-b"))
        await until(lambda: len(pods.targets()) == 2, "vllm-1 Ready")

        emu.put(pod("vllm-1", node="node-b", restarts=1, last_reason="OOMKilled"))
        await until(lambda: pods.pods["llm/vllm-1"].restarts == 1, "the restart")
        emu.delete("llm", "vllm-0")
        await until(lambda: "llm/vllm-0" not in pods.pods, "vllm-0 gone")
        assert [t.name for t in pods.targets()] == ["vllm-1"]

        events = [(e.kind, e.pod) for e in pods.events()]
        assert events == [
            ("pod-added", "llm/vllm-1"),
            ("pod-restarted", "llm/vllm-1"),
            ("pod-deleted", "llm/vllm-0"),
        ]
        assert pods.status() is None
    finally:
        await pods.aclose()
    assert (emu.count("list"), emu.count("watch")) == (1, 1)
    assert {s.authorization for s in emu.seen} == {"Bearer s3cret-token"}


async def test_restart_event_names_oomkilled_and_the_node(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pod("vllm-0", node="gpu-7"))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        emu.put(pod("vllm-0", node="gpu-7", restarts=2, last_reason="OOMKilled"))
        await until(lambda: pods.pods["llm/vllm-0"].restarts == 2, "the restart")
        (event,) = pods.events()
        assert event.kind == "pod-restarted"
        assert "OOMKilled" in event.summary
        assert "gpu-7" in event.summary
        assert (
            event.summary
            == "pod llm/vllm-0 restarted 2 times (OOMKilled) on gpu-7; 2 restarts in all"
        )
    finally:
        await pods.aclose()


async def test_plain_http_as_kubectl_proxy_serves_it(
    emulator: Callable[..., KubeEmulator], tmp_path: Path
) -> None:
    emu = emulator()
    emu.put(pod("vllm-0", annotations={"prometheus.io/port": "9400"}))
    emu.put(pod("vllm-9", namespace="batch"))
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    pods = discovery(kubeconfig, namespace="all")
    await pods.start()
    try:
        assert pods.namespace is None
        urls = {t.name: t.url for t in pods.targets()}
        assert urls == {
            "batch/vllm-9": f"{emu.url}/api/v1/namespaces/batch/pods/vllm-9:8000/proxy",
            "llm/vllm-0": f"{emu.url}/api/v1/namespaces/llm/pods/vllm-0:9400/proxy",
        }
    finally:
        await pods.aclose()
    assert emu.seen[0].path == "/api/v1/pods"
    assert emu.seen[0].authorization is None


async def test_a_403_names_the_verb_and_what_the_console_needs(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.forbid.add("list")
    pods = discovery(kubeconfig)
    with pytest.raises(KubeError) as e:
        await pods.start()
    assert e.value.status == 403
    assert str(e.value).startswith("forbidden: cannot list pods in namespace llm")
    assert NEEDS in str(e.value)


async def test_a_watch_that_drops_resumes_from_its_resource_version(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pod("vllm-0"))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        await until(lambda: emu.open_watches() == 1, "the watch")
        emu.put(pod("vllm-1"))
        await until(lambda: "llm/vllm-1" in pods.pods, "vllm-1")
        last = pods.pods  # the version the client saw last is vllm-1's
        emu.drop_watches()
        await until(lambda: emu.count("watch") == 2 and emu.open_watches() == 1, "a new watch")
        first, second = [s for s in emu.seen if s.kind == "watch"]
        assert int(second.query["resourceVersion"]) > int(first.query["resourceVersion"])
        emu.put(pod("vllm-2"))
        await until(lambda: "llm/vllm-2" in pods.pods, "vllm-2 after the resume")
        assert set(last) <= set(pods.pods)
    finally:
        await pods.aclose()
    assert emu.count("list") == 1  # resumed, not listed again
    kinds = [e.kind for e in pods.events()]
    assert kinds == ["pod-added", "pod-added"]  # vllm-1 and vllm-2, each once


@pytest.mark.parametrize("as_status", [False, True], ids=["error-event", "http-410"])
async def test_410_gone_lists_again_and_sees_what_changed_meanwhile(
    api_server: tuple[KubeEmulator, Path], as_status: bool
) -> None:
    emu, kubeconfig = api_server
    emu.gone_as_status = as_status
    emu.put(pod("vllm-0"))
    emu.put(pod("vllm-1"))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        await until(lambda: emu.open_watches() == 1, "the watch")
        # while the watch is away: vllm-0 leaves, vllm-2 comes, vllm-1 is OOMKilled; the
        # history of it is compacted, so resuming is 410 Gone
        emu.delete("llm", "vllm-0", publish=False)
        emu.put(pod("vllm-2"), publish=False)
        emu.put(pod("vllm-1", restarts=1, last_reason="OOMKilled"), publish=False)
        emu.drop_watches(compact=True)
        await until(lambda: emu.count("list") == 2, "the second list")
        await until(lambda: set(pods.pods) == {"llm/vllm-1", "llm/vllm-2"}, "the relisted pods")
        await until(lambda: emu.open_watches() == 1, "the watch after the list")
    finally:
        await pods.aclose()
    events = sorted((e.kind, e.pod) for e in pods.events())
    assert events == [
        ("pod-added", "llm/vllm-2"),
        ("pod-deleted", "llm/vllm-0"),
        ("pod-restarted", "llm/vllm-1"),
    ]


async def test_while_the_api_is_away_the_last_pods_stay_with_their_age(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pod("vllm-0"))
    emu.put(pod("vllm-1"))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        await until(lambda: emu.open_watches() == 1, "the watch")
        emu.stop()
        await until(lambda: pods.status() is not None, "the API seen away")
        status = pods.status()
        assert status is not None
        assert "showing the 2 pods known" in status
        assert " s ago" in status
        assert len(pods.targets()) == 2
    finally:
        await pods.aclose()


async def test_a_refused_reconnect_is_the_api_away_and_its_return_is_said(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pod("vllm-0"))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        await until(lambda: emu.open_watches() == 1, "the watch")
        emu.forbid.add("watch")  # e.g. a RoleBinding removed: the next watch is refused
        emu.drop_watches()
        await until(lambda: pods.error is not None, "the refusal")
        assert pods.error is not None
        assert pods.error.startswith("forbidden: cannot watch pods in namespace llm")
        emu.forbid.clear()
        await until(lambda: pods.error is None, "the API back")
    finally:
        await pods.aclose()
    away, back = pods.events()
    assert (away.kind, back.kind) == ("api-away", "api-back")
    assert away.summary.startswith("Kubernetes API away: forbidden: cannot watch pods")
    assert away.summary.endswith("still reading the 1 pods known")
    assert back.summary.startswith("Kubernetes API back after ")
    assert emu.count("list") == 1


async def test_pods_and_their_events_reach_the_fleet_rows_and_the_log(
    api_server: tuple[KubeEmulator, Path], fixtures_dir: Path
) -> None:
    """The TUI reads the fleet: its rows (tui.view.replicas) and its log (present.diff_events)."""
    from llmtop.core.base.snapshot import PodRef
    from llmtop.settings import HealthSettings, MonitorSettings
    from llmtop.sources.fleet_collector import FleetCollector
    from llmtop.tui.view.present import diff_events
    from llmtop.tui.view.replicas import fleet_of, row

    emu, kubeconfig = api_server
    emu.metrics_body = (fixtures_dir / "metrics-load.txt").read_bytes()
    emu.put(pod("vllm-0"))
    monitor = MonitorSettings(
        gateway_url=None, nvml=False, k8s_selector=SELECTOR, kubeconfig=str(kubeconfig)
    )
    collector = FleetCollector(monitor, HealthSettings())
    try:
        first = await collector.poll()
        assert [e.url.rsplit("/pods/", 1)[1] for e in first.engines] == ["vllm-0:8000/proxy"]
        emu.put(pod("vllm-1", node="gpu-3"))
        emu.put(pod("vllm-0", restarts=1, last_reason="OOMKilled"))
        pods = collector.pods
        assert pods is not None
        await until(lambda: "llm/vllm-1" in pods.pods, "vllm-1")
        await until(lambda: pods.pods["llm/vllm-0"].restarts == 1, "the restart")
        second = await collector.poll()
        third = await collector.poll()
    finally:
        await collector.aclose()
    logged = [e.text for e in diff_events(first, second)]
    assert "pod llm/vllm-1 appeared on gpu-3" in logged
    assert "pod llm/vllm-0 restarted (OOMKilled) on node-a; 1 restart in all" in logged
    assert not [e.text for e in diff_events(second, third) if e.text.startswith("pod ")]
    assert len(third.engines) == 2
    fleet = fleet_of(third)
    assert fleet is not None
    cells = {r.name: row(r).cells[-1] for r in fleet.replicas}  # the finding column
    assert cells["vllm-0"].endswith("node-a, 1 restart (OOMKilled)")
    assert cells["vllm-1"].endswith("gpu-3")
    refs = {r.name: r.pod for r in fleet.replicas}
    assert refs["vllm-0"] == PodRef("llm", "vllm-0", "node-a", 1, "OOMKilled")


async def test_kubeconfig_mistakes_and_refused_logins_are_one_line(
    api_server: tuple[KubeEmulator, Path], tmp_path: Path
) -> None:
    emu, kubeconfig = api_server
    with pytest.raises(ConfigError, match="has no context 'prod' \\(it has: emulated\\)"):
        await discovery(kubeconfig, context="prod").start()
    with pytest.raises(ConfigError, match="no kubeconfig at"):
        await discovery(tmp_path / "missing").start()
    wrong = emu.write_kubeconfig(tmp_path / "wrong-token", token="expired")
    with pytest.raises(KubeError, match="refused the credentials \\(401 Unauthorized\\)"):
        await discovery(wrong).start()
    garbled = tmp_path / "garbled"
    garbled.write_text("{{{ not yaml", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not a kubeconfig llmtop can read: while parsing"):
        await discovery(garbled).start()
    login = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                      "args": ["-c", "echo 'run: aws sso login' >&2; exit 1"]}}  # fmt: skip
    expired = emu.write_kubeconfig(tmp_path / "sso", user=login)
    with pytest.raises(KubeError, match=r"its exec plugin failed: .*run: aws sso login"):
        await discovery(expired).start()


EXEC_PLUGIN = """
import datetime, json, sys
token = open(sys.argv[1]).read().strip()
with open(sys.argv[2], "a") as runs:
    runs.write("x")
status = {"token": token}
if len(sys.argv) > 3:
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(sys.argv[3]))
    status["expirationTimestamp"] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential", "status": status}))
"""


def exec_user(tmp_path: Path, *expiry_s: str) -> tuple[Obj, Path, Path]:
    """A kubeconfig user whose token comes from an exec plugin (as aws/gke/kubelogin do): it
    prints the token file's token, and counts its runs in another file."""
    plugin, token, runs = tmp_path / "plugin.py", tmp_path / "token", tmp_path / "runs"
    plugin.write_text(EXEC_PLUGIN, encoding="utf-8")
    token.write_text("t1", encoding="utf-8")
    runs.write_text("", encoding="utf-8")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                     "command": sys.executable, "args": [str(plugin), str(token), str(runs),
                                                         *expiry_s]}}  # fmt: skip
    return user, token, runs


async def test_an_exec_plugin_runs_again_after_a_401(
    emulator: Callable[..., KubeEmulator], tmp_path: Path
) -> None:
    emu = emulator(tls=trustme.CA(), token="t1")
    emu.put(pod("vllm-0"))
    user, token, runs = exec_user(tmp_path)
    pods = discovery(emu.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    await pods.start()
    try:
        await until(lambda: emu.open_watches() == 1, "the watch")
        assert runs.read_text() == "x"  # no expiry given: the credential holds
        emu.token = "t2"  # the identity provider rotated it: the old one now gets 401
        token.write_text("t2", encoding="utf-8")
        emu.drop_watches()
        await until(lambda: emu.open_watches() == 1 and pods.error is None, "the watch back")
    finally:
        await pods.aclose()
    assert runs.read_text() == "xx"
    assert [s.authorization for s in emu.seen if s.kind == "watch"][-1] == "Bearer t2"
    assert emu.count("list") == 1


async def test_an_exec_credential_about_to_expire_is_fetched_again(
    emulator: Callable[..., KubeEmulator], tmp_path: Path
) -> None:
    emu = emulator(tls=trustme.CA(), token="t1")
    user, token, runs = exec_user(tmp_path, "30")  # expires in 30 s: within the minute
    pods = discovery(emu.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    await pods.start()
    try:
        assert pods.api is not None
        token.write_text("t2", encoding="utf-8")
        assert await pods.api.auth_headers() == {"Authorization": "Bearer t2"}
    finally:
        await pods.aclose()
    assert len(runs.read_text()) >= 2


def test_inside_the_cluster_the_service_account_and_pod_ips(
    emulator: Callable[..., KubeEmulator],
    start_sim: Callable[..., ServerThread],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No kubeconfig, in a pod: the service account's token, CA and namespace; each pod read
    at its IP (here loopback and the sim's port, by its annotation), not through the proxy."""
    ca = trustme.CA()
    emu = emulator(tls=ca, token="sa-token")
    sim = start_sim(model_name="in-cluster")
    port = sim.url.rsplit(":", 1)[1]
    emu.put(pod("vllm-0", ip="127.0.0.1", annotations={"prometheus.io/port": port}))
    in_cluster(monkeypatch, tmp_path, ca, emu.port)
    code, out, err = snapshot_cli(capsys, "--json", "--window-s", "2")
    assert err == ""
    (row,) = json.loads(out)["fleet"]["replicas"]
    assert (row["name"], row["model"], row["key"]) == ("vllm-0", "in-cluster", sim.url)
    assert code == 0
    assert (emu.count("list"), emu.count("proxy")) == (1, 0)
    assert {s.authorization for s in emu.seen} == {"Bearer sa-token"}


def snapshot_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["snapshot", "--gateway", "off", "--k8s-selector", SELECTOR, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_snapshot_reads_a_real_sim_through_the_pod_proxy(
    api_server: tuple[KubeEmulator, Path],
    start_sim: Callable[..., ServerThread],
    capsys: pytest.CaptureFixture[str],
) -> None:
    emu, kubeconfig = api_server
    sims = {"vllm-0": start_sim(model_name="emulated-0"), "vllm-1": start_sim(model_name="kv-1")}
    for i, (name, sim) in enumerate(sims.items()):
        emu.put(pod(name, node=f"gpu-{i}", restarts=i, last_reason="OOMKilled" if i else None))
        emu.backends[f"llm/{name}"] = sim.url
    emu.put(pod("vllm-starting", ready=False))
    code, out, err = snapshot_cli(
        capsys, "--kubeconfig", str(kubeconfig), "--json", "--window-s", "2"
    )
    assert err == ""
    doc = json.loads(out)
    assert code == 0, doc["status"]
    rows = {r["name"]: r for r in doc["fleet"]["replicas"]}
    assert set(rows) == {"vllm-0", "vllm-1"}
    assert rows["vllm-0"]["model"] == "emulated-0"
    assert rows["vllm-1"]["model"] == "kv-1"
    assert rows["vllm-0"]["kv_capacity_tokens"] > 0
    assert rows["vllm-1"]["pod"] == {
        "namespace": "llm", "name": "vllm-1", "node": "gpu-1", "restarts": 1,
        "last_reason": "OOMKilled",
    }  # fmt: skip
    kube = doc["fleet"]["kubernetes"]
    assert kube["requests"] == {"list": 1, "watch": 1}
    assert (kube["pods"], kube["serving"], kube["error"]) == (3, 2, None)
    proxied = [s for s in emu.seen if s.kind == "proxy"]
    assert proxied
    assert {s.authorization for s in proxied} == {"Bearer s3cret-token"}
    assert {s.path.split("/proxy/")[1] for s in proxied} == {"metrics", "metrics/"}
    assert rows["vllm-0"]["scrape"] == "narrow"  # the query passes through the pod proxy


def test_snapshot_says_the_403_in_one_line(
    api_server: tuple[KubeEmulator, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    emu, kubeconfig = api_server
    emu.forbid.add("list")
    code, out, err = snapshot_cli(capsys, "--kubeconfig", str(kubeconfig))
    assert (code, out) == (3, "")
    assert err.count("\n") == 1
    assert err.startswith("llmtop: forbidden: cannot list pods in namespace llm")
    assert NEEDS in err


def test_the_tui_stops_before_its_screen_on_a_403(
    api_server: tuple[KubeEmulator, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    emu, kubeconfig = api_server
    emu.forbid.add("list")
    code = main(["--gateway", "off", "--k8s-selector", SELECTOR, "--kubeconfig", str(kubeconfig)])
    out, err = capsys.readouterr()
    assert (code, out) == (3, "")
    assert err.startswith("llmtop: forbidden: cannot list pods in namespace llm")
    assert err.count("\n") == 1


def test_snapshot_wrong_context_and_unreachable_api_are_one_line(
    api_server: tuple[KubeEmulator, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    emu, kubeconfig = api_server
    code, _, err = snapshot_cli(capsys, "--kubeconfig", str(kubeconfig), "--k8s-context", "x")
    assert code == 64
    assert err == f"llmtop: kubeconfig {kubeconfig} has no context 'x' (it has: emulated)\n"
    emu.stop()
    code, _, err = snapshot_cli(capsys, "--kubeconfig", str(kubeconfig))
    assert code == 3
    assert err.count("\n") == 1
    assert err.startswith(f"llmtop: cannot reach the Kubernetes API at {emu.url}")


async def test_500_pods_one_list_one_watch(
    emulator: Callable[..., KubeEmulator], tmp_path: Path
) -> None:
    emu = emulator(tls=trustme.CA(), token="t")
    for i in range(500):
        emu.put(pod(f"vllm-{i:03d}", ip=f"10.1.{i // 250}.{i % 250}"))
    pods = discovery(emu.write_kubeconfig(tmp_path / "kubeconfig"))
    await pods.start()
    try:
        assert len(pods.targets()) == 500
        for i in range(0, 500, 10):  # 50 restarts, 10 leave, 10 come
            emu.put(pod(f"vllm-{i:03d}", restarts=1, last_reason="OOMKilled"))
        for i in range(10):
            emu.delete("llm", f"vllm-{i * 7 + 1:03d}")
            emu.put(pod(f"vllm-new-{i}"))
        await until(lambda: "llm/vllm-new-9" in pods.pods, "the last new pod")
        assert len(pods.targets()) == 500
        kinds = [e.kind for e in pods.events()]
        assert (kinds.count("pod-restarted"), kinds.count("pod-deleted")) == (50, 10)
        assert kinds.count("pod-added") == 10
    finally:
        await pods.aclose()
    assert (emu.count("list"), emu.count("watch")) == (1, 1)


def test_pods_pure_ports_serving_and_proxy_names() -> None:
    """Pure: which port a pod's metrics are read on, what is a pod to scrape, and the name of
    a pod-proxy URL (a replayed recording has no names but the URLs)."""
    from llmtop.core.pipeline.pods import metrics_port, read_pod

    named = [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]
    assert metrics_port(pod("a", ports=named)) == 9090
    assert metrics_port(pod("a", ports=named[:1])) == 8080
    assert metrics_port(pod("a", ports=named, annotations={"prometheus.io/port": "7000"})) == 7000
    assert metrics_port(pod("a", annotations={"prometheus.io/port": "x"})) == 8000
    assert metrics_port(pod("a")) == 8000
    assert read_pod(pod("a")).serving
    assert not read_pod(pod("a", ready=False)).serving
    assert not read_pod(pod("a", phase="Pending")).serving
    gone = pod("a")
    gone["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    assert not read_pod(gone).serving
    with pytest.raises(ValueError, match=r"without metadata\.name"):
        read_pod({"metadata": {}})
    from llmtop.core.pipeline.targets import default_name

    proxied = "https://10.0.0.1:6443/api/v1/namespaces/llm/pods/vllm-0:8000/proxy"
    assert default_name(proxied) == default_name(proxied + "/metrics") == "vllm-0"
    assert default_name("http://10.0.0.7:8000") == "10.0.0.7:8000"
