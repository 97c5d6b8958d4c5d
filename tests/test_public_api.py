"""The public names (issue 17, item 2): ``from greenckpt import Checkpointer``, the API of
``greenckpt.ckpt`` in its ``__all__``, a package root that stays cheap to import, and a user
guide whose examples import only public modules."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import greenckpt
import greenckpt.ckpt
from greenckpt.ckpt.api import Checkpointer as FromApi

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "user-guide.md"

PUBLIC = {
    "greenckpt",
    "greenckpt.ckpt",
    "greenckpt.runtime",
    "greenckpt.profile",
    "greenckpt.optimize",
    "greenckpt.model",
}
"""The modules a user imports from (and ``greenckpt.platform.*`` and ``greenckpt.report.*``,
whose modules are each one kind of report)."""


def test_the_checkpointer_is_importable_from_the_package_root() -> None:
    from greenckpt import Checkpointer  # noqa: PLC0415 - the import is what is tested

    assert Checkpointer is FromApi
    assert greenckpt.ckpt.Checkpointer is FromApi
    assert "Checkpointer" in greenckpt.__all__ and "Checkpointer" in dir(greenckpt)


def test_every_public_name_of_the_ckpt_package_resolves() -> None:
    for name in greenckpt.ckpt.__all__:
        assert getattr(greenckpt.ckpt, name) is not None, name
    assert "write_and_commit" not in greenckpt.ckpt.__all__  # internals stay private


def test_importing_the_package_root_loads_no_layer() -> None:
    code = (
        "import sys, greenckpt; print(sorted(m for m in sys.modules if m.startswith('greenckpt.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "greenckpt.ckpt" not in out, out


def _guide_imports() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    assert blocks
    found = []
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append(node.module)
            elif isinstance(node, ast.Import):
                found += [a.name for a in node.names]
    return [m for m in found if m.split(".")[0] == "greenckpt"]


def test_the_user_guide_examples_import_only_public_modules() -> None:
    private = [
        m
        for m in _guide_imports()
        if m not in PUBLIC and not m.startswith(("greenckpt.platform.", "greenckpt.report."))
    ]
    assert private == []
