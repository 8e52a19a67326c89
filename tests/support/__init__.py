"""Everything the tests share, so that no test module imports another: fakes and clocks
(admission, autopilot, fake_gpu), scripted inputs (health, fleet, report, kvprinted), recorded
stories (story, fleet_story), servers and stacks (gateway_fakes, gateway_sim, gateway_queue,
faults), checks against outside tools (promtool, alert_replay, replay_golden), the TUI's and the
terminal's helpers (tui, tty) and the real-vLLM tier's (vllm_client, real_cliff, real_autopilot,
serve_real, sim_families). What the benchmarks run too lives in harness/, never here.
"""
