"""Stand-ins for DMTCP's four commands, for tests/native/test_dmtcp_recipe.py.

One file, linked under the names dmtcp_coordinator, dmtcp_launch, dmtcp_command and
dmtcp_restart; each call is appended to $FAKE_DMTCP_DIR/calls.log (one JSON line). They behave
like the real ones as far as examples/dmtcp/greenckpt-dmtcp.sh can tell: the coordinator writes
its port to --port-file and runs until --quit; dmtcp_launch registers the application as a peer
and execs it; --bcheckpoint writes one image per live peer (GENERATION x 1000 bytes, so each
checkpoint's size differs from the one before) and fails like DMTCP when no peer runs;
--status prints NUM_PEERS and RUNNING; dmtcp_restart registers a peer that is not RUNNING until
it has "restored" (RESTORE_S later), then execs the command line saved in the first image.

Test controls, files in $FAKE_DMTCP_DIR: ``stop_after`` (N: after the N-th checkpoint attempt
of this coordinator, create ``stop``, which the test application waits for), ``fail`` (every
checkpoint fails).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

STATE = Path(os.environ["FAKE_DMTCP_DIR"])
PEERS = STATE / "peers"
PORT = 7779
RESTORE_S = 0.3


def log(tool: str, **fields: object) -> None:
    line = json.dumps({"tool": tool, "t": time.time(), **fields})
    with open(STATE / "calls.log", "a") as f:
        f.write(line + "\n")


def option(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[i + 1]
    return None


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def live_peers() -> dict[int, dict[str, object]]:
    PEERS.mkdir(exist_ok=True)
    found = {}
    for entry in PEERS.iterdir():
        if alive(int(entry.name)):
            found[int(entry.name)] = json.loads(entry.read_text())
    return found


def register(pid: int, argv: list[str], ckptdir: str, running: bool) -> None:
    PEERS.mkdir(exist_ok=True)
    tmp = PEERS / f".{pid}"
    tmp.write_text(json.dumps({"argv": argv, "ckptdir": ckptdir, "running": running}))
    tmp.rename(PEERS / str(pid))


def coordinator(argv: list[str]) -> int:
    log("dmtcp_coordinator", argv=argv, pid=os.getpid())
    (STATE / "coordinator.pid").write_text(str(os.getpid()))
    (STATE / "attempts").write_text("0")
    (STATE / "quit").unlink(missing_ok=True)
    port_file = option(argv, "--port-file")
    assert port_file is not None and option(argv, "--port", "-p") == "0"
    Path(port_file).write_text(f"{PORT}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while not (STATE / "quit").exists():
        time.sleep(0.05)
    return 0


def launch(argv: list[str]) -> int:
    port, ckptdir = option(argv, "--coord-port"), option(argv, "--ckptdir")
    app = argv[argv.index("--ckptdir") + 2 :]
    log("dmtcp_launch", argv=argv, pid=os.getpid(), app=app)
    assert port == str(PORT) and "--join-coordinator" in argv and ckptdir is not None
    register(os.getpid(), app, ckptdir, running=True)
    os.execvp(app[0], app)


def checkpoint(port: str | None) -> int:
    attempts = int((STATE / "attempts").read_text()) + 1
    (STATE / "attempts").write_text(str(attempts))
    peers = {pid: p for pid, p in live_peers().items() if p["running"]}
    images: list[tuple[str, int]] = []
    ok = bool(peers) and not (STATE / "fail").exists()
    if ok:
        generation = (
            int((STATE / "generation").read_text()) + 1 if (STATE / "generation").exists() else 1
        )
        (STATE / "generation").write_text(str(generation))
        time.sleep(0.1)
        for pid, peer in peers.items():
            name = os.path.basename(str(peer["argv"][0]))  # type: ignore[index]
            image = Path(str(peer["ckptdir"])) / f"ckpt_{name}_{pid}.dmtcp"
            head = json.dumps({"argv": peer["argv"], "generation": generation}) + "\n"
            image.write_text(head.ljust(generation * 1000, "."))
            images.append((str(image), image.stat().st_size))
    log("dmtcp_command", argv=["--bcheckpoint"], port=port, ok=ok, images=images)
    stop_after = STATE / "stop_after"
    if stop_after.exists() and attempts >= int(stop_after.read_text()):
        (STATE / "stop").touch()
    if not ok:
        print(
            "Error, computation not in running state.  Either a checkpoint is\n"
            " currently happening or there are no connected processes.",
            file=sys.stderr,
        )
        return 2
    return 0


def command(argv: list[str]) -> int:
    port = option(argv, "--coord-port", "-p", "--port")
    if port != str(PORT) or not (STATE / "coordinator.pid").exists():
        print("Coordinator not found. Please check port and host.", file=sys.stderr)
        return 2
    if "--bcheckpoint" in argv or "-bc" in argv:
        return checkpoint(port)
    if "--status" in argv or "-s" in argv:
        peers = live_peers()
        running = bool(peers) and all(p["running"] for p in peers.values())
        log("dmtcp_command", argv=["--status"], peers=len(peers), running=running)
        print(f"Coordinator:\n  Host: localhost\n  Port: {port}\nStatus...")
        print(f"  NUM_PEERS={len(peers)}\n  RUNNING={'yes' if running else 'no'}")
        print("  CKPT_INTERVAL=0 (checkpoint manually)")
        return 0
    if "--quit" in argv or "-q" in argv:
        log("dmtcp_command", argv=["--quit"])
        for pid in live_peers():
            os.kill(pid, signal.SIGTERM)
        (STATE / "quit").touch()
        return 0
    print("Unknown command, try 'dmtcp_command --help'", file=sys.stderr)
    return 2


def restart(argv: list[str]) -> int:
    ckptdir = option(argv, "--ckptdir")
    images = argv[argv.index("--ckptdir") + 2 :]
    log("dmtcp_restart", argv=argv, pid=os.getpid(), images=images)
    assert option(argv, "--coord-port") == str(PORT) and "--join-coordinator" in argv
    assert ckptdir is not None and images
    with open(images[0]) as f:
        app = json.loads(f.readline())["argv"]
    register(os.getpid(), app, ckptdir, running=False)
    time.sleep(RESTORE_S)
    (STATE / "stop").unlink(missing_ok=True)  # the restored application is mid-loop again
    register(os.getpid(), app, ckptdir, running=True)
    log("dmtcp_restart", restored=True)
    os.execvp(app[0], app)


def main() -> int:
    tool = os.path.basename(sys.argv[0])
    handlers = {
        "dmtcp_coordinator": coordinator,
        "dmtcp_launch": launch,
        "dmtcp_command": command,
        "dmtcp_restart": restart,
    }
    return handlers[tool](sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
