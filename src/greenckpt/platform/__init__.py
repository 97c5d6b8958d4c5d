"""The machine: every read and write of sysfs, procfs and hardware tools goes through here.

Everything in this layer resolves paths through a :class:`~greenckpt.platform.root.SysRoot`
(default ``/``, overridable by parameter or by the ``GREENCKPT_SYSROOT`` environment
variable), so the whole layer runs against fake trees in tests.
"""
