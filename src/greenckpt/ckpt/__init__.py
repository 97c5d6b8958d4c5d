"""greenckpt.ckpt — the multilevel checkpoint/restart library (node-local, partner copy,
erasure-coded group, global file system), writing and reading through :mod:`greenckpt.io`."""
