"""What the simulated embodiments share: argument checks, entity spaces, the step loop and goal-row bookkeeping.

:class:`EntityGoalEnv` is the base of :class:`~ecrl.envs.push.PushEnv` and
:class:`~ecrl.envs.fetch.FetchEnv`. A subclass's constructor calls :meth:`~EntityGoalEnv._set_task`,
``_set_reward`` and ``_set_cameras``, builds its scene (``model``, ``data`` and the ids ``_geom``
``(N, S)`` of each object's shape geoms, ``_obj_body``, ``_goal_site``, ``_agent_geoms``) and calls
``_make_spaces``; it implements
``_apply_action(a)`` (``a``: the clipped action as floats), ``_get_obs()`` and ``_bind_views()``
(and may override ``_distances()``), and at each reset sets ``_achieved_pos`` ``(N, 3)`` (a view of
the achieved rows), ``_target_pos`` ``(N, 3)``, ``_allowed``, ``_rank_order`` and ``_max_steps``."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs import goals
from ecrl.envs.layout import (
    AGENT_RGB,
    ENTITY_DIM,
    ENTITY_FIELDS,
    GOAL_DIM,
    GOAL_FIELDS,
    PALETTE,
    SHAPES,
    shape_one_hot,
)
from ecrl.envs.rendering import CameraViews
from ecrl.envs.scene import CAMERAS
from ecrl.envs.splits import SPLITS, CompositionalSplit
from ecrl.envs.task import EMBODIMENT_MAX_OBJECTS, RandomTasks, TaskDistribution, TaskSpec, _check_choice, _check_n

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_COS = _E["yaw"].start + 1


class EntityGoalEnv(goals.GoalReward, CameraViews, gym.Env):
    """N objects moved to goal rows by one agent; ``is_success`` and ``fraction_placed`` on every step.

    An object is *placed* when it is within ``distance_threshold`` of the target it is optimally
    assigned to. ``ordered`` goals: a target's fill time is the step an object last arrived on it;
    ``fraction_placed`` counts the longest in-order prefix of filled targets (see ``PushEnv``).
    """

    embodiment: str
    """The :data:`~ecrl.envs.task.EMBODIMENTS` entry this env simulates."""
    substeps: int
    """Physics steps per action."""
    _simulates: str
    """How errors name the embodiment."""
    metadata = {"render_modes": ["rgb_array", "depth_array"]}

    def _set_task(
        self,
        task: TaskSpec | TaskDistribution | dict | None,
        *,
        skill: str | None,
        n_objects: int,
        goal: str,
        split: str | CompositionalSplit | None,
        part: str,
        n_max: int | None,
    ) -> None:
        """Keep the task distribution (``task``, else ``split``'s ``part``, else random objects) and the row counts."""
        name, embodiment = type(self).__name__, self.embodiment
        if isinstance(split, str):
            _check_choice("split", split, tuple(SPLITS))
            split = SPLITS[split]
        if split is not None and split.embodiment != embodiment:
            raise ValueError(f"{name} needs a split of the {embodiment!r} embodiment, got one of {split.embodiment!r}")
        if isinstance(task, dict):
            task = TaskSpec.from_dict(task)
        if task is None:
            task = (
                split.tasks(part, n_objects, goal, skill)
                if split is not None
                else RandomTasks(n_objects, goal, skill=skill or "push", embodiment=embodiment)
            )
        elif isinstance(task, TaskSpec):
            self._check_embodiment(task)
            if skill is not None and skill != task.skill:
                raise ValueError(f"skill {skill!r} disagrees with the task's skill {task.skill!r}")
        if not hasattr(task, "sample"):
            raise ValueError(f"task must be a TaskSpec or a task distribution, got {type(task).__name__}")
        n = _check_n(task.n_objects)
        if n > EMBODIMENT_MAX_OBJECTS[embodiment]:
            raise ValueError(
                f"the {embodiment} embodiment holds at most {EMBODIMENT_MAX_OBJECTS[embodiment]} objects, got {n}"
            )
        n_max = n if n_max is None else _check_n(n_max)
        if n_max < n:
            raise ValueError(f"n_max must be >= n_objects ({n}), got {n_max}")
        self.task, self.n_objects, self.n_max = task, n, n_max
        self.spec_: TaskSpec | None = None

    def _set_reward(self, reward_type: str, distance_threshold: float | None) -> None:
        """Check and keep the reward type; check ``distance_threshold`` (``None``: the subclass's default)."""
        _check_choice("reward_type", reward_type, goals.REWARD_TYPES)
        if distance_threshold is not None and not distance_threshold > 0:
            raise ValueError(f"distance_threshold must be positive, got {distance_threshold!r}")
        self.reward_type = reward_type

    def _set_cameras(
        self,
        render_mode: str | None,
        camera: str,
        width: int,
        height: int,
        pixels: int | None,
        cameras: tuple[str, ...],
    ) -> None:
        """Check and keep what :class:`~ecrl.envs.rendering.CameraViews` renders and the ``pixels`` observation's cameras."""
        if render_mode is not None:
            _check_choice("render_mode", render_mode, tuple(self.metadata["render_modes"]))
        _check_choice("camera", camera, CAMERAS)
        cameras = tuple(cameras)
        if pixels is not None:
            if not 16 <= pixels <= 256:
                raise ValueError(f"pixels must be an image size in 16 … 256, got {pixels}")
            if not cameras or any(c not in CAMERAS for c in cameras):
                raise ValueError(f"cameras must be a non-empty selection of {list(CAMERAS)}, got {list(cameras)}")
            width = height = pixels
        if not (16 <= width <= 256 and 16 <= height <= 256):
            raise ValueError(f"width and height must be in 16 … 256 pixels, got {width}x{height}")
        self.render_mode, self.camera, self.width, self.height = render_mode, camera, width, height
        self.pixel_cameras = cameras if pixels is not None else ()
        self._renderer: mujoco.Renderer | None = None

    def _check_embodiment(self, spec: TaskSpec) -> None:
        if spec.embodiment != self.embodiment:
            raise ValueError(
                f"{type(self).__name__} simulates {self._simulates}, the task is for {spec.embodiment!r} (use make_env)"
            )

    def _make_spaces(self, action_dim: int) -> None:
        """Entity-row observation space padded to ``n_max`` (plus ``pixels`` if asked) and a ``[-1, 1]`` action box."""
        n_max, views, size = self.n_max, len(self.pixel_cameras), self.width
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (1 + n_max, ENTITY_DIM), np.float64),
                "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
                "desired_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
            }
            | ({"pixels": gym.spaces.Box(0, 255, (views, size, size, 3), np.uint8)} if views else {})
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
        self._action_shape = (action_dim,)

    # ------------------------------------------------------------------ reset
    def _draw_task(self, seed: int | None, options: dict | None) -> TaskSpec:
        """Seed the env's generator and return the episode's task (``options["task"]`` or a draw)."""
        super().reset(seed=seed)
        spec = (options or {}).get("task") or self.task.sample(self.np_random)
        if isinstance(spec, dict):
            spec = TaskSpec.from_dict(spec)
        if spec.n_objects != self.n_objects:
            raise ValueError(f"this env simulates {self.n_objects} objects, the task has {spec.n_objects}")
        self._check_embodiment(spec)
        return spec

    def _show_objects(self, spec: TaskSpec, goal_alpha: float) -> tuple[np.ndarray, np.ndarray]:
        """Switch on each object's shape geom, colour and size and its goal site; ``(N,)`` sizes and ``(N, 3)`` RGB."""
        m, n = self.model, self.n_objects
        sizes = np.array([o.size for o in spec.objects])
        shapes = np.array([SHAPES.index(o.shape) for o in spec.objects])
        rgb = np.array([PALETTE[o.colour] for o in spec.objects])
        m.geom_contype[self._geom] = 0
        m.geom_conaffinity[self._geom] = 0
        m.geom_rgba[self._geom] = 0.0
        on = self._geom[np.arange(n), shapes]
        m.geom_contype[on] = 1
        m.geom_conaffinity[on] = 1
        m.geom_rgba[on, :3] = rgb
        m.geom_rgba[on, 3] = 1.0
        # The broadphase skips bodies by these compile-time unions of their geoms' bits.
        m.body_contype[self._obj_body] = 1
        m.body_conaffinity[self._obj_body] = 1
        m.geom_size[on] = sizes[:, None]
        m.geom_rbound[on] = sizes * np.sqrt(3)
        m.site_size[self._goal_site, 0] = sizes
        m.site_rgba[self._goal_site, :3] = rgb
        m.site_rgba[self._goal_site, 3] = goal_alpha
        return sizes, rgb

    def _row_templates(
        self, spec: TaskSpec, sizes: np.ndarray, rgb: np.ndarray, agent_size: tuple[float, float, float]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The constant fields of the entity rows ``(1 + n_max, ENTITY_DIM)`` and goal rows ``(n_max, GOAL_DIM)``."""
        n = self.n_objects
        obs = np.zeros((1 + self.n_max, ENTITY_DIM))
        obs[: 1 + n, _E["present"]] = 1.0
        obs[0, _E["is_agent"]] = 1.0
        obs[0, _E["size"]] = agent_size
        obs[0, _E["colour"]] = AGENT_RGB
        obs[0, _COS] = 1.0
        rows = slice(1, 1 + n)
        obs[rows, _E["is_object"]] = 1.0
        obs[rows, _E["size"]] = sizes[:, None]
        obs[rows, _E["shape"]] = np.stack([shape_one_hot(o.shape) for o in spec.objects])
        obs[rows, _E["colour"]] = rgb
        goal = np.zeros((self.n_max, GOAL_DIM))
        goal[:n, _G["present"]] = 1.0
        goal[:n, _G["size"]] = sizes[:, None]
        goal[:n, _G["shape"]] = obs[rows, _E["shape"]]
        goal[:n, _G["colour"]] = rgb
        self._by_colour = spec.goal == "sort"
        self._same = goals.same_group(goal[None, :n], self._by_colour)
        return obs, goal

    def _start_episode(self) -> tuple[dict, dict]:
        """Step 0 of the episode: the first observation and its info."""
        self._steps = 0
        self._fill_time = np.full(self.n_objects, np.inf)
        obs = self._get_obs()
        return obs, self._info(self._placed())

    # ------------------------------------------------------------------ step
    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        values = a.tolist() if a.shape == self._action_shape else [math.nan]
        if not all(map(math.isfinite, values)):
            raise ValueError(f"action must be a finite array of shape {self._action_shape}, got {a.shape} {a!r}")
        # Python floats: on a few numbers numpy's call overhead is most of the step's (same IEEE results).
        self._apply_action([min(max(v, -1.0), 1.0) for v in values])
        mujoco.mj_step(self.model, self.data, nstep=self.substeps)
        self._steps += 1
        obs = self._get_obs()
        placed = self._placed()
        info = self._info(placed)
        # Same values as compute_reward on this step's goals (sparse: -fraction not placed, in any order).
        if self.reward_type == "dense":
            reward = -float(self._dist.mean())
        else:
            reward = -1.0 + np.count_nonzero(placed) / self.n_objects
        return obs, float(reward), False, self._steps >= self._max_steps, info

    def _distances(self) -> np.ndarray:
        """``(N,)`` distance of each target to the object assigned to it, from the achieved rows just gathered."""
        if self._allowed is None:
            return goals.norm(self._achieved_pos - self._target_pos)
        return goals.matched_distances(self._achieved_pos, self._target_pos, self._allowed)

    def _placed(self) -> np.ndarray:
        """``(N,)`` bool per target: an object is on it (and records fill times for ordered goals)."""
        self._dist = self._distances()
        placed = self._dist <= self.distance_threshold
        if self._rank_order is not None:
            self._fill_time = np.where(placed, np.minimum(self._fill_time, self._steps), np.inf)
        return placed

    def _info(self, placed: np.ndarray) -> dict[str, Any]:
        if self._rank_order is None:
            fraction = int(np.count_nonzero(placed)) / self.n_objects
        else:
            fraction = self.filled_in_order / self.n_objects
        return {"is_success": bool(fraction == 1.0), "fraction_placed": float(fraction)}

    @property
    def fill_times(self) -> np.ndarray:
        """``(N,)`` per target, the step an object last arrived on it (``inf`` if empty); ``ordered`` goals only."""
        return self._fill_time.copy()

    @property
    def filled_in_order(self) -> int:
        """``ordered`` goals: how many targets, by rank, are filled with non-decreasing fill times."""
        times = self._fill_time[self._rank_order]
        in_order = np.isfinite(times) & (times >= np.maximum.accumulate(times))
        return int(np.cumprod(in_order).sum())

    @property
    def target_order(self) -> np.ndarray | None:
        """``(N,)`` target indices sorted by rank for ``ordered`` goals, else ``None``."""
        return None if self._rank_order is None else self._rank_order.copy()

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        # MjData pickles its own copy of qpos, and views pickle as copies: re-point them.
        self._bind_views()
