"""The job leader's collector: hello, progress and final from agents over TCP; a wrong token,
an oversize message and an agent that dies are refused or marked; 1,000 agents' finals
aggregate into a report whose size does not grow with nodes × phases. Also the ``{node}``
placeholder of the socket path (each emulated node's ranks reach their own agent)."""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.notify_client import SocketHook
from greenckpt.runtime.job import JobCollector, encode_message
from greenckpt.runtime.job_report import JobReport
from greenckpt.runtime.notify import NotifyServer
from tests.runtime.test_notify import FakeTarget

TOKEN = "s3cret"


class FakeAgent:
    """A node agent's side of the wire, by hand."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode_message(message))

    def hello(self, node: int, token: str = TOKEN) -> None:
        self.send(
            {
                "type": "hello",
                "token": token,
                "node": node,
                "host": f"h{node}",
                "pid": 1,
                "socket": f"/s/node{node}.sock",
                "power_source": "estimated",
                "t0_unix": 1000.0,
            }
        )

    def receive(self) -> dict[str, Any]:
        return json.loads(self.sock.makefile("rb").readline())

    def close(self) -> None:
        self.sock.close()


def summary(node: int, phases: int) -> dict[str, Any]:
    """A node's final summary: ``phases`` compute + checkpoint pairs of 1 s at 100 W."""
    records = []
    for i in range(phases):
        t = 2.0 * i
        records.append(
            {
                "kind": "compute",
                "start_s": t,
                "end_s": t + 1,
                "node_energy_j": 100.0,
                "power_source": "estimated",
                "level": None,
            }
        )
        records.append(
            {
                "kind": "checkpoint",
                "start_s": t + 1,
                "end_s": t + 2,
                "ok": True,
                "node_energy_j": 50.0 + node,
                "power_source": "estimated",
                "level": 1,
            }
        )
    energy = phases * (150.0 + node)
    return {
        "power": {"source": "estimated", "meters": ["estimator"]},
        "total": {"seconds": 2.0 * phases, "energy_j": energy, "source": "estimated"},
        "useful_compute_s": float(phases),
        "by_kind": {
            "compute": {
                "count": phases,
                "failed": 0,
                "seconds": float(phases),
                "energy_j": 100.0 * phases,
                "source": "estimated",
            },
            "checkpoint": {
                "count": phases,
                "failed": 0,
                "seconds": float(phases),
                "energy_j": (50.0 + node) * phases,
                "source": "estimated",
            },
        },
        "by_level": [
            {
                "kind": "checkpoint",
                "level": 1,
                "count": phases,
                "failed": 0,
                "seconds": float(phases),
                "energy_j": (50.0 + node) * phases,
                "source": "estimated",
            }
        ],
        "notes": [f"note {i}" for i in range(50)],
        "records": records,
        "t0_unix": 1000.0,
        "series": {
            "t_s": [1.0 * i for i in range(1, 2 * phases + 1)],
            "power_w": [100.0 + node] * (2 * phases),
            "source": "estimated",
        },
    }


@pytest.fixture
def collector() -> Iterator[JobCollector]:
    with JobCollector("job-1", 3, TOKEN) as c:
        yield c


def report_of(c: JobCollector) -> JobReport:
    return JobReport.build(
        job_id=c.job_id,
        launcher="test",
        command=["app"],
        nodes=c.nodes(),
        phases=c.phases(),
        started_unix=1000.0,
        ended_unix=1010.0,
    )


def test_hello_progress_final_and_stop(collector: JobCollector) -> None:
    agents = [FakeAgent(collector.address) for _ in range(3)]
    for k, a in enumerate(agents):
        a.hello(k)
    assert collector.wait_for({"running"}, 10)
    agents[0].send(
        {
            "type": "progress",
            "t_s": 3.0,
            "records": 2,
            "energy_j": 5.0,
            "by_kind": {"compute": {"count": 2, "seconds": 3.0, "energy_j": 5.0}},
        }
    )
    collector.stop_all()
    for k, a in enumerate(agents):
        assert a.receive()["type"] == "stop"
        a.send({"type": "final", "summary": summary(k, 4)})
    assert collector.wait_for({"finished"}, 10)
    views = collector.nodes()
    assert [v.host for v in views] == ["h0", "h1", "h2"]
    assert all(isinstance(v.summary and v.summary["records"], int) for v in views)  # dropped
    assert len(views[0].summary["notes"]) == 21  # bounded (20 + "... and 30 more")
    doc = report_of(collector).doc
    assert doc["total"]["energy_j"] == pytest.approx(4 * (150 + 151 + 152))
    assert doc["total"]["complete"] is True
    assert doc["by_kind"]["checkpoint"]["count"] == 12
    assert doc["by_level"][0]["level"] == 1 and doc["by_level"][0]["nodes"] == 3
    checkpoints = [p for p in doc["phases"] if p["kind"] == "checkpoint"]
    assert len(checkpoints) == 4 and all(p["nodes"] == 3 for p in checkpoints)
    assert checkpoints[0]["energy_j"] == pytest.approx(50 + 51 + 52)
    assert doc["series"]["outlier_node"] in (0, 2) and doc["series"]["nodes"] == 3
    assert doc["epe"]["observed_w"] == pytest.approx(doc["total"]["energy_j"] / 4.0)
    for a in agents:
        a.close()


