"""Issue 18 item 8: a way out of ``RecoveryError``.

``recover(on_unrecoverable="fresh")`` (or the ``on_unrecoverable`` setting) moves checkpoints
that cannot be restored aside, warns, and lets the run start as a first run; the default still
raises, and a bad value changes nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from greenckpt.apps import common
from greenckpt.ckpt.api import Checkpointer, RecoveryError
from greenckpt.ckpt.config import ConfigError
from greenckpt.ckpt.inject import flip_bits_in_file


def make(tmp_path: Path, **kw: object) -> tuple[Checkpointer, np.ndarray]:
    ck = Checkpointer(local_dir=str(tmp_path), keep=2, **kw)  # type: ignore[arg-type]
    u = np.zeros(4096)
    ck.protect("u", u)
    return ck, u


def unrestorable(tmp_path: Path) -> None:
    """Two checkpoints, both with a flipped bit."""
    ck, u = make(tmp_path)
    for it in (1, 2):
        u[:] = it
        ck.state["it"] = it
        ck.checkpoint(iteration=it)
    ck.finalize()
    for ckpt in ("ckpt-00000001", "ckpt-00000002"):
        flip_bits_in_file(tmp_path / "greenckpt" / ckpt / "rank-000000.data", positions=[9])


def test_the_default_still_raises_and_moves_nothing(tmp_path: Path) -> None:
    unrestorable(tmp_path)
    ck, _ = make(tmp_path)
    with pytest.raises(RecoveryError, match=r"checkpoint 2 .*checkpoint 1 "):
        ck.recover()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["greenckpt"]


@pytest.mark.parametrize("how", ["argument", "keyword setting", "environment"])
def test_fresh_moves_them_aside_and_starts_as_a_first_run(tmp_path: Path, how: str) -> None:
    unrestorable(tmp_path)
    kw: dict[str, object] = {}
    if how == "keyword setting":
        kw["on_unrecoverable"] = "fresh"
    if how == "environment":
        kw["env"] = {"GREENCKPT_ON_UNRECOVERABLE": "Fresh"}
    ck, u = make(tmp_path, **kw)
    ck.state["it"] = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ck.recover(on_unrecoverable="fresh") if how == "argument" else ck.recover()
    assert got is None
    assert ck.state == {"it": 0}  # as before the call, whatever a failed read loaded
    (aside,) = ck.set_aside
    assert aside.parent == tmp_path and aside.name.startswith("greenckpt.unrestorable-")
    assert sorted(p.name for p in aside.glob("ckpt-*")) == ["ckpt-00000001", "ckpt-00000002"]
    assert not (tmp_path / "greenckpt").exists()
    (message,) = [str(w.message) for w in caught if "moved them aside" in str(w.message)]
    assert "no checkpoint could be restored" in message and str(aside) in message
    assert "initialise them as for a first run" in message
    # the run goes on and checkpoints again; the next start restores the new checkpoint
    u[:] = 7
    ck.state["it"] = 1
    info = ck.checkpoint(iteration=1)
    ck.finalize()
    ck2, u2 = make(tmp_path)
    rec = ck2.recover()
    assert rec is not None and rec.id == info.id and np.all(u2 == 7)


def test_fresh_with_nothing_to_restore_is_a_first_run(tmp_path: Path) -> None:
    ck, _ = make(tmp_path, on_unrecoverable="fresh")
    assert ck.recover() is None and ck.set_aside == ()


def test_a_bad_value_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    unrestorable(tmp_path)
    with pytest.raises(ConfigError, match=r'GREENCKPT_ON_UNRECOVERABLE: .* "raise" .* "fresh"'):
        make(tmp_path, env={"GREENCKPT_ON_UNRECOVERABLE": "delete"})
    ck, _ = make(tmp_path)
    with pytest.raises(ValueError, match=r'on_unrecoverable must be "raise" or "fresh"'):
        ck.recover(on_unrecoverable="delete")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["greenckpt"]


def test_the_example_apps_offer_the_way_out(tmp_path: Path) -> None:
    """run_iterations names the way out in its error; with "fresh" it restarts the
    application's data through ``reset``, and without one it stops safely (the data may
    hold parts of the failed reads) after moving the checkpoints aside."""
    unrestorable(tmp_path)
    ck, _ = make(tmp_path)
    with pytest.raises(common.AppError, match="GREENCKPT_ON_UNRECOVERABLE=fresh") as stop:
        common.run_iterations(ck, 3, lambda: None, prog="t", rank=0)
    assert stop.value.code == 1

    ck, u = make(tmp_path, on_unrecoverable="fresh")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(common.AppError, match="run again to start afresh") as stop:
            common.run_iterations(ck, 3, lambda: None, prog="t", rank=0)
    assert stop.value.code == 1 and not (tmp_path / "greenckpt").exists()

    unrestorable(tmp_path)
    ck, u = make(tmp_path, on_unrecoverable="fresh")
    resets = []

    def reset() -> None:
        u[:] = 0
        resets.append(1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = common.run_iterations(ck, 3, lambda: None, prog="t", rank=0, reset=reset)
    assert resets == [1] and outcome.restored is None and np.all(u == 0)
