"""Tasks are data: a :class:`TaskSpec` names objects × skill × goal kind × embodiment."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ecrl.envs.layout import PALETTE, SHAPES

SKILLS: tuple[str, ...] = ("push", "pick_place", "stack")
"""Skills.

- ``push``: move objects over the table to targets on it.
- ``pick_place``: grasp objects and carry them to targets on the table or in the air.
- ``stack``: build one tower; the goal row's ``rank`` is each object's level, (k + 1) / N from the bottom.
"""

GOAL_KINDS: tuple[str, ...] = ("positions", "adjacent", "sort", "ordered")
"""Goal kinds.

- ``positions``: each object to its own target; identical objects are interchangeable.
- ``adjacent``: the targets form one tight cluster (objects end up touching their neighbours).
- ``sort``: each colour has a region of the table; objects of one colour are interchangeable and
  go to the targets in their colour's region.
- ``ordered``: the targets must be filled in a given order (the goal row's ``rank``); see
  :class:`~ecrl.envs.push.PushEnv` for how the order is enforced.
"""

EMBODIMENTS: tuple[str, ...] = ("pusher", "fetch")
"""Embodiments: a planar pusher (action: a bounded 2-D displacement) and gymnasium-robotics' Fetch arm
(action: a bounded 3-D displacement of the gripper and a finger command, :mod:`ecrl.envs.fetch`)."""

EMBODIMENT_SKILLS: dict[str, tuple[str, ...]] = {"pusher": ("push",), "fetch": SKILLS}
"""The skills each embodiment can perform."""
EMBODIMENT_MAX_OBJECTS: dict[str, int] = {"pusher": 16, "fetch": 8}
"""How many objects each embodiment's scenes hold."""
SKILL_GOALS: dict[str, tuple[str, ...]] = {
    "push": GOAL_KINDS,
    "pick_place": GOAL_KINDS,
    "stack": ("positions", "ordered"),
}
"""The goal kinds that make sense for each skill (a tower has no cluster or colour regions)."""
STACKABLE_SHAPES: tuple[str, ...] = ("cube", "cylinder")
"""Shapes that can carry and stand on one another (a sphere cannot)."""

SIZE_RANGE = (0.015, 0.035)
"""Allowed object sizes (radius or half side, metres)."""

MAX_OBJECTS = 16


def default_horizon(n_objects: int) -> int:
    """Episode length for ``n_objects``: 100 steps per object plus 50 (20 Hz control)."""
    return 50 + 100 * n_objects


def _check_choice(kind: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {kind} {value!r}: expected one of {list(choices)}")


@dataclass(frozen=True)
class ObjectSpec:
    """One object: its shape (:data:`SHAPES`), colour (:data:`PALETTE`) and size in metres."""

    shape: str = "cube"
    colour: str = "red"
    size: float = 0.025

    def __post_init__(self) -> None:
        _check_choice("shape", self.shape, SHAPES)
        _check_choice("colour", self.colour, tuple(PALETTE))
        lo, hi = SIZE_RANGE
        if not (lo <= float(self.size) <= hi):
            raise ValueError(f"object size must be in [{lo}, {hi}] m, got {self.size!r}")

    @property
    def kind(self) -> tuple[str, str, float]:
        """What makes two objects interchangeable: same shape, colour and size."""
        return (self.shape, self.colour, float(self.size))


@dataclass(frozen=True)
class TaskSpec:
    """A fully specified task: which objects, what to do with them, with which body.

    Args:
        objects: the objects on the table, 1 … :data:`MAX_OBJECTS`.
        skill: one of :data:`SKILLS`.
        goal: one of :data:`GOAL_KINDS`.
        embodiment: one of :data:`EMBODIMENTS`.
        horizon: episode length in steps; ``None`` means :func:`default_horizon`.
    """

    objects: tuple[ObjectSpec, ...]
    skill: str = "push"
    goal: str = "positions"
    embodiment: str = "pusher"
    horizon: int | None = field(default=None)

    def __post_init__(self) -> None:
        objects = tuple(o if isinstance(o, ObjectSpec) else ObjectSpec(**o) for o in self.objects)
        object.__setattr__(self, "objects", objects)
        if not 1 <= len(objects) <= MAX_OBJECTS:
            raise ValueError(f"a task needs 1 … {MAX_OBJECTS} objects, got {len(objects)}")
        _check_choice("skill", self.skill, SKILLS)
        _check_choice("goal kind", self.goal, GOAL_KINDS)
        _check_choice("embodiment", self.embodiment, EMBODIMENTS)
        check_combination(self.skill, self.goal, self.embodiment, tuple(o.shape for o in objects))
        if len(objects) > EMBODIMENT_MAX_OBJECTS[self.embodiment]:
            raise ValueError(
                f"the {self.embodiment!r} embodiment holds at most {EMBODIMENT_MAX_OBJECTS[self.embodiment]} "
                f"objects, got {len(objects)}"
            )
        if self.horizon is not None and int(self.horizon) < 1:
            raise ValueError(f"horizon must be a positive number of steps, got {self.horizon!r}")

    @property
    def n_objects(self) -> int:
        return len(self.objects)

    @property
    def max_steps(self) -> int:
        """The episode length actually used."""
        return default_horizon(self.n_objects) if self.horizon is None else int(self.horizon)

    def sample(self, rng: np.random.Generator) -> TaskSpec:
        """A fixed task is a distribution of one task (see :class:`TaskDistribution`)."""
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSpec:
        if not isinstance(data, dict) or "objects" not in data:
            raise ValueError(f"expected a TaskSpec dict with an 'objects' list, got {data!r}")
        return cls(**{**data, "objects": tuple(ObjectSpec(**o) for o in data["objects"])})

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        return cls.from_dict(json.loads(text))

    @classmethod
    def random(
        cls,
        n_objects: int,
        goal: str = "positions",
        seed: int | np.random.Generator | None = None,
        **kwargs: Any,
    ) -> TaskSpec:
        """A task with ``n_objects`` objects of random shape, colour and size (stackable shapes for ``stack``)."""
        rng = np.random.default_rng(seed)
        shapes = skill_shapes(kwargs.get("skill", "push"))
        objects = tuple(random_object(rng, shapes=shapes) for _ in range(_check_n(n_objects)))
        return cls(objects=objects, goal=goal, **kwargs)


def skill_shapes(skill: str) -> tuple[str, ...]:
    """The shapes a task of ``skill`` may hold."""
    return STACKABLE_SHAPES if skill == "stack" else SHAPES


def check_combination(skill: str, goal: str, embodiment: str, shapes: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` unless ``embodiment`` can do ``skill`` towards a ``goal`` with objects of ``shapes``."""
    if skill not in EMBODIMENT_SKILLS[embodiment]:
        raise ValueError(
            f"the {embodiment!r} embodiment cannot {skill!r}: it does {list(EMBODIMENT_SKILLS[embodiment])} "
            f"(skill {skill!r} needs one of {[e for e, s in EMBODIMENT_SKILLS.items() if skill in s]})"
        )
    if goal not in SKILL_GOALS[skill]:
        raise ValueError(
            f"goal kind {goal!r} makes no sense for skill {skill!r}: expected one of {list(SKILL_GOALS[skill])}"
        )
    bad = sorted(set(shapes) - set(skill_shapes(skill)))
    if bad:
        raise ValueError(f"{' and '.join(bad)}s cannot be stacked: a stack task takes {list(STACKABLE_SHAPES)} only")


def random_object(
    rng: np.random.Generator,
    shapes: tuple[str, ...] = SHAPES,
    colours: tuple[str, ...] = tuple(PALETTE),
    sizes: tuple[float, ...] = (0.02, 0.025, 0.03),
) -> ObjectSpec:
    """An object with shape, colour and size drawn uniformly from the given choices."""
    return ObjectSpec(
        shape=shapes[rng.integers(len(shapes))],
        colour=colours[rng.integers(len(colours))],
        size=float(sizes[rng.integers(len(sizes))]),
    )


def _check_n(n_objects: Any) -> int:
    if isinstance(n_objects, bool) or not isinstance(n_objects, int | np.integer):
        raise ValueError(f"n_objects must be an integer, got {n_objects!r}")
    if not 1 <= n_objects <= MAX_OBJECTS:
        raise ValueError(f"n_objects must be in 1 … {MAX_OBJECTS}, got {n_objects}")
    return int(n_objects)


class TaskDistribution(Protocol):
    """Anything an environment can draw a task from at each reset (a :class:`TaskSpec` is one)."""

    @property
    def n_objects(self) -> int: ...

    def sample(self, rng: np.random.Generator) -> TaskSpec: ...


@dataclass(frozen=True)
class RandomTasks:
    """Every reset draws new objects: ``n_objects`` of random shape, colour and size."""

    n_objects: int = 3
    goal: str = "positions"
    horizon: int | None = None
    skill: str = "push"
    embodiment: str = "pusher"

    def __post_init__(self) -> None:
        _check_n(self.n_objects)
        _check_choice("goal kind", self.goal, GOAL_KINDS)
        _check_choice("skill", self.skill, SKILLS)
        _check_choice("embodiment", self.embodiment, EMBODIMENTS)
        check_combination(self.skill, self.goal, self.embodiment)

    def sample(self, rng: np.random.Generator) -> TaskSpec:
        return TaskSpec.random(
            self.n_objects, goal=self.goal, seed=rng, horizon=self.horizon, skill=self.skill, embodiment=self.embodiment
        )
