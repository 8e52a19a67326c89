"""What the suite (tests/) and the benchmarks (bench/) both run, so that neither imports the
other: real stacks (a Redis, a tmux terminal, the chaos run of bench/chaos.py and
tests/reliability/test_chaos.py) and ground truths (the sim driven in virtual time, the what-if
truth and its proof against a live gateway, the plan-less reading of a scrape).

It imports llmtop and itself only, never tests/ or bench/ (tests/unit/test_test_layout.py holds
that); helpers only the tests use live in tests/support/.
"""
