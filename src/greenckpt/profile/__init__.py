"""greenckpt.profile — the I/O+power profiler: sweeps, resumable profile files, exports, plots.

The profile *format* (typed objects, loader) lives in :mod:`greenckpt.optimize.profile`, the
layer below, so the optimizer can read what this package writes.
"""
