"""Launcher of the 2-D heat solver, whose source is ``src/greenckpt/apps/heat2d.py``.

The same program as ``python -m greenckpt.apps.heat2d`` (which ``greenckpt demo`` runs from a
wheel), kept so that ``python examples/heat2d.py --help`` and examples/README.md work as is.
"""

import sys

from greenckpt.apps.heat2d import main

if __name__ == "__main__":
    sys.exit(main())
