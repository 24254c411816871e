"""Scenes, tasks, compositional splits, scripted experts and gymnasium registration.

Importing this package registers ``ecrl/Push-v0`` (every option as a keyword of ``gym.make``),
``ecrl/Push1-v0`` … ``ecrl/Push3-v0`` and a few named variants, the Fetch arm's skills
``ecrl/FetchPush-v0``, ``ecrl/FetchPickPlace-v0`` and ``ecrl/FetchStack-v0`` (``n_objects=`` …), and the OGBench cube adapters
``ecrl/OGBenchCube-v0`` (``n_cubes``, ``task_id`` …) and ``ecrl/OGBenchCube{Single,…,Octuple}-v0``
(these need the optional extra ``ecrl[ogbench]`` when made, not when registered).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ecrl.envs.expert import ScriptedExpert
from ecrl.envs.fetch import FetchEnv
from ecrl.envs.fetch_expert import FetchExpert
from ecrl.envs.layout import (
    AGENT_GRIPPER,
    ENTITY_DIM,
    ENTITY_FIELDS,
    ENTITY_PRESENT,
    ENTITY_XY,
    GOAL_DIM,
    GOAL_FIELDS,
    GOAL_PRESENT,
    GOAL_XY,
    PALETTE,
    SHAPES,
    SUCCESS_DISTANCE,
)
from ecrl.envs.ogbench import CUBE_ENV_TYPES
from ecrl.envs.push import PushEnv
from ecrl.envs.splits import (
    COLOUR_SHAPE,
    SHAPE_GOAL,
    SKILL_COLOUR,
    SKILL_SHAPE,
    SKILL_SHAPE_GRASP,
    SKILL_SHAPE_SINGLE,
    SPLITS,
    CompositionalSplit,
    HeldOut,
)
from ecrl.envs.task import EMBODIMENTS, GOAL_KINDS, MAX_OBJECTS, SKILLS, ObjectSpec, RandomTasks, TaskSpec

__all__ = [
    "AGENT_GRIPPER",
    "COLOUR_SHAPE",
    "EMBODIMENTS",
    "ENTITY_DIM",
    "ENTITY_FIELDS",
    "ENTITY_PRESENT",
    "ENTITY_XY",
    "GOAL_DIM",
    "GOAL_FIELDS",
    "GOAL_PRESENT",
    "GOAL_XY",
    "GOAL_KINDS",
    "FETCH_IDS",
    "FETCH_SKILL_IDS",
    "MAX_OBJECTS",
    "OGBENCH_IDS",
    "PALETTE",
    "REGISTERED_IDS",
    "SHAPES",
    "SUCCESS_DISTANCE",
    "SHAPE_GOAL",
    "SKILLS",
    "SKILL_COLOUR",
    "SKILL_SHAPE",
    "SKILL_SHAPE_GRASP",
    "SKILL_SHAPE_SINGLE",
    "SPLITS",
    "CompositionalSplit",
    "FetchEnv",
    "FetchExpert",
    "HeldOut",
    "ObjectSpec",
    "PushEnv",
    "RandomTasks",
    "ScriptedExpert",
    "TaskSpec",
    "make_env",
]


def make_env(spec: TaskSpec | dict, **kwargs: Any) -> gym.Env:
    """The environment of a task (wrapped by ``gym.make`` like every registered id).

    Args:
        spec: the task, or its dict form (``TaskSpec.to_dict``).
        **kwargs: any option of its embodiment's env, :class:`PushEnv` or :class:`FetchEnv`
            (``n_max``, ``reward_type``, ``render_mode`` …).
    """
    if isinstance(spec, dict):
        spec = TaskSpec.from_dict(spec)
    if not isinstance(spec, TaskSpec):
        raise ValueError(f"make_env expects a TaskSpec, got {type(spec).__name__}")
    if spec.embodiment == "fetch":
        return gym.make(FETCH_SKILL_IDS[spec.skill], task=spec, **kwargs)
    return gym.make("ecrl/Push-v0", task=spec, **kwargs)


_VARIANTS: dict[str, dict[str, Any]] = {
    "Push-v0": {},
    **{f"Push{n}-v0": {"n_objects": n} for n in (1, 2, 3)},
    "Push6-v0": {"n_objects": 6},
    "PushAdjacent3-v0": {"n_objects": 3, "goal": "adjacent"},
    "PushSort4-v0": {"n_objects": 4, "goal": "sort"},
    "PushOrdered3-v0": {"n_objects": 3, "goal": "ordered"},
}
REGISTERED_IDS: tuple[str, ...] = tuple(f"ecrl/{name}" for name in _VARIANTS)

for _name, _kwargs in _VARIANTS.items():
    if f"ecrl/{_name}" not in gym.registry:
        gym.register(f"ecrl/{_name}", entry_point="ecrl.envs.push:PushEnv", kwargs=_kwargs)

FETCH_SKILL_IDS = {"push": "ecrl/FetchPush-v0", "pick_place": "ecrl/FetchPickPlace-v0", "stack": "ecrl/FetchStack-v0"}
"""The Fetch arm's registered id per skill."""
FETCH_IDS: tuple[str, ...] = tuple(FETCH_SKILL_IDS.values())
"""The Fetch arm's skills (:class:`FetchEnv`), 3 objects unless ``n_objects=`` (1 … 8) says otherwise."""

for _skill, _id in FETCH_SKILL_IDS.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point="ecrl.envs.fetch:FetchEnv", kwargs={"skill": _skill})

_OGBENCH_VARIANTS: dict[str, dict[str, Any]] = {
    "OGBenchCube-v0": {},
    **{f"OGBenchCube{name.capitalize()}-v0": {"n_cubes": n} for n, name in CUBE_ENV_TYPES.items()},
}
OGBENCH_IDS: tuple[str, ...] = tuple(f"ecrl/{name}" for name in _OGBENCH_VARIANTS)
"""The OGBench cube adapters (:class:`ecrl.envs.ogbench.OGBenchCubeEnv`; extra ``ecrl[ogbench]``)."""

for _name, _kwargs in _OGBENCH_VARIANTS.items():
    if f"ecrl/{_name}" not in gym.registry:
        gym.register(f"ecrl/{_name}", entry_point="ecrl.envs.ogbench:OGBenchCubeEnv", kwargs=_kwargs)
