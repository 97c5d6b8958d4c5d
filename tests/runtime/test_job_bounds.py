"""The job collector's bounds at scale (issue 15 item 7): what it retains grows with nodes +
phases, never nodes × phases, and a turn of its loop touches only the connections that have
output — not every connection (which made 1,000 agents quadratic). Sizes, not times: the
benchmark (benchmarks/bench_job_scale.py) prints the costs."""

from __future__ import annotations

import gc
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from greenckpt.runtime.job import JobCollector
from greenckpt.runtime.job_bounds import MAX_SERIES_POINTS
from tests.runtime.test_job_collector import TOKEN, FakeAgent, summary

NODE_BYTES = 32 << 10
"""What the leader may keep per node: its totals and a 1,000-point series (16 KiB packed)."""
PHASE_BYTES = 4 << 10
"""What the leader may keep per job phase (one per kind and ordinal, shared by every node)."""


def _final(node: int, phases: int) -> dict[str, Any]:
    doc = summary(node % 7, phases)
    doc["series"] = {
        "t_s": [0.01 * (i + 1) for i in range(MAX_SERIES_POINTS)],
        "power_w": [100.0 + node % 7 + (i % 10) for i in range(MAX_SERIES_POINTS)],
        "source": "estimated",
    }
    return doc


def _retained(nodes: int, phases: int) -> int:
    """Bytes the collector holds once every node's final has arrived (tracemalloc)."""
    finals = [_final(k, phases) for k in range(nodes)]  # built before the measure starts

    def agent(c: JobCollector, k: int) -> None:
        a = FakeAgent(c.address)
        a.hello(k)
        a.send({"type": "final", "summary": finals[k]})
        a.close()

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with JobCollector("bound", nodes, TOKEN) as c:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda k: agent(c, k), range(nodes)))
            assert c.wait_for({"finished"}, 60)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
            views = c.nodes()
        assert all(len(v.series["t_s"]) == MAX_SERIES_POINTS for v in views if v.series)
        return held
    finally:
        tracemalloc.stop()


def test_the_leader_retains_nodes_plus_phases_not_their_product() -> None:
    nodes = 200
    for phases in (10, 80):
        held = _retained(nodes, phases)
        bound = nodes * NODE_BYTES + 2 * phases * PHASE_BYTES
        assert held < bound, f"{held} bytes retained for {nodes} nodes x {phases} phases"


def test_a_turn_of_the_loop_touches_only_connections_with_output() -> None:
    nodes = 60
    with JobCollector("turns", nodes, TOKEN) as c:
        calls = []
        modify = c._selector.modify

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[0])
            return modify(*args, **kwargs)

        c._selector.modify = counted  # type: ignore[method-assign]
        agents = [FakeAgent(c.address) for _ in range(nodes)]
        for k, a in enumerate(agents):
            a.hello(k)
        assert c.wait_for({"running"}, 30)
        for i in range(5):
            for a in agents:
                a.send({"type": "progress", "t_s": 2.0 * i, "records": i, "energy_j": 1.0})
        c.stop_all()
        for k, a in enumerate(agents):
            assert a.receive()["type"] == "stop"
            a.send({"type": "final", "summary": summary(k, 2)})
        assert c.wait_for({"finished"}, 30)
        for a in agents:
            a.close()
    # every connection is selected for writing once (the stop) and back: 2 per node at most
    assert len(calls) <= 2 * nodes, f"{len(calls)} selector changes for {nodes} connections"
