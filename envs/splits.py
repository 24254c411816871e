"""Compositional train/test splits: which factor combinations are held out of training."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecrl.envs.layout import PALETTE, SHAPES
from ecrl.envs.task import GOAL_KINDS, ObjectSpec, TaskSpec, _check_choice, _check_n, random_object

OBJECT_FACTORS = ("shape", "colour", "size")
FACTORS = (*OBJECT_FACTORS, "goal")
PARTS = ("train", "test")


@dataclass(frozen=True)
class HeldOut:
    """One held-out combination of two factor values, e.g. ``HeldOut("colour", "red", "shape", "cube")``.

    Two object factors are held out *on one object* (no red cube in training); an object factor with
    ``goal`` is held out *in one task* (no sphere in a ``sort`` task in training).
    """

    factor_a: str
    value_a: Any
    factor_b: str
    value_b: Any

    def __post_init__(self) -> None:
        _check_choice("factor", self.factor_a, FACTORS)
        _check_choice("factor", self.factor_b, FACTORS)
        if self.factor_a == self.factor_b or self.factor_a == "goal":
            raise ValueError(
                f"a held-out pair needs two different factors with the object factor first, got "
                f"({self.factor_a!r}, {self.factor_b!r})"
            )
        for factor, value in ((self.factor_a, self.value_a), (self.factor_b, self.value_b)):
            choices = {"shape": SHAPES, "colour": tuple(PALETTE), "goal": GOAL_KINDS}.get(factor)
            if choices is not None:
                _check_choice(factor, value, choices)

    def matches_object(self, obj: ObjectSpec) -> bool:
        return getattr(obj, self.factor_a) == self.value_a and (
            self.factor_b == "goal" or getattr(obj, self.factor_b) == self.value_b
        )

    def occurs_in(self, spec: TaskSpec) -> bool:
        """True if ``spec`` contains this combination."""
        if self.factor_b == "goal" and spec.goal != self.value_b:
            return False
        return any(self.matches_object(o) for o in spec.objects)

    def make_object(self, rng: np.random.Generator, sizes: tuple[float, ...]) -> ObjectSpec:
        """A random object that carries this combination's object factor value(s)."""
        obj = random_object(rng, sizes=sizes)
        values = {self.factor_a: self.value_a}
        if self.factor_b != "goal":
            values[self.factor_b] = self.value_b
        return ObjectSpec(**{**obj.__dict__, **values})


@dataclass(frozen=True)
class CompositionalSplit:
    """Held-out factor combinations, and deterministic sampling of train or test tasks.

    A *train* task contains none of the held-out combinations; a *test* task contains at least one
    (one object carries it, or the task's goal kind does); every other factor is drawn at random.

    Args:
        held_out: the combinations kept out of training.
        goals: goal kinds drawn from when a sample does not fix one.
        sizes: object sizes drawn from.
    """

    held_out: tuple[HeldOut, ...]
    goals: tuple[str, ...] = ("positions",)
    sizes: tuple[float, ...] = (0.02, 0.025, 0.03)

    def __post_init__(self) -> None:
        held = tuple(h if isinstance(h, HeldOut) else HeldOut(*h) for h in self.held_out)
        object.__setattr__(self, "held_out", held)
        if not held:
            raise ValueError("a compositional split needs at least one held-out combination")
        for goal in self.goals:
            _check_choice("goal kind", goal, GOAL_KINDS)
        for h in held:
            if h.factor_b == "goal" and h.value_b not in self.goals:
                raise ValueError(f"held-out goal kind {h.value_b!r} is not among this split's goals {self.goals}")

    def is_test(self, spec: TaskSpec) -> bool:
        """True if ``spec`` contains a held-out combination."""
        return any(h.occurs_in(spec) for h in self.held_out)

    def sample(
        self,
        seed: int | np.random.Generator | None,
        part: str = "train",
        n_objects: int = 3,
        goal: str | None = None,
    ) -> TaskSpec:
        """Draw a ``part`` task with ``n_objects`` objects; the same seed gives the same task."""
        _check_choice("split part", part, PARTS)
        n_objects = _check_n(n_objects)
        rng = np.random.default_rng(seed)
        goals = self.goals if goal is None else (goal,)
        if part == "test":
            usable = [h for h in self.held_out if h.factor_b != "goal" or h.value_b in goals]
            if not usable:
                raise ValueError(f"no held-out combination of this split can occur with goal kinds {goals}")
            held = usable[rng.integers(len(usable))]
            goal = held.value_b if held.factor_b == "goal" else goals[rng.integers(len(goals))]
            objects = [random_object(rng, sizes=self.sizes) for _ in range(n_objects)]
            objects[rng.integers(n_objects)] = held.make_object(rng, self.sizes)
            return TaskSpec(objects=tuple(objects), goal=goal)
        for _ in range(10_000):
            spec = TaskSpec(
                objects=tuple(random_object(rng, sizes=self.sizes) for _ in range(n_objects)),
                goal=goals[rng.integers(len(goals))],
            )
            if not self.is_test(spec):
                return spec
        raise ValueError(f"could not draw a train task free of {self.held_out}: too much is held out")

    def tasks(self, part: str = "train", n_objects: int = 3, goal: str | None = None) -> SplitTasks:
        """The task distribution of one part, for an environment to draw from at each reset."""
        return SplitTasks(self, part, n_objects, goal)

    def to_dict(self) -> dict[str, Any]:
        return {
            "held_out": [list(h.__dict__.values()) for h in self.held_out],
            "goals": list(self.goals),
            "sizes": list(self.sizes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompositionalSplit:
        if not isinstance(data, dict) or "held_out" not in data:
            raise ValueError(f"expected a CompositionalSplit dict with 'held_out', got {data!r}")
        return cls(
            held_out=tuple(HeldOut(*h) for h in data["held_out"]),
            goals=tuple(data.get("goals", ("positions",))),
            sizes=tuple(data.get("sizes", (0.02, 0.025, 0.03))),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> CompositionalSplit:
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True)
class SplitTasks:
    """One part of a :class:`CompositionalSplit` as a task distribution (see ``TaskDistribution``)."""

    split: CompositionalSplit
    part: str = "train"
    n_objects: int = 3
    goal: str | None = None

    def sample(self, rng: np.random.Generator) -> TaskSpec:
        return self.split.sample(rng, self.part, self.n_objects, self.goal)


COLOUR_SHAPE = CompositionalSplit(
    held_out=(
        HeldOut("colour", "red", "shape", "cube"),
        HeldOut("colour", "blue", "shape", "cylinder"),
        HeldOut("colour", "green", "shape", "sphere"),
        HeldOut("colour", "yellow", "shape", "cube"),
    )
)
"""Preset: four colour × shape pairs never seen in training."""

SHAPE_GOAL = CompositionalSplit(
    held_out=(HeldOut("shape", "sphere", "goal", "sort"), HeldOut("shape", "cylinder", "goal", "ordered")),
    goals=GOAL_KINDS,
)
"""Preset: spheres never sorted and cylinders never ordered in training."""

SPLITS: dict[str, CompositionalSplit] = {"colour_shape": COLOUR_SHAPE, "shape_goal": SHAPE_GOAL}
