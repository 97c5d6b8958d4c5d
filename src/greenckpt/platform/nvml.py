"""A minimal ctypes binding of NVIDIA's management library (``libnvidia-ml``) for the GPU lever.

Why ctypes and not ``pynvml``: the GPU lever (:mod:`~greenckpt.platform.gpu`) must work on
every GPU node the driver is installed on, and the driver always ships ``libnvidia-ml.so.1``,
while ``pynvml`` is an optional extra; the dozen calls the lever needs are plain C functions
with integer arguments. Only the calls the lever uses are bound, with the signatures of
NVIDIA's ``nvml.h``; every ``nvmlReturn_t`` other than ``NVML_SUCCESS`` becomes an
:class:`NvmlError` whose one-line message names the call and carries ``nvmlErrorString``.

The library is ``libnvidia-ml.so.1`` from the loader's search path, or the file named by the
environment variable ``GREENCKPT_NVML_LIBRARY`` (a site with a non-standard driver install;
tests point it at a fake library they compile). A node without the library or without a GPU
raises :class:`NvmlUnavailableError` with the reason. NVML counts ``nvmlInit_v2`` and
``nvmlShutdown`` calls, so each :class:`Nvml` session initialises and shuts down once and
sessions may nest.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Final, Self

from greenckpt.platform.root import ClosesOnExit, PlatformError

__all__ = [
    "CLOCK_GRAPHICS",
    "CLOCK_MEM",
    "DEFAULT_LIBRARY",
    "LIBRARY_ENV",
    "Nvml",
    "NvmlError",
    "NvmlUnavailableError",
]

LIBRARY_ENV: Final = "GREENCKPT_NVML_LIBRARY"
DEFAULT_LIBRARY: Final = "libnvidia-ml.so.1"

CLOCK_GRAPHICS: Final = 0  # NVML_CLOCK_GRAPHICS
CLOCK_MEM: Final = 2  # NVML_CLOCK_MEM

SUCCESS: Final = 0  # NVML_SUCCESS
ERROR_NO_PERMISSION: Final = 4
ERROR_INSUFFICIENT_SIZE: Final = 7
_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE
_MAX_CLOCKS = 512  # more than any GPU lists; a longer list is asked again at its size

CLOCKS_PERMISSION: Final = (
    "setting GPU application clocks needs root, or the administrator's "
    "`nvidia-smi -acp UNRESTRICTED`"
)
POWER_PERMISSION: Final = "setting the GPU power limit needs root"

_uint = ctypes.c_uint
_puint = ctypes.POINTER(ctypes.c_uint)
_dev = ctypes.c_void_p  # nvmlDevice_t: an opaque pointer

# name -> argument types; every function returns nvmlReturn_t (an int), except nvmlErrorString.
_SIGNATURES: Final[dict[str, tuple[Any, ...]]] = {
    "nvmlInit_v2": (),
    "nvmlShutdown": (),
    "nvmlDeviceGetCount_v2": (_puint,),
    "nvmlDeviceGetHandleByIndex_v2": (_uint, ctypes.POINTER(_dev)),
    "nvmlDeviceGetUUID": (_dev, ctypes.c_char_p, _uint),
    "nvmlDeviceGetName": (_dev, ctypes.c_char_p, _uint),
    "nvmlDeviceGetApplicationsClock": (_dev, ctypes.c_int, _puint),
    "nvmlDeviceGetDefaultApplicationsClock": (_dev, ctypes.c_int, _puint),
    "nvmlDeviceGetSupportedMemoryClocks": (_dev, _puint, _puint),
    "nvmlDeviceGetSupportedGraphicsClocks": (_dev, _uint, _puint, _puint),
    "nvmlDeviceSetApplicationsClocks": (_dev, _uint, _uint),
    "nvmlDeviceResetApplicationsClocks": (_dev,),
    "nvmlDeviceGetPowerManagementLimit": (_dev, _puint),
    "nvmlDeviceGetPowerManagementLimitConstraints": (_dev, _puint, _puint),
    "nvmlDeviceGetPowerManagementDefaultLimit": (_dev, _puint),
    "nvmlDeviceSetPowerManagementLimit": (_dev, _uint),
}


class NvmlError(PlatformError):
    """An NVML call returned an error; ``code`` is its ``nvmlReturn_t`` (None if unknown)."""

    code: int | None = None


class NvmlUnavailableError(PlatformError):
    """NVML cannot be used on this node: no library, no driver, or no GPU; the message says
    which."""


def library_path() -> str:
    """The library to load: ``$GREENCKPT_NVML_LIBRARY`` if set and not empty, else the
    driver's ``libnvidia-ml.so.1``."""
    return os.environ.get(LIBRARY_ENV) or DEFAULT_LIBRARY


