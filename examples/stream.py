"""Launcher of the STREAM-like benchmark, whose source is ``src/greenckpt/apps/stream.py``.

The same program as ``python -m greenckpt.apps.stream`` (which ``greenckpt demo`` runs from a
wheel), kept so that ``python examples/stream.py --help`` and examples/README.md work as is.
"""

import sys

from greenckpt.apps.stream import main

if __name__ == "__main__":
    sys.exit(main())
