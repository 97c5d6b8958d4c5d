"""The decision policies of greenckpt.ckpt.schedule, each on its own."""

from __future__ import annotations

import pytest

from greenckpt.ckpt.config import load_config
from greenckpt.ckpt.levels import level_spec
from greenckpt.ckpt.schedule import (
    AnyOf,
    Automatic,
    Backoff,
    DecisionPolicy,
    EveryIterations,
    EverySeconds,
    Last,
    fallback_level,
    policy_for,
)
from greenckpt.errors import InvalidValueError


def test_every_iterations_is_due_at_the_next_multiple() -> None:
    policy = EveryIterations(10, level=1)
    last = Last(iteration=10, time=0.0)
    assert not policy.clocked
    assert not policy.due(last, 19, 1e9)
    assert policy.due(last, 20, 0.0)
    # a restart at 25 keeps the multiples: due at 30, not at 35
    assert policy.due(Last(25, 0.0), 30, 0.0)
    with pytest.raises(InvalidValueError, match="level 1 checkpoints every 10 iterations"):
        policy.due(last, None, 0.0)
    assert policy.interval(60.0) == (10, None)


def test_every_seconds_reads_the_clock() -> None:
    policy = EverySeconds(5.0)
    assert policy.clocked
    assert not policy.due(Last(0, 100.0), None, 104.9)
    assert policy.due(Last(0, 100.0), None, 105.0)
    assert policy.interval(60.0) == (None, 5.0)


def test_automatic_asks_for_its_interval_each_time() -> None:
    seconds = [0.0]
    policy = Automatic(lambda: seconds[0])
    assert policy.clocked and policy.due(Last(0, 100.0), None, 100.0)  # before a measurement
    seconds[0] = 30.0
    assert not policy.due(Last(0, 100.0), None, 129.0)
    assert policy.due(Last(0, 100.0), None, 130.0)
    assert policy.interval(60.0) == (None, 60.0)  # never shorter than the floor


def test_any_of_is_due_when_one_is() -> None:
    policy: DecisionPolicy = AnyOf((EveryIterations(10), EverySeconds(5.0)))
    assert policy.clocked
    assert policy.due(Last(0, 0.0), 3, 5.0)
    assert policy.due(Last(0, 0.0), 10, 0.0)
    assert not policy.due(Last(0, 0.0), 3, 1.0)
    assert policy.interval(60.0) == (10, None)


def test_the_configuration_maps_onto_the_policies() -> None:
    config = load_config(
        env={},
        local_dir="/l",
        global_dir="/g",
        l1={"every": "10it"},
        l2={"enabled": True, "every": "5min"},
        l4={"enabled": True, "every": "auto"},
        mtbf="1d",
    )
    assert policy_for(1, config.level(1), lambda: 0.0) == EveryIterations(10, 1)
    assert policy_for(2, config.level(2), lambda: 0.0) == EverySeconds(300.0)
    assert isinstance(policy_for(4, config.level(4), lambda: 0.0), Automatic)


def test_backoff_doubles_up_to_eight_intervals() -> None:
    held = None
    waits = []
    for _ in range(5):
        held = Backoff.after(held, 1, "full", 10, 0.0, (10, None))
        waits.append(held.delay_iterations)
    assert waits == [10, 20, 40, 80, 80]
    assert held is not None and not held.in_seconds and held.over(90, 0.0)
    # no iteration known: counted in seconds from the floor
    timed = Backoff.after(None, 1, "full", None, 5.0, (10, None), minimum=60.0)
    assert timed.in_seconds and timed.delay_s == 60.0 and not timed.over(None, 64.0)


def test_a_held_back_level_falls_back_to_one_surviving_what_it_survives() -> None:
    assert fallback_level(2, [1, 3, 4], level_spec) == 4
    assert fallback_level(1, [2, 3, 4], level_spec) == 2
    assert fallback_level(4, [], level_spec) is None
