"""Compositional train/test splits: which factor combinations are held out of training."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ecrl.envs.layout import PALETTE, SHAPES
from ecrl.envs.task import (
    EMBODIMENT_SKILLS,
    EMBODIMENTS,
    GOAL_KINDS,
    SKILL_GOALS,
    SKILLS,
    ObjectSpec,
    TaskSpec,
    _check_choice,
    _check_n,
    random_object,
    skill_shapes,
)

OBJECT_FACTORS = ("shape", "colour", "size")
TASK_FACTORS = ("goal", "skill")
"""Factors of a whole task rather than of one object."""
FACTORS = (*OBJECT_FACTORS, *TASK_FACTORS)
PARTS = ("train", "test")


@dataclass(frozen=True)
class HeldOut:
    """One held-out combination of two factor values, e.g. ``HeldOut("colour", "red", "shape", "cube")``.

    Two object factors are held out *on one object* (no red cube in training); an object factor with
    a task factor (``goal`` or ``skill``) is held out *in one task* (no sphere in a ``sort`` task, no
    cylinder in a ``stack`` task in training).
    """

    factor_a: str
    value_a: Any
    factor_b: str
    value_b: Any

    def __post_init__(self) -> None:
        _check_choice("factor", self.factor_a, FACTORS)
        _check_choice("factor", self.factor_b, FACTORS)
        if self.factor_a == self.factor_b or self.factor_a not in OBJECT_FACTORS:
            raise ValueError(
                f"a held-out pair needs two different factors with the object factor first, got "
                f"({self.factor_a!r}, {self.factor_b!r})"
            )
        for factor, value in ((self.factor_a, self.value_a), (self.factor_b, self.value_b)):
            choices = {"shape": SHAPES, "colour": tuple(PALETTE), "goal": GOAL_KINDS, "skill": SKILLS}.get(factor)
            if choices is not None:
                _check_choice(factor, value, choices)
        if self.factor_b == "skill" and self.factor_a == "shape" and self.value_a not in skill_shapes(self.value_b):
            raise ValueError(
                f"{self.value_a}s cannot be stacked: holding out {self.value_a} × {self.value_b} holds out nothing"
            )

    def matches_object(self, obj: ObjectSpec) -> bool:
        return getattr(obj, self.factor_a) == self.value_a and (
            self.factor_b in TASK_FACTORS or getattr(obj, self.factor_b) == self.value_b
        )

    def occurs_in(self, spec: TaskSpec) -> bool:
        """True if ``spec`` contains this combination."""
        if self.factor_b in TASK_FACTORS and getattr(spec, self.factor_b) != self.value_b:
            return False
        return any(self.matches_object(o) for o in spec.objects)

    def make_object(
        self, rng: np.random.Generator, sizes: tuple[float, ...], shapes: tuple[str, ...] = SHAPES
    ) -> ObjectSpec:
        """A random object (of ``shapes`` where free) that carries this combination's object factor value(s)."""
        obj = random_object(rng, shapes=shapes, sizes=sizes)
        values = {self.factor_a: self.value_a}
        if self.factor_b not in TASK_FACTORS:
            values[self.factor_b] = self.value_b
        return ObjectSpec(**{**obj.__dict__, **values})


