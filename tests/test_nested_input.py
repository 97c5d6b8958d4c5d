"""Deeply nested input files end in a one-line error, never a RecursionError traceback
(issue 18, item 21): the levels file of ``greenckpt levels --config`` and the checkpoint
library's TOML configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.ckpt.config import ConfigError, load_config

DEPTH = 5000


def _deep_toml(path: Path) -> Path:
    path.write_text("a = " + "[" * DEPTH + "]" * DEPTH + "\n", encoding="utf-8")
    return path


def test_levels_config_nested_too_deeply_is_one_line_exit_2(tmp_path: Path) -> None:
    config = _deep_toml(tmp_path / "levels.toml")
    main = "import sys; from greenckpt.cli.main import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", main, "levels", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "nested too deeply" in lines[0] and str(config) in lines[0]


def test_checkpoint_config_nested_too_deeply_is_a_config_error(tmp_path: Path) -> None:
    config = _deep_toml(tmp_path / "greenckpt.toml")
    with pytest.raises(ConfigError, match="nested too deeply") as info:
        load_config(config, env={}, local_dir=str(tmp_path))
    assert "\n" not in str(info.value)
