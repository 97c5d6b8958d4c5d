"""Choose settings and intervals from a profile with the model.

:mod:`greenckpt.optimize.profile_data` defines the profile file format and its typed objects (the
profiler above fills it, the optimizer reads it); :mod:`greenckpt.optimize.planner` does the
joint choice of checkpoint settings, restart settings and interval, the governor baselines,
the constraints; :mod:`greenckpt.optimize.front` the Pareto front.
"""

from greenckpt.optimize.front import ParetoPoint, pareto_front
from greenckpt.optimize.planner import (
    BASELINES,
    Baseline,
    Choice,
    Plan,
    PlanError,
    Savings,
    Scenario,
    plan,
)
from greenckpt.optimize.profile_data import (
    FORMAT_VERSION,
    Profile,
    ProfileError,
    ProfilePoint,
    load_profile,
    profile_from_json,
    profile_to_json,
    save_profile,
)

__all__ = [
    "BASELINES",
    "FORMAT_VERSION",
    "Baseline",
    "Choice",
    "ParetoPoint",
    "Plan",
    "PlanError",
    "Profile",
    "ProfileError",
    "ProfilePoint",
    "Savings",
    "Scenario",
    "load_profile",
    "pareto_front",
    "plan",
    "profile_from_json",
    "profile_to_json",
    "save_profile",
]
