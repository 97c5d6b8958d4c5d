"""Moved to :mod:`greenckpt.testing.storage` (issue 17 item 6); kept so old imports work."""

from greenckpt.testing.storage import *  # noqa: F403
