"""greenckpt: energy-aware checkpoint/restart for HPC applications.

The package measures how fast and at what power a node writes and reads checkpoints, models an
application's run with failures, and chooses the CPU frequency, I/O parallelism and checkpoint
interval that minimise the energy spent per unit of useful work (EPE).

Layers (imports point downward only, see docs/architecture.md)::

    cli/        thin command line over the library
    optimize/   chooses settings and intervals from a profile with the model
    model/ sim/ pure math: expected times and energy; Monte Carlo simulation
"""

from greenckpt.errors import GreenckptError

__all__ = ["GreenckptError"]

__version__ = "0.1.0"
