"""Allow ``python -m greenckpt``."""

from greenckpt.cli.main import main

raise SystemExit(main())
