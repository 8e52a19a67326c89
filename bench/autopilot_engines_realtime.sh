#!/bin/bash
# The autopilot on other engines over real sockets (BENCHMARKS.md, "The autopilot on other
# engines"): a real `llmtop sim --dialect D` on the fast profile, Poisson arrivals at LOAD x its
# closed-loop capacity (CONC streams), 20 s of arrivals a run, seeds 1-3: straight at the sim,
# then through a fresh `llmtop gateway --autopilot` (TTFT SLO 5 s, ITL 100 ms). Run it from an
# empty folder (it writes its logs there) with llmtop on PATH:
#   bench/autopilot_engines_realtime.sh DIALECT "SIM FLAGS" CONC LOAD PORT
#   bench/autopilot_engines_realtime.sh llamacpp "--max-num-seqs 2" 2 2 18301
#   bench/autopilot_engines_realtime.sh sglang "" 16 2 18311
set -u
command -v llmtop >/dev/null || { echo "llmtop is not on PATH (activate the venv)" >&2; exit 2; }
dialect=$1; flags=$2; conc=$3; load=$4; port=$5
SHAPE="--prompt-tokens 400 --output-tokens 100 --ttft-slo-s 5 --itl-slo-s 0.1"
llmtop sim --profile fast --port $port --dialect $dialect $flags > sim_$dialect.log 2>&1 & S=$!
sleep 3
cap=$(llmtop load --url http://127.0.0.1:$port --concurrency $conc --requests 60 --duration-s 20 $SHAPE --json | python -c "import json,sys; print(json.load(sys.stdin)['request_per_s'])")
rate=$(python -c "print(round($cap*$load, 2))")
echo "$dialect capacity $cap req/s (closed loop of $conc), rate $rate"
for seed in 1 2 3; do
  st=$(llmtop load --url http://127.0.0.1:$port --rate $rate --requests 1000 --duration-s 20 --seed $seed $SHAPE --json)
  llmtop gateway --engine http://127.0.0.1:$port --listen 127.0.0.1:$((port+1)) --autopilot --ttft-slo-s 5 --itl-slo-s 0.1 --no-history --drain-grace-s 0 --drain-timeout-s 1 > gw_$dialect.log 2>&1 & G=$!
  sleep 3
  ap=$(llmtop load --url http://127.0.0.1:$((port+1)) --rate $rate --requests 1000 --duration-s 20 --seed $seed $SHAPE --json)
  reason=$(curl -s localhost:$((port+1))/admin/stats | python -c "import json,sys; a=json.load(sys.stdin)['autopilot']; print(a['engine'], '|', a['reason'])")
  kill $G; wait $G 2>/dev/null
  python - "$st" "$ap" "$seed" "$reason" <<'PY'
import json, sys
st, ap = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"seed {sys.argv[3]}: offered {st['offered']}/{ap['offered']} goodput straight {st['goodput_frac']:.0%} autopilot {ap['goodput_frac']:.0%} 429s {ap['rejections_429']} output {ap['output_tokens']/max(st['output_tokens'],1):.2f}x cut {st['cut']}/{ap['cut']} | {sys.argv[4]}")
PY
done
kill $S
