"""`python -m llmtop`."""

from llmtop.cli import main

raise SystemExit(main())
