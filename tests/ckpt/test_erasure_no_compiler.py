"""Level 3's parity encoder never runs a compiler in a rank (issue 28 item 5).

The native libraries are built at install, or by ``greenckpt config``; where libgreenckpt_gf
is not built, importing greenckpt.ckpt.redundancy.erasure or greenckpt.native.gf and encoding run no
compiler (a job's every rank would, at its first level-3 checkpoint): the parity comes from
zfec, the same bytes, after one warning line saying to run ``greenckpt config``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_RANK = textwrap.dedent(
    """
    import json, sys, warnings
    from pathlib import Path
    import greenckpt.native as native
    native.PACKAGED_LIB_DIR = Path(sys.argv[1])  # as if the install built nothing
    from greenckpt.ckpt.redundancy.erasure import ErasureCode
    from greenckpt.native import gf
    pieces = [bytes(range(256)) * 40, b"x" * 5000, b"short"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = ErasureCode(3, 2, "reed-solomon")
        parity = code.encode(pieces)
        code.encode(pieces)  # the second encode says nothing more
        decoded = code.decode({1: pieces[1], 3: parity[0], 4: parity[1]},
                              [len(p) for p in pieces])
    print(json.dumps({
        "available": gf.available(),
        "decoded": decoded == pieces,
        "warnings": [str(w.message) for w in caught],
    }))
    """
)


def test_importing_and_encoding_run_no_compiler_and_fall_back_to_zfec(tmp_path: Path) -> None:
    called = tmp_path / "compiler-was-run"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("cc", "gcc", "clang", "recording-cc"):  # every compiler a build would try
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
        tool.chmod(0o755)
    env = {
        **os.environ,
        "CC": str(bin_dir / "recording-cc"),
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "XDG_CACHE_HOME": str(tmp_path / "empty-cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", _RANK, str(tmp_path / "not-built")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert not called.exists(), called.read_text()  # no compiler was run
    assert not (tmp_path / "empty-cache").exists()  # nor any build begun
    assert result["available"] is False and result["decoded"] is True
    [warning] = result["warnings"]
    assert "\n" not in warning and "greenckpt config" in warning and "zfec" in warning
