"""``python -m proxy.cli``."""

from proxy.cli import main

raise SystemExit(main())
