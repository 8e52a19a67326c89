"""Memory an hour's recording takes in replay: the read recording and its derived snapshots.

Builds the hour of bench/bench_recording.py (3600 polls of the real vLLM 0.32 capture under steady
load), writes it as the default `.jsonl.gz`, then measures with tracemalloc the Python heap held
by `read_recording` and by `ReplaySource.snapshots()` (what `llmtop replay` keeps).

    python bench/recording_memory.py      # ~30 CPU s
"""

from __future__ import annotations

import sys
import tempfile
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_recording  # noqa: E402

from llmtop.recording.reader import read_recording  # noqa: E402
from llmtop.recording.replay import ReplaySource  # noqa: E402
from llmtop.settings import HealthSettings  # noqa: E402


def main() -> None:
    data = bench_recording.polls(bench_recording.POLLS)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rec.jsonl.gz"
        bench_recording.record(path, data, 60)
        del data
        tracemalloc.start()
        rec = read_recording(path)
        read = tracemalloc.get_traced_memory()[0]
        snapshots = ReplaySource(rec, HealthSettings()).snapshots()
        derived = tracemalloc.get_traced_memory()[0] - read
        tracemalloc.stop()
    print(
        f"one hour ({len(snapshots)} polls): the recording {read / 1e6:.1f} MB, "
        f"the derived snapshots {derived / 1e6:.1f} MB (tracemalloc)"
    )


if __name__ == "__main__":
    main()
