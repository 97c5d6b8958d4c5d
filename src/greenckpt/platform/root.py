"""The filesystem root through which greenckpt reads and writes the machine's state.

Why: cpufreq, cpuidle, powercap and /proc are plain files. Resolving every one of them through
one root (``/`` on a real node) lets the tests hand the whole platform layer a fake tree — an
Intel node with acpi-cpufreq, an AMD node with amd-pstate, a VM with nothing — and check what
it would have written, without root and without the hardware.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

ENV_VAR = "GREENCKPT_SYSROOT"
"""Environment variable that overrides the default root (``/``)."""


class PlatformError(RuntimeError):
    """The machine cannot do what was asked; the message says what is missing and why."""


@dataclass(frozen=True)
class SysRoot:
    """A root directory standing for ``/`` (a real node) or a fake tree (tests)."""

    path: Path = Path("/")

    @classmethod
    def default(cls, path: str | os.PathLike[str] | None = None) -> SysRoot:
        """The root named by ``path``, else by ``$GREENCKPT_SYSROOT``, else ``/``."""
        chosen = path if path is not None else os.environ.get(ENV_VAR) or "/"
        return cls(Path(chosen))

    @property
    def is_real(self) -> bool:
        """True when this root is the machine's own ``/``."""
        return self.path.resolve() == Path("/")

    def __truediv__(self, rel: str) -> Path:
        """``root / "sys/devices/system/cpu"``: an absolute path under this root."""
        return self.path / rel.lstrip("/")

    def read(self, rel: str) -> str:
        """Text of a file under the root, stripped; raises ``OSError`` as the OS does."""
        return (self / rel).read_text(encoding="utf-8").strip()

    def read_or_none(self, rel: str) -> str | None:
        """Text of a file, or ``None`` when it does not exist or cannot be read."""
        try:
            return self.read(rel)
        except (OSError, UnicodeDecodeError):
            return None

    def read_int_or_none(self, rel: str) -> int | None:
        """Integer attribute of a file, or ``None`` when absent, unreadable or not an integer
        (optional sysfs attributes vary by driver and kernel; their absence is not an error)."""
        text = self.read_or_none(rel)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            return None

    def write(self, rel: str, value: str) -> None:
        """Write ``value`` to a sysfs-style attribute (no newline handling needed by sysfs)."""
        with open(self / rel, "w", encoding="utf-8") as fh:
            fh.write(value)


class ClosesOnExit:
    """``with obj:`` for objects whose whole cleanup is ``close()``.

    Meters, meter selections, the DMA-latency hold and the node-settings session all release
    what they hold in ``close()``; leaving a ``with`` block, normally or by an exception, must
    call it. Subclasses whose entry does work (opening, installing handlers) override
    ``__enter__`` and keep this ``__exit__``.
    """

    def close(self) -> object:
        """Release what the object holds (subclasses implement it)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
