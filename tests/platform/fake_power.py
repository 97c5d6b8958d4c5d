"""Moved to :mod:`greenckpt.testing.power` (issue 17 item 6); kept so old imports work."""

from greenckpt.testing.power import *  # noqa: F403
