"""Fakes and contract tests for people who write a meter, a level or a policy (issue 17 item 6).

Why a package and not only tests/: a meter or a checkpoint level written outside greenckpt must
keep the same contract as the shipped ones, and the fakes that test the shipped ones (sysfs
cpufreq/cpuidle trees, powercap and /proc trees, a fake ``pynvml`` and ``ipmitool``, storage
trees) are what such a test needs too. Everything here is SYNTHETIC and labelled so.

* :mod:`greenckpt.testing.cpu`, :mod:`~greenckpt.testing.power`,
  :mod:`~greenckpt.testing.storage`: the fake machine trees and meters.
* :mod:`greenckpt.testing.meter_contract`: ``MeterContract``, the pytest suite every
  ``Meter`` passes.
* :mod:`greenckpt.testing.levels`: ``LevelContract``, checkpoint and recover through a level.

This layer may import pytest (the ``test`` extra, not a runtime dependency), so nothing else in
``src/greenckpt`` imports it (tests/test_layers.py checks both).
"""
