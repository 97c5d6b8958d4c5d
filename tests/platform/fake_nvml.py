"""TEST ONLY: build the fake NVML library (``fake_nvml.c``) and write or read its state file.

Why: the GPU lever's tests run the real ctypes binding against a C library with NVML's symbols
whose GPUs (SYNTHETIC: names, clocks and limits below are made up, shaped like a V100's) live
in a text file, so a SIGKILLed process's changes stay for the next process. :func:`install`
compiles the library into a test's ``tmp_path`` with ``cc`` and sets ``GREENCKPT_NVML_LIBRARY``
and ``FAKE_NVML_STATE``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("fake_nvml.c")

V100_CLOCKS: dict[int, tuple[int, ...]] = {
    877: (1530, 1380, 1230, 1005, 810, 585, 135),
    810: (810, 585, 135),
}


@dataclass
class FakeGpu:
    """One SYNTHETIC GPU of the fake library; clocks MHz, limits mW."""

    uuid: str
    name: str = "Fake_V100"
    app_mem: int = 877
    app_gr: int = 1230
    def_mem: int = 877
    def_gr: int = 1230
    limit_mw: int = 250_000
    min_mw: int = 100_000
    max_mw: int = 300_000
    def_limit_mw: int = 250_000
    clocks: dict[int, tuple[int, ...]] = field(default_factory=lambda: dict(V100_CLOCKS))


@dataclass
class FakeState:
    """The fake's whole state: GPUs, nvmlInit_v2's return code, injected failures."""

    gpus: list[FakeGpu]
    init_rc: int = 0
    fails: list[tuple[str, int, int]] = field(default_factory=list)


def write_state(path: Path, state: FakeState) -> None:
    lines = [f"init {state.init_rc}"]
    lines += [f"fail {fn} {rc} {index}" for fn, rc, index in state.fails]
    for g in state.gpus:
        clocks = " ".join(
            f"{mem} {len(gr)} {' '.join(map(str, gr))}" for mem, gr in g.clocks.items()
        )
        lines.append(
            f"gpu {g.uuid} {g.name} {g.app_mem} {g.app_gr} {g.def_mem} {g.def_gr} "
            f"{g.limit_mw} {g.min_mw} {g.max_mw} {g.def_limit_mw} {len(g.clocks)} {clocks}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_state(path: Path) -> FakeState:
    state = FakeState(gpus=[])
    for line in path.read_text(encoding="utf-8").splitlines():
        w = line.split()
        if not w:
            continue
        if w[0] == "init":
            state.init_rc = int(w[1])
        elif w[0] == "fail":
            state.fails.append((w[1], int(w[2]), int(w[3])))
        elif w[0] == "gpu":
            n = [int(x) for x in w[3:]]
            clocks: dict[int, tuple[int, ...]] = {}
            rest = n[9:]
            for _ in range(n[8]):
                mem, count = rest[0], rest[1]
                clocks[mem] = tuple(rest[2 : 2 + count])
                rest = rest[2 + count :]
            state.gpus.append(FakeGpu(w[1], w[2], *n[:8], clocks=clocks))
    return state


@dataclass
class FakeNvml:
    """An installed fake: the library, its state file, and helpers to change or read it."""

    library: Path
    state_file: Path

    def state(self) -> FakeState:
        return read_state(self.state_file)

    def write(self, state: FakeState) -> None:
        write_state(self.state_file, state)

    def gpu(self, index: int) -> FakeGpu:
        return self.state().gpus[index]

    def fail(self, function: str, rc: int, index: int = -1) -> None:
        """Make ``function`` return ``rc`` on GPU ``index`` (-1: every GPU) from now on."""
        state = self.state()
        state.fails.append((function, rc, index))
        self.write(state)

    def update(self, index: int, **changes: object) -> None:
        state = self.state()
        state.gpus[index] = replace(state.gpus[index], **changes)  # type: ignore[arg-type]
        self.write(state)


def build(directory: Path) -> Path:
    """Compile the fake library into ``directory``; skip the test where no C compiler is."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the fake NVML library")
    out = directory / "libfake-nvidia-ml.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(SOURCE)],
        check=True,
    )
    return out


def install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: int = 2, library: Path | None = None
) -> FakeNvml:
    """Build (unless ``library`` is given) and point greenckpt at a fake with ``gpus`` GPUs."""
    lib = library if library is not None else build(tmp_path)
    state_file = tmp_path / "fake-nvml.state"
    write_state(state_file, FakeState([FakeGpu(f"GPU-fake-{i:04d}") for i in range(gpus)]))
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(lib))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state_file))
    return FakeNvml(lib, state_file)
