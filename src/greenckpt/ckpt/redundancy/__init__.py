"""The redundancy of a checkpoint level: what it adds to the rank files so that lost ones can
be rebuilt, and the codes behind it.

:mod:`~greenckpt.ckpt.redundancy.scheme` is what the rest of the library knows of a scheme
(the :class:`~greenckpt.ckpt.redundancy.scheme.Redundancy` protocol, its factory type);
:mod:`~greenckpt.ckpt.redundancy.builtin` the built-in schemes (none, partner, erasure), which
:mod:`~greenckpt.ckpt.levels` names by ``"module:attribute"``;
:mod:`~greenckpt.ckpt.redundancy.partner` and :mod:`~greenckpt.ckpt.redundancy.groups` the
layouts of levels 2 and 3, and :mod:`~greenckpt.ckpt.redundancy.erasure` the erasure code.
Nothing is imported here: the level registry imports the scheme's types, and the CLI, which
reads the configuration, must start without NumPy (which the erasure code loads).
"""