def test_a_wrong_token_is_refused(collector: JobCollector) -> None:
    agent = FakeAgent(collector.address)
    agent.hello(0, token="guess")
    assert agent.sock.recv(10) == b""  # closed by the leader
    assert collector.nodes()[0].state == "starting"
    assert any("wrong job token" in n for n in collector.notes)


def test_an_oversize_message_is_refused_not_buffered() -> None:
    with JobCollector("j", 1, TOKEN, max_message=4096) as c:
        agent = FakeAgent(c.address)
        agent.hello(0)
        assert c.wait_for({"running"}, 10)
        with pytest.raises(OSError):
            for _ in range(100):  # no newline: an endless line
                agent.sock.sendall(b"x" * 1024)
                c.wait_for({"died"}, 0.05)
        assert c.wait_for({"died"}, 10)
        assert any("over 4096 bytes" in n for n in c.notes)


def test_an_agent_that_dies_keeps_its_last_progress(collector: JobCollector) -> None:
    agents = [FakeAgent(collector.address) for _ in range(3)]
    for k, a in enumerate(agents):
        a.hello(k)
    assert collector.wait_for({"running"}, 10)
    agents[1].send(
        {
            "type": "progress",
            "t_s": 7.5,
            "records": 3,
            "energy_j": 42.0,
            "by_kind": {"checkpoint": {"count": 1, "seconds": 2.0, "energy_j": 20.0}},
        }
    )
    agents[1].close()  # as by SIGKILL: no final
    assert collector.wait_for({"died"}, 10, [1])
    collector.stop_all()
    for k in (0, 2):
        agents[k].send({"type": "final", "summary": summary(k, 2)})
    assert collector.wait_for({"finished", "died"}, 10)
    doc = report_of(collector).doc
    died = doc["nodes"][1]
    assert died["state"] == "died" and died["energy_j"] == 42.0
    assert "7.5 s after it started" in died["accounting_ends"]
    assert doc["states"]["finished"] == [0, 2] and doc["total"]["complete"] is False
    assert doc["total"]["energy_j"] == pytest.approx(2 * 150 + 2 * 152 + 42)
    assert any(n.startswith("node 1 died") for n in doc["notes"])


def _one_agent(address: str, node: int, phases: int) -> None:
    agent = FakeAgent(address)
    agent.hello(node)
    agent.send({"type": "final", "summary": summary(node % 7, phases)})
    agent.close()


def _thousand(phases: int) -> tuple[JobReport, JobCollector]:
    nodes = 1000
    with JobCollector("big", nodes, TOKEN) as c:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: _one_agent(c.address, k, phases), range(nodes)))
        assert c.wait_for({"finished"}, 60)
        return report_of(c), c


def test_a_thousand_agents_aggregate_in_bounded_memory() -> None:
    """Finals of 1,000 agents from threads: job phases are kinds × phases (not nodes × phases),
    no node keeps its records, and a node's share of the report does not grow with phases."""
    small, _ = _thousand(3)
    big, c = _thousand(30)
    assert len(big.doc["phases"]) == 2 * 30 and len(small.doc["phases"]) == 2 * 3
    assert all(p["nodes"] == 1000 for p in big.doc["phases"])
    assert all(isinstance(v.summary and v.summary["records"], int) for v in c.nodes())
    per_node_small = len(json.dumps(small.doc["nodes"])) / 1000
    per_node_big = len(json.dumps(big.doc["nodes"])) / 1000
    assert per_node_big < per_node_small + 20  # only digits change
    assert big.doc["by_kind"]["checkpoint"]["count"] == 30_000


def test_socket_hook_reaches_each_nodes_own_socket() -> None:
    """``{node}`` in GREENCKPT_RUNTIME_SOCKET is replaced by the call's node index; a call for
    another node reconnects to that node's socket."""
    base = Path(tempfile.mkdtemp(prefix="gcj-", dir="/tmp"))
    targets = [FakeTarget(), FakeTarget()]
    with (
        NotifyServer(targets[0], base / "node0.sock"),
        NotifyServer(targets[1], base / "node1.sock"),
    ):
        hook = SocketHook(str(base / "node{node}.sock"))
        for node in (0, 1, 1, 0):
            hook.begin("checkpoint", level=1, path="/x", size=10, node=node)
            hook.end("checkpoint", node=node, ok=True, seconds=0.1)
        hook.close()
    assert targets[0].nodes == [0, 0] and targets[1].nodes == [1, 1]
    base.rmdir()
