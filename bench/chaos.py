"""The chaos run from the command line (harness/chaos.py says what it does and checks).

python bench/chaos.py --duration-s 600 --out /tmp/chaos    # the 10-minute run
python bench/chaos.py --duration-s 90                      # what the suite runs
python bench/chaos.py --duration-s 150 --no-faults --load-x 0.7   # a healthy run
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.chaos import main

if __name__ == "__main__":
    sys.exit(main())
