"""Moved to :mod:`greenckpt.testing.cpu` (issue 17 item 6); kept so old imports work."""

from greenckpt.testing.cpu import *  # noqa: F403
