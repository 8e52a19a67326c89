"""vLLM's own benchmark as the judge: `vllm bench serve` (from the real-vLLM venv) at 0.7x, 1.3x,
2x and 3x the engine's capacity, straight to the engine, through `llmtop gateway` at its
defaults and through `llmtop gateway --autopilot`; on the real vLLM, on `llmtop sim` calibrated
to it, or both (to see whether the sim orders the three arms as the real engine does).

    python bench/bench_vllm_serve.py [--engine real|sim|both] [--repeats 1] [--out DIR]

Per engine: start it (real: `scripts/real-vllm serve`; sim: `llmtop sim --profile FIT.json`),
measure its capacity (completed requests/s of a closed loop at 2x max_num_seqs, the warm-up and
the drain left out), then for each load and arm start a fresh gateway (its own process group),
wait for the engine to be idle, and run `vllm bench serve` (Poisson, random dataset, the same
seed for the three arms of a load, `--goodput ttft:SLO tpot:SLO`, `--save-result`). The arms'
order rotates from load to load. The sim's profile is fitted from the real engine's /metrics by
`llmtop whatif` during the real capacity run (whatif/model/calibrate.py), written as a profile
JSON. Bounded: every run has a timeout, the whole a `--budget-min`; every process group this
starts is ended on exit, Ctrl-C or failure. Results: vllm bench's JSON per run and summary.json
in DIR (default ~/.cache/llmtop/bench-vllm-serve/<UTC time>).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmtop.sim.profiles import get_profile  # noqa: E402
from llmtop.whatif.model.calibrate import StepFit, synthetic_profile  # noqa: E402

REAL_DIR = Path(os.environ.get("LLMTOP_REAL_VLLM_DIR", Path.home() / ".cache/llmtop/real-vllm"))
VLLM = REAL_DIR / "venv/bin/vllm"
MODEL_DIR = REAL_DIR / "model"
SERVED = "tinyllm"
MAX_SEQS, BATCHED, BLOCKS, BLOCK, MODEL_LEN = 8, 2048, 32, 128, 2048
"""scripts/real-vllm's engine: the sim gets the same limits."""
ARMS = ("straight", "defaults", "autopilot", "autopilot-before")
"""autopilot-before: the autopilot of another tree (--before-tree), side by side in one run."""
BEFORE_TREE: list[Path] = []
OLD_FLAG: list[bool] = []
"""[True]: the before tree's gateway takes `--upstream` (before the rename to `--vllm`)."""
TIE = 0.05
"""Arms whose goodput per offered request is within this are tied in the ordering."""
_groups: list[subprocess.Popen[bytes]] = []
"""Every process group started here, ended by `stop_all`."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(cmd: list[str], log: Path, tree: Path = ROOT) -> subprocess.Popen[bytes]:
    """A child in its own process group (so it and its children can be ended together), run
    from `tree`'s llmtop: in `tree` too, since `python -m` puts the working directory ahead of
    PYTHONPATH (from this repository's root a before arm ran this tree's llmtop)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with log.open("ab") as f:
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=tree, start_new_session=True
        )
    _groups.append(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """TERM the group, KILL it after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # stragglers of the group
        os.killpg(proc.pid, signal.SIGKILL)
    if proc in _groups:
        _groups.remove(proc)


def stop_all() -> None:
    for proc in list(_groups):
        stop(proc, 5.0)


def wait_for(what: str, check: Any, timeout_s: float, proc: subprocess.Popen[bytes] | None) -> Any:
    """Poll `check()` until it returns something truthy; fail if `proc` dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited ({proc.returncode})")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if got := check():
                return got
        time.sleep(0.5)
    raise RuntimeError(f"{what}: not ready after {timeout_s:.0f} s")


def counters(url: str) -> dict[str, float]:
    """The engine's vllm:* samples, summed over labels (counters keep `_total`)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("vllm:") and not s.name.endswith(("_bucket", "_created")):
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def idle(url: str) -> bool:
    c = counters(url)
    return c.get("vllm:num_requests_running", 1) + c.get("vllm:num_requests_waiting", 1) == 0


@dataclasses.dataclass
class Engine:
    kind: str
    """real or sim."""
    url: str
    input_len: int
    """--random-input-len that makes this engine count the wanted prompt tokens."""
    proc: subprocess.Popen[bytes] | None = None
    capacity_rps: float = 0.0


def real_vllm(*argv: str) -> subprocess.CompletedProcess[str]:
    """scripts/real-vllm ARGV; its failure as a RuntimeError with the script's last words."""
    cmd = [str(ROOT / "scripts/real-vllm"), *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode not in (0, 3):  # 3: status says "not running"
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"scripts/real-vllm {' '.join(argv)}: {' '.join(tail)}")
    return done


def start_real(url: str | None) -> Engine:
    """The real vLLM at `url`, or a new one started by scripts/real-vllm."""
    if url:
        return Engine("real", url.rstrip("/"), 0)
    port = free_port()
    real_vllm("serve", "--port", str(port))
    return Engine("real", f"http://127.0.0.1:{port}", 0)


def start_sim(out: Path, profile: Path) -> Engine:
    get_profile(str(profile))  # a bad file fails here, in one line
    port = free_port()
    cmd = [sys.executable, *f"-m llmtop sim --port {port} --model-name {SERVED}".split()]
    cmd += f"--max-num-seqs {MAX_SEQS} --max-num-batched-tokens {BATCHED}".split()
    cmd += f"--max-model-len {MODEL_LEN} --kv-tokens {BLOCKS * BLOCK}".split()
    cmd += ["--profile", str(profile)]
    proc = start(cmd, out / "sim.log")
    url = f"http://127.0.0.1:{port}"
    wait_for(
        "llmtop sim", lambda: httpx.get(f"{url}/health", timeout=2).status_code == 200, 60, proc
    )
    return Engine("sim", url, 0, proc)


def is_profile_name(name: str) -> bool:
    """A built-in sim profile's name (seed, fast, ...) rather than a file."""
    try:
        get_profile(name)
    except Exception:  # get_profile's own error for an unknown name or a bad file
        return False
    return True


def sim_input_len(input_len: int) -> int:
    """The sim counts text as ceil(chars / 4); vllm bench's random prompts decode to more chars
    per token with the tiny model's tokenizer: the input length the sim counts as `input_len`."""
    code = (
        "import sys\nfrom transformers import AutoTokenizer\n"
        "from vllm.benchmarks.datasets.datasets import RandomDataset\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "r = RandomDataset(random_seed=1).sample(t, 32, input_len=int(sys.argv[2]), output_len=8)\n"
        "print(sum(len(x.prompt) for x in r) / sum(x.prompt_len for x in r))\n"
    )
    py = str(REAL_DIR / "venv/bin/python")
    done = subprocess.run(
        [py, "-c", code, str(MODEL_DIR), str(input_len)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    chars_per_token = float(done.stdout.strip().splitlines()[-1])
    return round(input_len * 4 / chars_per_token)


def bench_serve(
    target: str,
    args: argparse.Namespace,
    engine: Engine,
    n: int,
    rate: float,
    seed: int,
    out: Path,
    name: str,
    concurrency: int | None = None,
) -> dict[str, Any]:
    """One `vllm bench serve` run in its own process group; its saved JSON (detailed)."""
    rate_arg = "inf" if rate == math.inf else f"{rate:.4f}"
    cmd = [str(VLLM), "bench", "serve", "--base-url", target, "--tokenizer", str(MODEL_DIR)]
    cmd += f"--backend vllm --model {SERVED} --dataset-name random --ignore-eos".split()
    cmd += f"--random-input-len {engine.input_len or args.input_len}".split()
    cmd += f"--random-output-len {args.output_len} --num-prompts {n} --seed {seed}".split()
    cmd += f"--request-rate {rate_arg} --percentile-metrics ttft,tpot,itl,e2el".split()
    cmd += f"--goodput ttft:{args.ttft_slo_ms:g} tpot:{args.tpot_slo_ms:g}".split()
    cmd += ["--metric-percentiles", "50,99", "--save-result", "--save-detailed", "--disable-tqdm"]
    cmd += ["--ready-check-timeout-sec", "0", "--result-dir", str(out)]
    cmd += ["--result-filename", f"{name}.json"]
    if concurrency:
        cmd += ["--max-concurrency", str(concurrency)]
    cap = engine.capacity_rps or 0.25
    timeout = 120 + 3 * (n / min(rate, cap) + 2 * args.output_len * 0.05)
    proc = start(cmd, out / f"{name}.log")
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{name}: vllm bench serve ran past {timeout:.0f} s") from None
    finally:
        stop(proc, 5.0)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: vllm bench serve exited {proc.returncode} (see {name}.log)")
    result: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    return result


def measure_capacity(engine: Engine, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Completed requests/s at saturation: a closed loop of 2 x max_num_seqs; the rate between
    the max_num_seqs-th completion and the last one while all streams were still busy. On the
    real engine, `llmtop whatif` fits the sim's profile over the same saturated window."""
    conc, n = 2 * MAX_SEQS, args.capacity_prompts
    whatif, fitted = None, None
    if engine.kind == "real" and not args.profile:
        cmd = [sys.executable, "-m", "llmtop", "whatif", "--vllm", engine.url, "--json"]
        cmd += f"--window-s {args.calibrate_s:g} --max-num-seqs {MAX_SEQS}".split()
        cmd += f"--max-num-batched-tokens {BATCHED}".split()
        script = f"sleep 20; exec {shlex.join(cmd)} > {shlex.quote(str(out / 'whatif.json'))}"
        whatif = start(["sh", "-c", script], out / "whatif.log")
    r = bench_serve(engine.url, args, engine, n, math.inf, 7, out, f"{engine.kind}-capacity", conc)
    ends = sorted(
        s + lat
        for s, lat, e in zip(r["start_times"], r["latencies"], r["errors"], strict=True)
        if not e
    )
    lo, hi = MAX_SEQS - 1, len(ends) - conc
    if hi - lo < 8:
        raise RuntimeError(f"capacity: too few completions ({len(ends)}); raise --capacity-prompts")
    engine.capacity_rps = (hi - lo) / (ends[hi] - ends[lo])
    if whatif is not None:
        try:
            whatif.wait(max(30.0, args.calibrate_s + 60))
        finally:
            stop(whatif, 5.0)
        if whatif.returncode != 0:
            raise RuntimeError(f"llmtop whatif exited {whatif.returncode} (see whatif.log)")
        write_profile(out / "whatif.json", out / "sim-profile.json")
        doc = json.loads((out / "whatif.json").read_text())
        fitted = {k: doc[k] for k in ("observed", "fit", "fit_error")}
    return {
        "calibration": fitted,
        "capacity_rps": engine.capacity_rps,
        "completed": len(ends),
        "prompts": n,
        "output_tok_s_saturated": r["output_throughput"],
    }


def write_profile(whatif_json: Path, path: Path) -> None:
    """The sim's profile from `llmtop whatif --json`'s fit (its engine-model coefficients)."""
    doc = json.loads(whatif_json.read_text())
    f, o = doc["fit"], doc["observed"]
    fit = StepFit(
        f["overhead_s"],
        f["weights_s"],
        f["kv_s_per_token"],
        f["prefill_s_per_token"],
        f["slope_from"],
        f["prefill_from"],
    )
    prof = synthetic_profile(fit, int(o["block_size"]), int(o["kv_capacity_tokens"]))
    prof = dataclasses.replace(
        prof,
        name="real-vllm-fit",
        max_model_len=MODEL_LEN,
        max_num_seqs=MAX_SEQS,
        max_num_batched_tokens=BATCHED,
    )
    path.write_text(json.dumps(dataclasses.asdict(prof), indent=1))


def start_gateway(
    arm: str, upstream: str, out: Path, args: argparse.Namespace
) -> tuple[str, subprocess.Popen[bytes]]:
    """A gateway told the judge's SLO (--ttft-slo-s, --itl-slo-s: what a user sets), at its
    defaults or with --autopilot (this tree's, or --before-tree's)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "llmtop",
        "gateway",
        "--upstream" if arm == "autopilot-before" and OLD_FLAG[0] else "--vllm",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--ttft-slo-s",
        f"{args.ttft_slo_ms / 1000:g}",
        "--itl-slo-s",
        f"{args.tpot_slo_ms / 1000:g}",
    ] + (["--autopilot"] if arm.startswith("autopilot") else [])
    tree = BEFORE_TREE[0] if arm == "autopilot-before" else ROOT
    proc = start(cmd, out / f"gateway-{arm}.log", tree)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        s = httpx.get(f"{url}/admin/stats", timeout=2).json()
        return not arm.startswith("autopilot") or bool(
            (s.get("autopilot") or {}).get("budget_blocks")
        )

    wait_for(f"gateway {arm}", ready, 60, proc)
    return url, proc


def n_prompts(args: argparse.Namespace, rate: float) -> int:
    """`--arrival-s` of arrivals, within [--min-prompts, --max-prompts]."""
    return int(min(args.max_prompts, max(args.min_prompts, round(rate * args.arrival_s))))


def one_run(
    engine: Engine, arm: str, load: float, rep: int, seed: int, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    """One arm at one load: fresh gateway, idle engine, vllm bench serve; one row."""
    rate = load * engine.capacity_rps
    n = n_prompts(args, rate)
    name = f"{engine.kind}-{load:g}x-{arm}-r{rep}"
    target, gw = engine.url, None
    if arm != "straight":
        target, gw = start_gateway(arm, engine.url, out, args)
    try:
        wait_for("engine idle", lambda: idle(engine.url), 300, engine.proc)
        before, load_avg0, t0 = counters(engine.url), os.getloadavg()[0], time.monotonic()
        r = bench_serve(target, args, engine, n, rate, seed, out, name)
        after = counters(engine.url)
        gw_doc = None
        if gw is not None:
            gw_doc = {
                p: httpx.get(f"{target}/admin/{p}", timeout=10).json() for p in ("stats", "events")
            }
    finally:
        if gw is not None:
            stop(gw)
    ok = [i for i, e in enumerate(r["errors"]) if not e and r["output_lens"][i] > 0]
    errors = [e for e in r["errors"] if e]
    ttft_slo = args.ttft_slo_ms / 1000
    row = {
        "engine": engine.kind,
        "arm": arm,
        "load": load,
        "rep": rep,
        "seed": seed,
        "offered": n,
        "rate_rps": rate,
        "wall_s": time.monotonic() - t0,
        "good": round((r["request_goodput"] or 0.0) * r["duration"]),
        "good_ttft_only": sum(r["ttfts"][i] <= ttft_slo for i in ok),
        "completed": r["completed"],
        "http_429": sum("Too Many" in e for e in errors),
        "other_failures": sum("Too Many" not in e for e in errors),
        "output_tok_s": r["output_throughput"],
        "ttft_p50_s": r["median_ttft_ms"] / 1000,
        "ttft_p99_s": r["p99_ttft_ms"] / 1000,
        "tpot_p50_ms": r["median_tpot_ms"],
        "preemptions": after.get("vllm:num_preemptions_total", 0)
        - before.get("vllm:num_preemptions_total", 0),
        "engine_prompt_tokens_per_req": statistics.mean(r["input_lens"][i] for i in ok)
        if ok
        else None,
        "prefix_cache_hits": after.get("vllm:prefix_cache_hits_total", 0)
        - before.get("vllm:prefix_cache_hits_total", 0),
        "load_avg": [load_avg0, os.getloadavg()[0]],
        "result": f"{name}.json",
        "gateway": gw_doc,
        "refused": [i for i, e in enumerate(r["errors"]) if "Too Many" in e],
        "in_time": [i for i in ok if r["ttfts"][i] <= ttft_slo],
    }
    row["goodput"] = row["good"] / n
    return row


def ordering(cells: dict[str, float]) -> str:
    """'autopilot > defaults = straight': by goodput per offered request; an arm within TIE of
    the one above it joins its group, and a group's arms are named alphabetically."""
    arms = sorted(cells, key=lambda a: -cells[a])
    groups = [[arms[0]]]
    for prev, arm in itertools.pairwise(arms):
        if cells[prev] - cells[arm] <= TIE:
            groups[-1].append(arm)
        else:
            groups.append([arm])
    return " > ".join(" = ".join(sorted(g)) for g in groups)


def med(rows: list[dict[str, Any]], key: str) -> float:
    vals = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vals) if vals else math.nan


def needless(rows: list[dict[str, Any]], arm_rows: list[dict[str, Any]]) -> str:
    """The 429s of these runs that straight served within the TTFT SLO on the same arrivals
    (same engine, load, repeat and seed: vllm bench's prompts and their order are the same),
    summed over the repeats; "-" for straight itself or without its run."""
    total, seen = 0, False
    for r in arm_rows:
        if r["arm"] == "straight":
            return "-"
        twin = [
            x
            for x in rows
            if x["arm"] == "straight"
            and (x["engine"], x["load"], x["rep"], x["seed"])
            == (r["engine"], r["load"], r["rep"], r["seed"])
        ]
        if twin:
            seen = True
            total += len(set(r.get("refused", [])) & set(twin[0].get("in_time", [])))
    return str(total) if seen else "-"


def table(rows: list[dict[str, Any]], engine: str, loads: list[float]) -> dict[float, str]:
    """Print arm x load (medians over repeats); return each load's ordering."""
    print(
        f"\n{engine}: goodput = good (TTFT and TPOT within the SLO) / offered; medians of"
        f" {len({r['rep'] for r in rows if r['engine'] == engine})} repeat(s)\n"
    )
    print(
        "| load | arm | offered | goodput | TTFT-only | output tok/s | TTFT p50 | TTFT p99 |"
        " 429 / other failures | 429s straight served in time | preemptions | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    orders: dict[float, str] = {}
    for load in loads:
        cells: dict[str, float] = {}
        for arm in ARMS:
            rs = [
                r for r in rows if r["engine"] == engine and r["load"] == load and r["arm"] == arm
            ]
            if not rs:
                continue
            off = rs[0]["offered"]
            cells[arm] = med(rs, "goodput")
            la = [x for r in rs for x in r["load_avg"]]
            print(
                f"| {load:g}x | {arm} | {off} | {cells[arm]:.0%} |"
                f" {med(rs, 'good_ttft_only') / off:.0%} | {med(rs, 'output_tok_s'):,.0f} |"
                f" {med(rs, 'ttft_p50_s'):.2f} s | {med(rs, 'ttft_p99_s'):.2f} s |"
                f" {med(rs, 'http_429'):.0f} / {med(rs, 'other_failures'):.0f} |"
                f" {needless(rows, rs)} | {med(rs, 'preemptions'):.0f} |"
                f" {min(la):.1f}-{max(la):.1f} |"
            )
        if cells:
            orders[load] = ordering(cells)
    return orders


def run_engine(
    kind: str,
    args: argparse.Namespace,
    loads: list[float],
    arms: list[str],
    summary: dict[str, Any],
    deadline: float,
) -> None:
    """Start one engine, measure it, run the grid (arms rotated per load), stop it."""
    engine: Engine | None = None
    ours = False
    try:
        if kind == "real":
            if args.vllm_url is None:  # never stop a vLLM somebody else started
                if real_vllm("status").returncode == 0:
                    raise RuntimeError(
                        "a real vLLM is already running (scripts/real-vllm"
                        " status): pass its URL as --vllm-url, or stop it"
                    )
                ours = True
            engine = start_real(args.vllm_url)
        else:
            profile = args.profile or args.out / "sim-profile.json"
            if not profile.exists() and not is_profile_name(str(profile)):
                raise RuntimeError(f"no sim profile {profile}: run --engine real first")
            engine = start_sim(args.out, profile)
            engine.input_len = sim_input_len(args.input_len)
        summary[f"{kind}_capacity"] = measure_capacity(engine, args, args.out)
        repeats = args.repeats if kind == "real" else (args.sim_repeats or args.repeats)
        cap = engine.capacity_rps
        est = sum(n_prompts(args, x * cap) / min(x * cap, cap) + 40 for x in loads) * len(arms)
        print(
            f"{kind}: capacity {cap:.3f} requests/s; the grid takes about"
            f" {repeats * est / 60:.0f} min",
            flush=True,
        )
        for rep in range(repeats):
            for i, load in enumerate(loads):
                k = (i + rep) % len(arms)
                for arm in arms[k:] + arms[:k]:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"--budget-min {args.budget_min:g} spent")
                    try:
                        seed = args.seed_base + 1000 * rep + i
                        row = one_run(engine, arm, load, rep, seed, args, args.out)
                    except (RuntimeError, httpx.HTTPError, KeyError, ValueError) as e:
                        print(f"  {load:g}x {arm}: failed: {e}", flush=True)
                        failed = {"engine": kind, "load": load, "arm": arm, "error": str(e)}
                        summary["failed_runs"].append(failed)
                        continue
                    summary["rows"].append(row)
                    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
                    print(
                        f"  {load:g}x {arm:9s} goodput {row['goodput']:.0%}"
                        f" ({row['good']}/{row['offered']}), {row['output_tok_s']:.0f} tok/s,"
                        f" 429s {row['http_429']}, {row['wall_s']:.0f} s",
                        flush=True,
                    )
    finally:
        if ours:
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                real_vllm("stop")
        if engine is not None and engine.proc is not None:
            stop(engine.proc)


def _interrupt(signum: int, frame: object) -> None:
    """INT, TERM and HUP end the run through the `finally` that stops every process group."""
    raise KeyboardInterrupt


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engine", choices=("real", "sim", "both"), default="both")
    p.add_argument("--loads", default="0.7,1.3,2,3", help="multiples of the measured capacity")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--repeats", type=int, default=1, help="grids on each engine")
    p.add_argument("--seed-base", type=int, default=0, help="added to each load's seed")
    p.add_argument("--sim-repeats", type=int, help="grids on the sim (default: --repeats)")
    p.add_argument("--input-len", type=int, default=600)
    p.add_argument("--output-len", type=int, default=300)
    p.add_argument("--ttft-slo-ms", type=float, default=5000.0)
    p.add_argument("--tpot-slo-ms", type=float, default=100.0)
    p.add_argument("--arrival-s", type=float, default=60.0, help="seconds of arrivals per run")
    p.add_argument("--min-prompts", type=int, default=40)
    p.add_argument("--max-prompts", type=int, default=400)
    p.add_argument("--capacity-prompts", type=int, default=64)
    p.add_argument("--calibrate-s", type=float, default=60.0, help="whatif window (real run)")
    p.add_argument("--vllm-url", help="use a running real vLLM (scripts/real-vllm serve)")
    p.add_argument("--profile", type=Path, help="the sim's profile JSON (skip the calibration)")
    p.add_argument("--budget-min", type=float, default=180.0, help="stop starting runs after")
    p.add_argument(
        "--before-tree",
        type=Path,
        help="a checkout whose autopilot is the arm"
        " autopilot-before (say, `git worktree add /tmp/before <commit>`)",
    )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    p.add_argument("--out", type=Path, default=REAL_DIR.parent / f"bench-vllm-serve/{stamp}")
    args = p.parse_args()
    if not VLLM.exists():
        print(f"bench_vllm_serve: no {VLLM}: run scripts/real-vllm setup", file=sys.stderr)
        return 2
    loads = [float(x) for x in args.loads.split(",")]
    arms = [a for a in args.arms.split(",") if a in ARMS]
    if "autopilot-before" in arms:
        if args.before_tree is None:
            print("bench_vllm_serve: autopilot-before needs --before-tree", file=sys.stderr)
            return 2
        BEFORE_TREE.append(args.before_tree.resolve())
        helped = subprocess.run(  # a tree from before `--upstream` became `--vllm`?
            [sys.executable, "-m", "llmtop", "gateway", "--help"],
            cwd=BEFORE_TREE[0],
            env={**os.environ, "PYTHONPATH": str(BEFORE_TREE[0])},
            capture_output=True,
            text=True,
            check=False,
        )
        OLD_FLAG.append("--vllm" not in helped.stdout)
        where = subprocess.run(  # the arm must run that tree's llmtop, not this one's
            [sys.executable, "-c", "import llmtop; print(llmtop.__file__)"],
            cwd=BEFORE_TREE[0],
            env={**os.environ, "PYTHONPATH": str(BEFORE_TREE[0])},
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if not where.startswith(str(BEFORE_TREE[0])):
            print(f"bench_vllm_serve: --before-tree imports {where!r}", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 60 * args.budget_min
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT: even when inherited
        signal.signal(sig, _interrupt)  # as ignored (started in the background)
    summary: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    summary.update(rows=[], failed_runs=[], loadavg_start=os.getloadavg())
    engines = ["real", "sim"] if args.engine == "both" else [args.engine]
    t_start = time.monotonic()
    try:
        for kind in engines:
            run_engine(kind, args, loads, arms, summary, deadline)
    except (TimeoutError, RuntimeError, OSError, KeyboardInterrupt) as e:
        print(f"bench_vllm_serve: stopped early: {str(e) or 'interrupted'}", file=sys.stderr)
    finally:
        stop_all()
        summary["wall_s"] = time.monotonic() - t_start
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    rows = summary["rows"]
    orders = {kind: table(rows, kind, loads) for kind in engines}
    if len(engines) == 2:
        print("\n| load | real vLLM ordering | sim ordering | same |\n|---|---|---|---|")
        for load in loads:
            a, b = orders["real"].get(load, "-"), orders["sim"].get(load, "-")
            print(f"| {load:g}x | {a} | {b} | {'yes' if a == b else 'no'} |")
    print(f"\n{time.monotonic() - t_start:.0f} s in all; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
