"""`python -m evictd` is the same as the `evictd` command."""

from __future__ import annotations

from evictd.cli import main

raise SystemExit(main())
