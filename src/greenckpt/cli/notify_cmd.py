"""``greenckpt notify``: tell a running greenckpt runtime that a phase starts or ends.

For job scripts of other checkpoint tools, e.g. an SCR or FTI job under ``greenckpt run``::

    greenckpt notify begin checkpoint --path "$SCR_PREFIX" --size 64GiB
    ...                                  # the tool writes its checkpoint
    greenckpt notify end checkpoint      # or: --failed

The socket comes from ``--socket`` or ``GREENCKPT_RUNTIME_SOCKET`` (``greenckpt run`` sets
it). The wire format is documented in :mod:`greenckpt.ckpt.notify_client`. A missing socket,
an unreachable runtime or a refused request prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from greenckpt import units
from greenckpt.ckpt.notify_client import (
    IO_KINDS,
    SOCKET_ENV,
    WIRE_KINDS,
    BeginRequest,
    EndRequest,
    NotifyError,
    PingRequest,
    ProtocolError,
    SocketHook,
    advice_from_reply,
)
from greenckpt.cli.argtypes import non_negative_int, positive_int, unit_type
from greenckpt.cli.commands import command_help
from greenckpt.errors import InvalidValueError
from greenckpt.jsonout import dumps


def _seconds(text: str) -> float:
    """A non-negative number of seconds: a bare number (``12.5``) or a duration (``2min``)."""
    try:
        value = float(text)
    except ValueError:
        try:
            return units.parse_duration(text, allow_zero=True)
        except units.UnitError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def register(sub: Any) -> None:
    """Add the ``notify`` sub-command and its events ``begin``, ``end`` and ``ping``."""
    p = sub.add_parser(
        "notify",
        help=command_help("notify"),
        description="Notify the greenckpt runtime of a phase, from a shell script: run "
        "'greenckpt notify begin checkpoint --path DIR --size 64GiB' before another tool (SCR, "
        "FTI, VeloC, DMTCP) writes a checkpoint and 'greenckpt notify end checkpoint' after it, "
        "so the runtime applies its settings for exactly that span. The socket is "
        f"${SOCKET_ENV} (set by greenckpt run) or --socket.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--socket", help=f"runtime socket path (default: ${SOCKET_ENV}, set by greenckpt run)"
    )
    common.add_argument(
        "--timeout",
        type=unit_type(units.parse_duration),
        default=5.0,
        help="how long to wait for the runtime, e.g. 5s (default 5s)",
    )
    common.add_argument("--json", action="store_true", help="print the runtime's reply as JSON")
    events = p.add_subparsers(dest="event", required=True, metavar="EVENT")

    begin = events.add_parser(
        "begin",
        parents=[common],
        help="a phase starts: print the runtime's advice",
        description="A phase starts on this node. Prints the runtime's advice in one line: the "
        "number of processes that should read or write at once, and the settings it applied.",
    )
    begin.add_argument("kind", choices=WIRE_KINDS, metavar="KIND", help=", ".join(WIRE_KINDS))
    begin.add_argument(
        "--level", type=positive_int, help="checkpoint level (1-4, or a registered one)"
    )
    begin.add_argument(
        "--path",
        help="checkpoint directory or file, which tells the runtime the storage device "
        "(default: the current directory for checkpoint, flush and restart)",
    )
    begin.add_argument(
        "--size",
        type=unit_type(units.parse_size, allow_zero=True),
        default=0.0,
        help="bytes this node writes or reads in the phase, e.g. 64GiB (required for "
        "checkpoint, flush and restart)",
    )
    begin.add_argument(
        "--node", type=non_negative_int, default=0, help="this node's index in the job (default 0)"
    )

    end = events.add_parser(
        "end",
        parents=[common],
        help="a phase has ended",
        description="The phase begun with 'greenckpt notify begin KIND' is over on this node.",
    )
    end.add_argument("kind", choices=WIRE_KINDS, metavar="KIND", help=", ".join(WIRE_KINDS))
    end.add_argument("--failed", action="store_true", help="the phase failed")
    end.add_argument(
        "--seconds", type=_seconds, default=0.0, help="how long the phase took (default 0)"
    )
    end.add_argument(
        "--node", type=non_negative_int, default=0, help="this node's index in the job (default 0)"
    )

    events.add_parser(
        "ping",
        parents=[common],
        help="check that the runtime answers",
        description="Print the runtime's name and version, or fail with status 2.",
    )
    p.set_defaults(run=run)


def _socket_of(ns: argparse.Namespace) -> str:
    path = ns.socket if ns.socket is not None else os.environ.get(SOCKET_ENV, "").strip()
    if not path:
        raise InvalidValueError(
            f"no runtime socket: set {SOCKET_ENV} (greenckpt run sets it for the application) "
            "or give --socket"
        )
    return str(path)


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt notify``."""
    path = _socket_of(ns)
    if ns.event == "begin":
        where = ns.path
        if where is None:
            where = os.getcwd() if ns.kind in IO_KINDS else ""
        elif where:
            where = os.path.abspath(where)
        if ns.kind in IO_KINDS and ns.size < 1:
            raise InvalidValueError(
                f"a {ns.kind} phase needs --size: the bytes this node writes or reads in it, "
                "e.g. --size 64GiB (an estimate will do)"
            )
        request: BeginRequest | EndRequest | PingRequest = BeginRequest(
            ns.kind,
            level=ns.level,
            path=where,
            size=round(ns.size),
            node=ns.node,
            pid=os.getpid(),
        )
    elif ns.event == "end":
        request = EndRequest(ns.kind, node=ns.node, ok=not ns.failed, seconds=ns.seconds)
    else:
        request = PingRequest()
    try:
        with SocketHook(path, timeout=ns.timeout) as hook:
            reply = hook.request(request)
            advice = advice_from_reply(reply) if isinstance(request, BeginRequest) else None
    except NotifyError as exc:
        raise InvalidValueError(str(exc)) from None
    except ProtocolError as exc:  # a begin reply without usable advice
        raise InvalidValueError(
            f"greenckpt runtime at {path} sent a malformed reply: {exc}"
        ) from None
    if ns.json:
        print(dumps(reply))
    elif isinstance(request, BeginRequest):
        assert advice is not None
        io = (
            f"{advice.io_processes} I/O processes"
            if advice.io_processes is not None
            else "no I/O parallelism advised"
        )
        print(f"{request.kind}: {io}" + (f"; {advice.note}" if advice.note else ""))
    elif isinstance(request, EndRequest):
        print(f"{request.kind}: end acknowledged" + ("" if request.ok else " (failed)"))
    else:
        print(f"{reply.get('runtime')} at {path}")
    return 0