def _load(path: str) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        where = f" (from ${LIBRARY_ENV})" if os.environ.get(LIBRARY_ENV) else ""
        raise NvmlUnavailableError(
            f"no NVIDIA management library: cannot load {path}{where}: {exc}"
        ) from None
    for name, argtypes in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise NvmlUnavailableError(f"{path} has no {name} (driver too old?)") from None
        fn.argtypes = list(argtypes)
        fn.restype = ctypes.c_int
    try:
        lib.nvmlErrorString.argtypes = [ctypes.c_int]
        lib.nvmlErrorString.restype = ctypes.c_char_p
    except AttributeError:
        raise NvmlUnavailableError(f"{path} has no nvmlErrorString") from None
    return lib


class Nvml(ClosesOnExit):
    """One NVML session: ``nvmlInit_v2`` on open, ``nvmlShutdown`` on close (a context
    manager). Devices are ``nvmlDevice_t`` handles from :meth:`handle`; clocks are MHz and
    power limits mW, as NVML gives them."""

    def __init__(self, lib: ctypes.CDLL, path: str) -> None:
        self._lib = lib
        self.path = path
        self._open = True

    @classmethod
    def open(cls) -> Self:
        """Load the library and initialise NVML; :class:`NvmlUnavailableError` says why not."""
        path = library_path()
        lib = _load(path)
        rc = lib.nvmlInit_v2()
        if rc != SUCCESS:
            raise NvmlUnavailableError(
                f"nvmlInit_v2 failed (no NVIDIA driver loaded?): {_message(lib, rc)}"
            )
        return cls(lib, path)

    def close(self) -> None:
        """Shut this session down (once; later calls do nothing)."""
        if self._open:
            self._open = False
            self._lib.nvmlShutdown()

    def _call(self, name: str, *args: Any) -> None:
        rc = int(getattr(self._lib, name)(*args))
        if rc != SUCCESS:
            text = f"{name} failed: {_message(self._lib, rc)}"
            if rc == ERROR_NO_PERMISSION and "PowerManagementLimit" in name:
                text += f" ({POWER_PERMISSION})"
            elif rc == ERROR_NO_PERMISSION and "ApplicationsClocks" in name:
                text += f" ({CLOCKS_PERMISSION})"
            err = NvmlError(text)
            err.code = rc
            raise err

    def _uint_out(self, name: str, *args: Any) -> int:
        out = _uint()
        self._call(name, *args, ctypes.byref(out))
        return int(out.value)

    def count(self) -> int:
        """How many GPUs NVML sees."""
        return self._uint_out("nvmlDeviceGetCount_v2")

    def handle(self, index: int) -> ctypes.c_void_p:
        """The device handle of GPU ``index`` (NVML order)."""
        out = _dev()
        self._call("nvmlDeviceGetHandleByIndex_v2", index, ctypes.byref(out))
        return out

    def _text(self, name: str, dev: ctypes.c_void_p) -> str:
        buf = ctypes.create_string_buffer(_BUFFER)
        self._call(name, dev, buf, _BUFFER)
        return buf.value.decode("utf-8", "replace")

    def uuid(self, dev: ctypes.c_void_p) -> str:
        """The GPU's UUID (``GPU-...``), stable across reboots and index changes."""
        return self._text("nvmlDeviceGetUUID", dev)

    def name(self, dev: ctypes.c_void_p) -> str:
        """The GPU's product name."""
        return self._text("nvmlDeviceGetName", dev)

    def applications_clock(self, dev: ctypes.c_void_p, clock: int) -> int:
        """The application clock (MHz) of ``clock`` (:data:`CLOCK_MEM`, :data:`CLOCK_GRAPHICS`)."""
        return self._uint_out("nvmlDeviceGetApplicationsClock", dev, clock)

    def default_applications_clock(self, dev: ctypes.c_void_p, clock: int) -> int:
        """The default application clock (MHz): what a reset puts back."""
        return self._uint_out("nvmlDeviceGetDefaultApplicationsClock", dev, clock)

    def _clock_list(self, name: str, *args: Any) -> tuple[int, ...]:
        size = _MAX_CLOCKS
        while True:
            count = _uint(size)
            values = (_uint * size)()
            rc = int(getattr(self._lib, name)(*args, ctypes.byref(count), values))
            if rc == ERROR_INSUFFICIENT_SIZE and count.value > size:
                size = int(count.value)
                continue
            if rc != SUCCESS:
                err = NvmlError(f"{name} failed: {_message(self._lib, rc)}")
                err.code = rc
                raise err
            return tuple(int(v) for v in values[: count.value])

    def supported_memory_clocks(self, dev: ctypes.c_void_p) -> tuple[int, ...]:
        """The memory clocks (MHz) application clocks may use."""
        return self._clock_list("nvmlDeviceGetSupportedMemoryClocks", dev)

    def supported_graphics_clocks(self, dev: ctypes.c_void_p, memory_mhz: int) -> tuple[int, ...]:
        """The graphics clocks (MHz) that may go with memory clock ``memory_mhz``."""
        return self._clock_list("nvmlDeviceGetSupportedGraphicsClocks", dev, memory_mhz)

    def set_applications_clocks(
        self, dev: ctypes.c_void_p, memory_mhz: int, graphics_mhz: int
    ) -> None:
        """Set the application clocks (needs root or unrestricted application clocks)."""
        self._call("nvmlDeviceSetApplicationsClocks", dev, memory_mhz, graphics_mhz)

    def reset_applications_clocks(self, dev: ctypes.c_void_p) -> None:
        """Put the application clocks back to their defaults."""
        self._call("nvmlDeviceResetApplicationsClocks", dev)

    def power_limit_mw(self, dev: ctypes.c_void_p) -> int:
        """The power management limit (mW) in force."""
        return self._uint_out("nvmlDeviceGetPowerManagementLimit", dev)

    def power_limit_constraints_mw(self, dev: ctypes.c_void_p) -> tuple[int, int]:
        """The lowest and highest power management limit (mW) the GPU accepts."""
        low, high = _uint(), _uint()
        self._call(
            "nvmlDeviceGetPowerManagementLimitConstraints",
            dev,
            ctypes.byref(low),
            ctypes.byref(high),
        )
        return int(low.value), int(high.value)

    def default_power_limit_mw(self, dev: ctypes.c_void_p) -> int:
        """The power management limit (mW) the GPU boots with."""
        return self._uint_out("nvmlDeviceGetPowerManagementDefaultLimit", dev)

    def set_power_limit_mw(self, dev: ctypes.c_void_p, milliwatts: int) -> None:
        """Set the power management limit (mW; needs root)."""
        self._call("nvmlDeviceSetPowerManagementLimit", dev, milliwatts)


def _message(lib: ctypes.CDLL, rc: int) -> str:
    """NVML's text for ``rc`` on one line, with the code."""
    raw = lib.nvmlErrorString(rc)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else "unknown error"
    return f"{' '.join(text.split())} (NVML error {rc})"
