"""Every exception greenckpt defines sits under one base, ``GreenckptError`` (issue 17 item 5),
keeps its built-in base (``except ValueError`` code still works) and survives pickling (MPI
sends some of them between ranks).

The classes are found by importing every module of the package, so a new error class without
the base fails here without anyone listing it.
"""

from __future__ import annotations

import ast
import importlib
import pickle
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import greenckpt
from greenckpt import GreenckptError
from greenckpt.apps.common import AppError
from greenckpt.ckpt.config import ConfigError
from greenckpt.errors import MissingEntryError
from greenckpt.files import NotRegularFileError
from greenckpt.platform.meters.base import MeterUnavailable
from greenckpt.platform.root import PlatformError


def _modules() -> list[ModuleType]:
    names = [
        info.name
        for info in pkgutil.walk_packages(greenckpt.__path__, "greenckpt.")
        if not info.name.endswith("__main__")  # running it would run the CLI
    ]
    return [greenckpt, *(importlib.import_module(name) for name in names)]


def _library_exceptions() -> list[type[BaseException]]:
    """Every exception class defined (not merely imported) in a greenckpt module."""
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__.startswith("greenckpt")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


EXCEPTIONS = _library_exceptions()

# Classes whose constructor takes more than a message: how to build one.
_EXAMPLES: dict[type[BaseException], BaseException] = {
    AppError: AppError("the grid does not fit in memory", code=2),
    MeterUnavailable: MeterUnavailable("rapl", "energy_uj is readable by root only"),
}


def _example(cls: type[BaseException]) -> BaseException:
    if cls in _EXAMPLES:
        return _EXAMPLES[cls]
    if issubclass(cls, OSError):
        return cls(2, "no such thing", "/some/path")
    return cls("something went wrong")


def test_the_package_defines_its_errors_where_expected() -> None:
    names = {cls.__name__ for cls in EXCEPTIONS}
    assert {"GreenckptError", "ConfigError", "PlatformError", "UnitError", "ProfileError"} <= names
    assert len(EXCEPTIONS) >= 28


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: cls.__qualname__)
def test_every_library_exception_is_a_greenckpt_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, GreenckptError), (
        f"{cls.__module__}.{cls.__qualname__} needs GreenckptError as a base: "
        f"class {cls.__name__}(GreenckptError, <its built-in base>)"
    )


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: cls.__qualname__)
def test_every_library_exception_survives_a_pickle_round_trip(cls: type[BaseException]) -> None:
    exc = _example(cls)
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is cls
    assert copy.args == exc.args
    assert str(copy) == str(exc)
    assert vars(copy) == vars(exc)  # attributes such as MeterUnavailable.reason come back too


def test_the_built_in_bases_still_catch_them() -> None:
    with pytest.raises(ValueError, match="bad"):
        raise ConfigError("bad")
    with pytest.raises(RuntimeError):
        raise PlatformError("no cpufreq")
    with pytest.raises(OSError) as info:
        raise NotRegularFileError(21, "not a regular file (it is a directory)", "/tmp")
    assert (info.value.errno, info.value.filename) == (21, "/tmp")
    assert ConfigError.__mro__[1:3] == (GreenckptError, ValueError)
    with pytest.raises(GreenckptError, match="rapl: no access"):
        raise MeterUnavailable("rapl", "no access")


def test_the_base_is_exported_from_the_package_and_its_leaf() -> None:
    leaf = importlib.import_module("greenckpt.errors").GreenckptError

    assert leaf is GreenckptError
    assert issubclass(GreenckptError, Exception)


_BUILT_INS = {"ValueError", "TypeError", "KeyError", "RuntimeError", "OSError", "Exception"}


def test_the_library_raises_no_bare_built_in_error() -> None:
    """``raise ValueError(...)`` in the library would escape ``except GreenckptError``: the
    generic refusals are ``greenckpt.errors.InvalidValueError`` and its siblings."""
    offenders = []
    for path in sorted(Path(greenckpt.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id in _BUILT_INS:
                    offenders.append(f"{path.name}:{node.lineno} raise {func.id}")
    assert not offenders, offenders


def test_the_generic_errors_keep_their_built_in_meaning() -> None:
    assert str(MissingEntryError("the recording has no write point")) == (
        "the recording has no write point"
    )
    with pytest.raises(KeyError):
        raise MissingEntryError("x")
