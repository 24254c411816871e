"""Object focus: any entity policy, shown the agent and at most ``k`` objects at each step.

:class:`Focus` wraps a policy (an :class:`ecrl.policy.Policy`, a planner, any batch policy with
``act(obs)``) and cuts every observation down before the policy sees it: the agent row and at most
``k`` object rows, each with its goal rows. A policy trained on few objects then acts, with many on
the table, in scenes like those it was trained on. It is a rule added at evaluation time, not
part of a model: results obtained through it are *rule-assisted* (``ecrl-eval --focus K`` says so
in its reports).

The rule (:func:`focus_order`), at every step:

1. objects not yet placed come first (an object is placed within ``placed_within`` of its target,
   the goal row with its index: ``ecrl`` envs write goal row ``i`` for object row ``i + 1``);
   among them those whose target has the lowest ``rank`` (``ordered`` goals; other goal kinds have
   rank 0 throughout), then the nearest to the pusher;
2. placed objects fill the remaining rows, nearest first; padded rows come last.

With ``patience = 0`` the rule chooses afresh at every step. With ``patience = P > 0`` the wrapper
keeps working on the objects it chose until they are placed, as the scripted expert does: a chosen
object that has not come 5 mm nearer its target for ``P`` steps (wedged among others) is set aside
for ``P`` steps, and objects set aside come after the other objects not yet placed. That state
(objects held, progress, objects set aside) lives in the wrapper, one row per episode of the
batch, and :meth:`Focus.reset` forgets it. ``results/rl_push2`` and ``results/diffusion_push3``
measured both settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ecrl.envs.layout import ENTITY_DIM, ENTITY_PRESENT, ENTITY_XY, GOAL_DIM, GOAL_FIELDS, GOAL_XY, SUCCESS_DISTANCE

__all__ = ["PLACED_WITHIN", "PROGRESS", "Focus", "focus_order"]

PLACED_WITHIN = SUCCESS_DISTANCE
"""Metres from its target within which an object counts as placed (the push envs' success distance)."""
PROGRESS = 0.005
"""Metres a held object must come nearer its target to count as progress (``patience``)."""

_RANK = GOAL_FIELDS["rank"].start
_ROW_KEYS = ("observation", "desired_goal", "achieved_goal")


def _rows(obs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``observation (B, 1 + n, ENTITY_DIM)`` and ``desired_goal (B, n, GOAL_DIM)`` as float32, checked."""
    ents = np.asarray(obs["observation"], dtype=np.float32)
    goals = np.asarray(obs["desired_goal"], dtype=np.float32)
    if ents.ndim != 3 or ents.shape[-1] != ENTITY_DIM or goals.ndim != 3 or goals.shape[-1] != GOAL_DIM:
        raise ValueError(
            f"focus reads ecrl entity rows: observation (B, 1 + n, {ENTITY_DIM}) and desired_goal (B, n, {GOAL_DIM}); "
            f"got {ents.shape} and {goals.shape}"
        )
    if ents.shape[0] != goals.shape[0] or ents.shape[1] - 1 != goals.shape[1]:
        raise ValueError(
            f"focus needs one goal row per object row: observation {ents.shape} "
            f"(agent + {ents.shape[1] - 1} object rows), desired_goal {goals.shape}"
        )
    return ents, goals


def focus_order(
    observation: np.ndarray,
    desired_goal: np.ndarray,
    placed_within: float = PLACED_WITHIN,
    held: np.ndarray | None = None,
    aside: np.ndarray | None = None,
) -> np.ndarray:
    """``(B, n)``: each scene's object indices in the order the focus takes them (see the module docstring).

    Args:
        observation: ``(B, 1 + n, ENTITY_DIM)`` rows, agent first; padded rows have ``present`` 0.
        desired_goal: ``(B, n, GOAL_DIM)`` goal rows aligned with the object rows.
        placed_within: metres from its target within which an object counts as placed.
        held: ``(B, n)`` bool, objects kept from the previous step: first among those not yet placed.
        aside: ``(B, n)`` bool, objects set aside: after the other objects not yet placed.
    """
    ents, goals = _rows({"observation": observation, "desired_goal": desired_goal})
    objects = ents[:, 1:]
    present = objects[..., ENTITY_PRESENT] > 0.5
    placed = np.linalg.norm(objects[..., ENTITY_XY] - goals[..., GOAL_XY], axis=-1) <= placed_within
    reach = np.linalg.norm(objects[..., ENTITY_XY] - ents[:, :1, ENTITY_XY], axis=-1)
    rank = np.where(placed, 0.0, goals[..., _RANK])
    none = np.zeros_like(present)
    held = none if held is None else held
    aside = none if aside is None else aside
    # np.lexsort sorts by its last key first: real rows before padded ones, unplaced before placed,
    # held first, set aside last (among the unplaced), low rank first, then near first; stable on ties.
    return np.lexsort((reach, rank, aside, ~held, placed, ~present), axis=-1)


class Focus:
    """A policy that sees, at each step, the agent and at most ``k`` objects (see the module docstring).

    Args:
        policy: anything with ``act(obs)`` → actions for observation dicts of ``ecrl`` entity rows,
            single (``(N, D)``) or batched (``(B, N, D)``); its ``reset(*args)``, if any, is called by
            :meth:`reset`. It must run on any number of objects (an entity policy or planner).
        k: most objects the policy sees at a step (``>= 1``).
        patience: 0 to choose afresh at every step; ``P > 0`` to keep the chosen objects until they are
            placed, setting aside for ``P`` steps one that has not come 5 mm nearer its target for ``P`` steps.
        placed_within: metres from its target within which an object counts as placed.

    Raises:
        ValueError: ``k < 1``, ``patience < 0``, ``placed_within <= 0``, or a policy that reads a fixed
            number of object rows or camera frames (which show every object).
    """

    def __init__(self, policy: Any, k: int, patience: int = 0, placed_within: float = PLACED_WITHIN) -> None:
        if not callable(getattr(policy, "act", None)):
            raise ValueError(f"Focus wraps a policy with act(obs), got {type(policy).__name__}")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"k (objects in focus) must be an int >= 1, got {k!r}")
        if isinstance(patience, bool) or not isinstance(patience, int | np.integer) or patience < 0:
            raise ValueError(f"patience must be an int >= 0 (0: choose afresh at every step), got {patience!r}")
        if not placed_within > 0:
            raise ValueError(f"placed_within must be positive, got {placed_within!r}")
        kwargs = dict(getattr(policy, "kwargs", None) or {})
        meta = dict(getattr(policy, "meta", None) or {})
        if kwargs.get("n_max") is not None:
            raise ValueError(
                f"Focus needs a policy that runs on any number of objects; {policy!r} reads exactly "
                f"{kwargs['n_max']} object rows (a flat MLP)"
            )
        if meta.get("pixels"):
            raise ValueError(f"Focus cuts entity rows; {policy!r} plans from camera frames, which show every object")
        self.policy, self.k, self.patience, self.placed_within = policy, int(k), int(patience), float(placed_within)
        self.kwargs = kwargs
        self.meta = {**meta, "rule": self.rule, "focus": {"k": self.k, "patience": self.patience}}
        self.batch_invariant = bool(getattr(policy, "batch_invariant", False))  # the rule acts per scene
        self.reset_state(0, 0)

    @property
    def rule(self) -> str:
        """The rule in words, for reports: ``"focus k=1, patience 30"``."""
        return f"focus k={self.k}" + (f", patience {self.patience}" if self.patience else "")

    def __repr__(self) -> str:
        return f"Focus({self.policy!r}, k={self.k}, patience={self.patience})"

    def reset(self, *args: Any, **kwargs: Any) -> None:
        """Start new episodes: forget the objects held and set aside, and reset the wrapped policy."""
        self.reset_state(0, 0)
        reset = getattr(self.policy, "reset", None)
        if reset is not None:
            reset(*args, **kwargs)

    def choose(self, obs: Mapping[str, Any]) -> np.ndarray:
        """``(B, m)`` the objects (indices among object rows) the policy sees now, ``m = min(k, n)``;
        advances the per-episode state by one step. A batch of another shape starts new episodes."""
        ents, goals = _rows(obs)
        objects = ents[:, 1:]
        b, n = goals.shape[:2]
        if self._held.shape != (b, n):
            self.reset_state(b, n)
        self._t += 1
        held = aside = None
        if self.patience:
            present = objects[..., ENTITY_PRESENT] > 0.5
            dist = np.linalg.norm(objects[..., ENTITY_XY] - goals[..., GOAL_XY], axis=-1)
            held = self._held & present & (dist > self.placed_within)
            better = held & (dist < self._best - PROGRESS)
            self._best = np.where(better, dist, self._best)
            self._since = np.where(better, 0, self._since + held)
            stalled = held & (self._since > self.patience)
            self._aside_until[stalled] = self._t + self.patience
            held &= ~stalled
            aside = self._aside_until > self._t
        keep = focus_order(ents, goals, self.placed_within, held, aside)[:, : min(self.k, n)]
        if self.patience:
            kept = np.zeros_like(held)
            np.put_along_axis(kept, keep, True, axis=1)
            kept &= present & (dist > self.placed_within)
            fresh = kept & ~held
            self._best = np.where(fresh, np.inf, self._best).astype(np.float32)
            self._since = np.where(fresh, 0, self._since)
            self._held = kept
        return keep

    def reset_state(self, batch: int, n: int) -> None:
        """Per-episode state for ``batch`` scenes of ``n`` object rows, nothing held or set aside."""
        self._held = np.zeros((batch, n), dtype=bool)  # objects kept from the last step
        self._best = np.full((batch, n), np.inf, dtype=np.float32)  # nearest a held object came to its target
        self._since = np.zeros((batch, n), dtype=np.int64)  # steps since it last came 5 mm nearer
        self._aside_until = np.zeros((batch, n), dtype=np.int64)  # step until which an object is set aside
        self._t = 0

    def cut(self, obs: Mapping[str, Any], keep: np.ndarray) -> dict[str, np.ndarray]:
        """The agent and the objects ``keep (B, m)`` of a batched observation dict, with their goal rows."""
        unknown = sorted(set(obs) - set(_ROW_KEYS))
        if unknown:
            raise ValueError(f"Focus cuts the entity rows {list(_ROW_KEYS)}; it cannot cut obs{unknown} (every object)")
        take = lambda rows: np.take_along_axis(np.asarray(rows), keep[..., None], axis=1)  # noqa: E731
        rows = np.asarray(obs["observation"])
        out = {"observation": np.concatenate([rows[:, :1], take(rows[:, 1:])], axis=1)}
        out.update({key: take(obs[key]) for key in ("desired_goal", "achieved_goal") if key in obs})
        return out

    def act(self, obs: Mapping[str, Any], **kwargs: Any) -> np.ndarray:
        """The wrapped policy's action(s) for ``obs`` cut down to the focus; one observation or a batch."""
        if not isinstance(obs, Mapping) or not {"observation", "desired_goal"} <= set(obs):
            raise ValueError(f"act takes an observation dict with 'observation' and 'desired_goal', got {obs!r:.80}")
        single = np.ndim(obs["observation"]) == 2
        batch = {key: np.asarray(value)[None] if single else value for key, value in obs.items()}
        action = self.policy.act(self.cut(batch, self.choose(batch)), **kwargs)
        return np.asarray(action)[0] if single else action
