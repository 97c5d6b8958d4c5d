"""Example applications that use the checkpoint library: a 2-D heat solver and a STREAM-like
benchmark, over MPI or in a single process.

- :mod:`greenckpt.apps.heat2d`: the compute-bound application of wu2018 (HDC) and moran2018,
  a Jacobi 5-point stencil whose result is bit-identical whatever the failures and restarts.
- :mod:`greenckpt.apps.stream`: wu2018's memory-bound application (copy, scale, add, triad).
- :mod:`greenckpt.apps.common`: what both share (checkpoint options, messages, the
  recover/compute/checkpoint loop, the JSON result's checkpoint entries).

Each runs as ``python -m greenckpt.apps.heat2d`` (``mpiexec -n 4 python -m ...`` under MPI);
``examples/heat2d.py`` and ``examples/stream.py`` are launchers of these modules, and
``examples/README.md`` shows complete sessions with failures and restarts.

Why they live in the package rather than only under ``examples/``: ``greenckpt demo`` launches
them under ``mpiexec`` from an installed wheel, run from any directory, where no checkout and
so no ``examples/`` folder exists; as modules of the package they are installed with it, found
by ``python -m``, and type-checked and linted with the library whose API they exercise.
"""