@dataclass(frozen=True)
class CompositionalSplit:
    """Held-out factor combinations, and deterministic sampling of train or test tasks.

    A *train* task contains none of the held-out combinations; a *test* task contains at least one
    (one object carries it, or the task's goal kind or skill does); every other factor is drawn at
    random, among the goal kinds that make sense for the drawn skill (``SKILL_GOALS``) and the shapes
    it can handle (no sphere in a ``stack`` task).

    Args:
        held_out: the combinations kept out of training.
        goals: goal kinds drawn from when a sample does not fix one.
        sizes: object sizes drawn from.
        skills: skills drawn from when a sample does not fix one.
        embodiment: the embodiment of every task.
    """

    held_out: tuple[HeldOut, ...]
    goals: tuple[str, ...] = ("positions",)
    sizes: tuple[float, ...] = (0.02, 0.025, 0.03)
    skills: tuple[str, ...] = ("push",)
    embodiment: str = "pusher"

    def __post_init__(self) -> None:
        held = tuple(h if isinstance(h, HeldOut) else HeldOut(*h) for h in self.held_out)
        object.__setattr__(self, "held_out", held)
        if not held:
            raise ValueError("a compositional split needs at least one held-out combination")
        for goal in self.goals:
            _check_choice("goal kind", goal, GOAL_KINDS)
        _check_choice("embodiment", self.embodiment, EMBODIMENTS)
        for skill in self.skills:
            if skill not in EMBODIMENT_SKILLS[self.embodiment]:
                raise ValueError(
                    f"the {self.embodiment!r} embodiment cannot {skill!r}: it does {EMBODIMENT_SKILLS[self.embodiment]}"
                )
        if not any(g in SKILL_GOALS[s] for s in self.skills for g in self.goals):
            raise ValueError(f"no goal kind of {self.goals} makes sense for the skills {self.skills}")
        for h in held:
            if h.factor_b == "goal" and h.value_b not in self.goals:
                raise ValueError(f"held-out goal kind {h.value_b!r} is not among this split's goals {self.goals}")
            if h.factor_b == "skill" and h.value_b not in self.skills:
                raise ValueError(f"held-out skill {h.value_b!r} is not among this split's skills {self.skills}")

    def is_test(self, spec: TaskSpec) -> bool:
        """True if ``spec`` contains a held-out combination."""
        return any(h.occurs_in(spec) for h in self.held_out)

    def sample(
        self,
        seed: int | np.random.Generator | None,
        part: str = "train",
        n_objects: int = 3,
        goal: str | None = None,
        skill: str | None = None,
    ) -> TaskSpec:
        """Draw a ``part`` task with ``n_objects`` objects; the same seed gives the same task."""
        _check_choice("split part", part, PARTS)
        n_objects = _check_n(n_objects)
        rng = np.random.default_rng(seed)
        goals = self.goals if goal is None else (goal,)
        skills = self.skills if skill is None else (skill,)
        pairs = [(s, g) for s in skills for g in goals if g in SKILL_GOALS[s]]
        if not pairs:
            raise ValueError(f"no goal kind of {goals} makes sense for the skills {skills}")
        # A factor with a single choice draws nothing, so push-only splits give the tasks they always gave.
        if part == "test":
            usable = [h for h in self.held_out if self._usable(h, pairs)]
            if not usable:
                raise ValueError(
                    f"no held-out combination of this split can occur with goal kinds {goals} and skills {skills}"
                )
            held = usable[rng.integers(len(usable))]
            pairs = [p for p in pairs if self._usable(held, [p])]
            skill = _draw(rng, sorted({s for s, _ in pairs}, key=skills.index))
            goal = held.value_b if held.factor_b == "goal" else _draw(rng, [g for s, g in pairs if s == skill], True)
            shapes = skill_shapes(skill)
            objects = [random_object(rng, shapes=shapes, sizes=self.sizes) for _ in range(n_objects)]
            objects[rng.integers(n_objects)] = held.make_object(rng, self.sizes, shapes)
            return TaskSpec(objects=tuple(objects), goal=goal, skill=skill, embodiment=self.embodiment)
        for _ in range(10_000):
            skill = _draw(rng, sorted({s for s, _ in pairs}, key=skills.index))
            shapes = skill_shapes(skill)
            objects = tuple(random_object(rng, shapes=shapes, sizes=self.sizes) for _ in range(n_objects))
            goal = _draw(rng, [g for s, g in pairs if s == skill], True)
            spec = TaskSpec(objects=objects, goal=goal, skill=skill, embodiment=self.embodiment)
            if not self.is_test(spec):
                return spec
        raise ValueError(f"could not draw a train task free of {self.held_out}: too much is held out")

    @staticmethod
    def _usable(held: HeldOut, pairs: list[tuple[str, str]]) -> bool:
        """Whether ``held`` can occur in a task of one of the (skill, goal) ``pairs``."""
        for skill, goal in pairs:
            if held.factor_b == "goal" and held.value_b != goal or held.factor_b == "skill" and held.value_b != skill:
                continue
            if held.factor_a == "shape" and held.value_a not in skill_shapes(skill):
                continue
            if held.factor_b == "shape" and held.value_b not in skill_shapes(skill):
                continue
            return True
        return False

    def tasks(
        self, part: str = "train", n_objects: int = 3, goal: str | None = None, skill: str | None = None
    ) -> SplitTasks:
        """The task distribution of one part, for an environment to draw from at each reset."""
        return SplitTasks(self, part, n_objects, goal, skill)

    def to_dict(self) -> dict[str, Any]:
        return {
            "held_out": [list(h.__dict__.values()) for h in self.held_out],
            "goals": list(self.goals),
            "sizes": list(self.sizes),
            "skills": list(self.skills),
            "embodiment": self.embodiment,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompositionalSplit:
        if not isinstance(data, dict) or "held_out" not in data:
            raise ValueError(f"expected a CompositionalSplit dict with 'held_out', got {data!r}")
        return cls(
            held_out=tuple(HeldOut(*h) for h in data["held_out"]),
            goals=tuple(data.get("goals", ("positions",))),
            sizes=tuple(data.get("sizes", (0.02, 0.025, 0.03))),
            skills=tuple(data.get("skills", ("push",))),
            embodiment=data.get("embodiment", "pusher"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> CompositionalSplit:
        return cls.from_dict(json.loads(text))


def _draw(rng: np.random.Generator, choices: list, always: bool = False):
    """One of ``choices``; a single choice consumes no random number unless ``always``."""
    return choices[rng.integers(len(choices))] if always or len(choices) > 1 else choices[0]


@dataclass(frozen=True)
class SplitTasks:
    """One part of a :class:`CompositionalSplit` as a task distribution (see ``TaskDistribution``)."""

    split: CompositionalSplit
    part: str = "train"
    n_objects: int = 3
    goal: str | None = None
    skill: str | None = None

    def sample(self, rng: np.random.Generator) -> TaskSpec:
        return self.split.sample(rng, self.part, self.n_objects, self.goal, self.skill)


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

SKILL_SHAPE = CompositionalSplit(
    held_out=(HeldOut("shape", "cylinder", "skill", "stack"), HeldOut("shape", "sphere", "skill", "pick_place")),
    goals=("positions",),
    skills=("push", "pick_place", "stack"),
    embodiment="fetch",
)
"""Preset (Fetch): cylinders never stacked and spheres never picked and placed in training. Spheres cannot be
stacked, so a sphere is only ever pushed in training: its held-out pair asks for a grasp the data never shows
(``results/fetch_skill_shape/``); :data:`SKILL_SHAPE_GRASP` holds out pairs whose shapes are each grasped."""

SKILL_SHAPE_GRASP = CompositionalSplit(
    held_out=(HeldOut("shape", "cylinder", "skill", "stack"), HeldOut("shape", "cube", "skill", "pick_place")),
    goals=("positions",),
    skills=("push", "pick_place", "stack"),
    embodiment="fetch",
)
"""Preset (Fetch): cylinders never stacked and cubes never picked and placed in training; each held-out shape is
grasped in training by the other skill (cubes in towers, cylinders picked and placed), so a test task is an unseen
combination of a shape and a skill that were each seen, not an unseen grasp."""

SKILL_SHAPE_SINGLE = CompositionalSplit(
    held_out=(HeldOut("shape", "cube", "skill", "pick_place"),),
    goals=("positions",),
    skills=("push", "pick_place", "stack"),
    embodiment="fetch",
)
"""Preset (Fetch): a single held-out pair, cubes never picked and placed in training. Cylinders are both stacked and
picked and placed, so the skill of a task with a cylinder is read from its goal rows, never from its shapes."""

SKILL_COLOUR = CompositionalSplit(
    held_out=(HeldOut("colour", "red", "skill", "stack"), HeldOut("colour", "blue", "skill", "pick_place")),
    goals=("positions",),
    skills=("push", "pick_place", "stack"),
    embodiment="fetch",
)
"""Preset (Fetch): red objects never stacked and blue objects never picked and placed in training."""

SPLITS: dict[str, CompositionalSplit] = {
    "colour_shape": COLOUR_SHAPE,
    "shape_goal": SHAPE_GOAL,
    "skill_shape": SKILL_SHAPE,
    "skill_shape_grasp": SKILL_SHAPE_GRASP,
    "skill_shape_single": SKILL_SHAPE_SINGLE,
    "skill_colour": SKILL_COLOUR,
}
