"""Wheel build hook: compile libgreenckpt (the C phase API) into the wheel.

Why a hook: ``pip install greenckpt`` must give C, C++ and Fortran codes a library to link
(issue 16). The compile itself lives in src/greenckpt/native/build.py, imported here from the
source tree (it needs only the standard library and greenckpt's leaf of errors), so that
``greenckpt config`` can run the same code later where no compiler was found now; a failed
compile only warns, and the pure-Python package installs as before.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_ROOT = Path(__file__).resolve().parent
_NATIVE = _ROOT / "src" / "greenckpt" / "native"


def _load_build() -> Any:
    """greenckpt.native.build from this source tree (not an installed greenckpt); the package
    root imports nothing eagerly, so no dependency is needed."""
    sys.path.insert(0, str(_ROOT / "src"))
    try:
        for name in [m for m in sys.modules if m == "greenckpt" or m.startswith("greenckpt.")]:
            del sys.modules[name]
        return importlib.import_module("greenckpt.native.build")
    finally:
        sys.path.remove(str(_ROOT / "src"))


class NativeBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Builds the native libraries for the wheel (in place for an editable install)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        native = _load_build()
        if version == "editable":  # the .pth points at src/: build where the package is
            out = _NATIVE / "lib"
            self._build(native, out, None, build_data)
            return
        self._tmp = tempfile.TemporaryDirectory(prefix="greenckpt-native-")
        out = Path(self._tmp.name)
        if self._build(native, out, "${pcfiledir}/../include", build_data):
            for built in out.iterdir():
                build_data["force_include"][str(built)] = f"greenckpt/native/lib/{built.name}"

    def _build(self, native: Any, out: Path, include: str | None, data: dict[str, Any]) -> bool:
        try:
            native.build_libraries(out, include_dir=include)
        except (native.BuildError, OSError) as exc:
            self.app.display_warning(
                f"greenckpt: the C phase API was not built ({exc}); `greenckpt config --libs` "
                "will build it when first asked, given a C compiler"
            )
            return False
        data["pure_python"] = False
        data["infer_tag"] = True
        # the Slurm plugin, where Slurm's spank.h is (most machines have none: quiet)
        with contextlib.suppress(native.BuildError, OSError):
            native.build_spank(out)
        return True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()
