"""The planar push environment: a pusher moves objects on a table to goal configurations."""

from __future__ import annotations

import math
import weakref
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs import goals
from ecrl.envs.layout import (
    AGENT_RGB,
    ENTITY_DIM,
    ENTITY_FIELDS,
    ENTITY_VELOCITY_XY,
    ENTITY_XY,
    GOAL_DIM,
    GOAL_FIELDS,
    GOAL_XY,
    PALETTE,
    SHAPES,
    SUCCESS_DISTANCE,
    shape_one_hot,
)
from ecrl.envs.scene import AGENT_HALF_HEIGHT, AGENT_RADIUS, CAMERAS, MAIN_CAMERAS, SUBSTEPS, build_model, scatter
from ecrl.envs.splits import SPLITS, CompositionalSplit
from ecrl.envs.task import RandomTasks, TaskDistribution, TaskSpec, _check_n

MAX_DISPLACEMENT = 0.03
"""Metres the pusher's set point moves per step at action magnitude 1 (per axis)."""

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_SIN, _COS = _E["yaw"].start, _E["yaw"].start + 1


def _footprint(shape: str, size: float) -> float:
    """Radius of the disc an object covers on the table at any yaw (a cube's corners reach size * sqrt(2))."""
    return float(size) * (np.sqrt(2) if shape == "cube" else 1.0)


class PushEnv(gym.Env):
    """Push ``N`` objects to a goal configuration with a planar pusher.

    Observations are a flat ``Dict`` of entity rows (see :mod:`ecrl.envs.layout`) padded with zero
    rows to ``n_max`` objects: ``observation`` ``(1 + n_max, ENTITY_DIM)`` (agent row first),
    ``achieved_goal`` and ``desired_goal`` ``(n_max, GOAL_DIM)``. The action is a displacement of
    the pusher's set point, ``(2,)`` in ``[-1, 1]`` (× :data:`MAX_DISPLACEMENT` metres).

    An object is *placed* when it is within ``distance_threshold`` of the target it is optimally
    assigned to (within its group of interchangeable objects). ``info`` carries ``is_success``
    (every object placed) and ``fraction_placed`` on every step.

    ``ordered`` goals: a target's *fill time* is the step at which an object last arrived on it
    (it resets when the object leaves). The episode succeeds when every target is filled and fill
    times do not decrease along the ranks, so an object placed out of turn must be moved off and
    back after its predecessors. ``fraction_placed`` counts the longest in-order prefix of filled
    targets. :meth:`compute_reward` reads positions only (HER relabels goals without history), so
    order shapes success, not reward.

    Args:
        task: a :class:`TaskSpec` (fixed objects), or any task distribution drawn from at each reset.
            ``None`` draws random objects: ``n_objects`` of them, goal kind ``goal``.
        n_objects: number of objects when ``task`` and ``split`` are not given.
        goal: goal kind when ``task`` is not given.
        split: a :class:`CompositionalSplit` or the name of a preset in ``SPLITS``; resets draw
            tasks of its ``part``.
        part: ``"train"`` or ``"test"``.
        n_max: rows to pad to (``>= n_objects``); defaults to ``n_objects``.
        reward_type: ``"sparse"`` (-fraction of objects not placed) or ``"dense"`` (-mean distance).
        distance_threshold: metres within which an object counts as placed.
        table_size: side of the square table in metres.
        render_mode: ``"rgb_array"`` or ``"depth_array"``.
        camera: the camera :meth:`render` uses (one of :data:`~ecrl.envs.scene.CAMERAS`).
        width, height: image size in pixels.
        pixels: also observe camera images: the observation dict gains ``pixels``, ``(V, P, P, 3)``
            uint8 RGB frames of size ``P = pixels`` from ``cameras`` (this sets the render size,
            ``width = height = pixels``), rendered at every reset and step. ``None``: state only.
        cameras: the cameras of the ``pixels`` observation.
    """

    metadata = {"render_modes": ["rgb_array", "depth_array"], "render_fps": 20}

    def __init__(
        self,
        task: TaskSpec | TaskDistribution | None = None,
        *,
        n_objects: int = 3,
        goal: str = "positions",
        split: str | CompositionalSplit | None = None,
        part: str = "train",
        n_max: int | None = None,
        reward_type: str = "sparse",
        distance_threshold: float = SUCCESS_DISTANCE,
        table_size: float = 0.6,
        render_mode: str | None = None,
        camera: str = "front",
        width: int = 96,
        height: int = 96,
        pixels: int | None = None,
        cameras: tuple[str, ...] = MAIN_CAMERAS,
    ) -> None:
        if isinstance(split, str):
            if split not in SPLITS:
                raise ValueError(f"unknown split {split!r}: expected one of {list(SPLITS)}")
            split = SPLITS[split]
        if split is not None and split.embodiment != "pusher":
            raise ValueError(f"PushEnv needs a split of the 'pusher' embodiment, got one of {split.embodiment!r}")
        if task is None:
            task = split.tasks(part, n_objects, goal) if split is not None else RandomTasks(n_objects, goal)
        elif isinstance(task, dict):
            task = TaskSpec.from_dict(task)
        if not hasattr(task, "sample"):
            raise ValueError(f"task must be a TaskSpec or a task distribution, got {type(task).__name__}")
        if isinstance(task, TaskSpec) and task.embodiment != "pusher":
            raise ValueError(f"PushEnv simulates the planar pusher, the task is for {task.embodiment!r} (use make_env)")
        n = _check_n(task.n_objects)
        n_max = n if n_max is None else _check_n(n_max)
        if n_max < n:
            raise ValueError(f"n_max must be >= n_objects ({n}), got {n_max}")
        if reward_type not in goals.REWARD_TYPES:
            raise ValueError(f"unknown reward_type {reward_type!r}: expected one of {list(goals.REWARD_TYPES)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}: expected one of {self.metadata['render_modes']}")
        if camera not in CAMERAS:
            raise ValueError(f"unknown camera {camera!r}: expected one of {list(CAMERAS)}")
        cameras = tuple(cameras)
        if pixels is not None:
            if not 16 <= pixels <= 256:
                raise ValueError(f"pixels must be an image size in 16 … 256, got {pixels}")
            if not cameras or any(c not in CAMERAS for c in cameras):
                raise ValueError(f"cameras must be a non-empty selection of {list(CAMERAS)}, got {list(cameras)}")
            width = height = pixels
        if not (16 <= width <= 256 and 16 <= height <= 256):
            raise ValueError(f"width and height must be in 16 … 256 pixels, got {width}x{height}")
        if not distance_threshold > 0:
            raise ValueError(f"distance_threshold must be positive, got {distance_threshold!r}")

        self.task, self.n_objects, self.n_max = task, n, n_max
        self.reward_type, self.distance_threshold = reward_type, float(distance_threshold)
        self.table_size, self.render_mode, self.camera = float(table_size), render_mode, camera
        self.width, self.height = width, height
        self.pixel_cameras = cameras if pixels is not None else ()
        # Fail now, not at the first reset, if N bodies cannot fit the table (random objects: a 3 cm cube at most).
        sizes = [_footprint(o.shape, o.size) for o in task.objects] if isinstance(task, TaskSpec) else []
        scatter(np.random.default_rng(0), np.full(n + 1, max(sizes, default=_footprint("cube", 0.03))), self.table_size)

        self.model = build_model(n, self.table_size)
        self.data = mujoco.MjData(self.model)
        self._renderer: mujoco.Renderer | None = None
        m = self.model
        self._geom = np.array([[m.geom(f"obj{i}_{s}").id for s in SHAPES] for i in range(n)], dtype=np.int64)  # (N, S)
        self._goal_site = np.array([m.site(f"goal{i}").id for i in range(n)])
        self._obj_body = np.array([m.body(f"obj{i}").id for i in range(n)])
        self._agent_geom = m.geom("agent").id
        self._obj_joint = np.array([[m.joint(f"obj{i}_{a}").id for a in "xy"] for i in range(n)])

        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (1 + n_max, ENTITY_DIM), np.float64),
                "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
                "desired_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
            }
            | ({"pixels": gym.spaces.Box(0, 255, (len(cameras), pixels, pixels, 3), np.uint8)} if pixels else {})
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.spec_: TaskSpec | None = None

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        spec = (options or {}).get("task") or self.task.sample(self.np_random)
        if isinstance(spec, dict):
            spec = TaskSpec.from_dict(spec)
        if spec.n_objects != self.n_objects:
            raise ValueError(f"this env simulates {self.n_objects} objects, the task has {spec.n_objects}")
        if spec.embodiment != "pusher":
            raise ValueError(f"PushEnv simulates the planar pusher, the task is for {spec.embodiment!r} (use make_env)")
        self._apply_spec(spec)
        rng, n = self.np_random, self.n_objects
        # Scene: agent and objects on distinct cells; targets away from their objects.
        start = scatter(rng, np.concatenate([[AGENT_RADIUS], self._footprints]), self.table_size)
        for _ in range(50):
            targets, ranks = goals.sample_targets(rng, spec, self._sizes, self.table_size)
            dist = goals.assigned_distances(self._with_z(start[None, 1:]), self._with_z(targets[None]), self._same)
            if (dist > 2 * self.distance_threshold).all():
                break
        self._set_targets(targets, ranks)
        qpos = self.data.qpos
        mujoco.mj_resetData(self.model, self.data)
        qpos[0:2] = start[0]
        self._obj_qpos[:, :2] = start[1:]
        self._obj_qpos[:, 2] = rng.uniform(-np.pi, np.pi, n)
        self.data.ctrl[:] = start[0]
        mujoco.mj_forward(self.model, self.data)
        self._steps = 0
        self._fill_time = np.full(n, np.inf)
        obs = self._get_obs()
        return obs, self._info(self._placed())

    def _apply_spec(self, spec: TaskSpec) -> None:
        """Switch on each object's shape geom, colour and size; precompute the constant parts of rows."""
        m, n = self.model, self.n_objects
        self.spec_ = spec
        sizes = np.array([o.size for o in spec.objects])
        shapes = np.array([SHAPES.index(o.shape) for o in spec.objects])
        rgb = np.array([PALETTE[o.colour] for o in spec.objects])
        self._sizes = sizes
        self._footprints = np.array([_footprint(o.shape, o.size) for o in spec.objects])
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
        m.body_pos[self._obj_body, 2] = sizes
        m.jnt_range[self._obj_joint] = np.stack([-(self.table_size / 2 - sizes), self.table_size / 2 - sizes], -1)[
            :, None
        ]
        m.site_size[self._goal_site, 0] = sizes
        m.site_rgba[self._goal_site, :3] = rgb
        m.site_rgba[self._goal_site, 3] = 0.45

        obs = np.zeros((1 + self.n_max, ENTITY_DIM))
        obs[: 1 + n, _E["present"]] = 1.0
        obs[0, _E["is_agent"]] = 1.0
        obs[0, _E["position"].start + 2] = AGENT_HALF_HEIGHT
        obs[0, _E["size"]] = (AGENT_RADIUS, AGENT_RADIUS, AGENT_HALF_HEIGHT)
        obs[0, _E["colour"]] = AGENT_RGB
        obs[0, _COS] = 1.0
        rows = slice(1, 1 + n)
        obs[rows, _E["is_object"]] = 1.0
        obs[rows, _E["position"].start + 2] = sizes
        obs[rows, _E["size"]] = sizes[:, None]
        obs[rows, _E["shape"]] = np.stack([shape_one_hot(o.shape) for o in spec.objects])
        obs[rows, _E["colour"]] = rgb
        self._obs_template = obs
        goal = np.zeros((self.n_max, GOAL_DIM))
        goal[:n, _G["present"]] = 1.0
        goal[:n, _G["position"].start + 2] = sizes
        goal[:n, _G["size"]] = sizes[:, None]
        goal[:n, _G["shape"]] = obs[rows, _E["shape"]]
        goal[:n, _G["colour"]] = rgb
        self._goal_template = goal
        self._by_colour = spec.goal == "sort"
        self._same = goals.same_group(goal[None, :n], self._by_colour)

    def _set_targets(self, targets: np.ndarray, ranks: np.ndarray) -> None:
        n = self.n_objects
        desired = self._goal_template.copy()
        desired[:n, GOAL_XY] = targets
        desired[:n, _G["rank"].start] = ranks
        self._goal_template[:n, _G["rank"].start] = ranks
        self._desired = desired
        self._target_pos = desired[None, :n, _G["position"]]
        self._rank_order = np.argsort(ranks) if self.spec_.goal == "ordered" else None
        self.model.site_pos[self._goal_site, :2] = targets
        # Constant for the episode: what step() would otherwise recompute every time.
        self._target_xy = desired[:n, GOAL_XY].copy()
        self._allowed = self._same[0] | np.eye(n, dtype=bool) if self._same.any() else None
        self._max_steps = self.spec_.max_steps
        # step() writes the moving fields into these and returns copies.
        self._obs_buf = self._obs_template.copy()
        self._achieved_buf = self._goal_template.copy()
        self._bind_views()

    def _bind_views(self) -> None:
        """Views that the step path reads and writes through (rebuilt after unpickling: views do not survive it)."""
        n, qpos = self.n_objects, self.data.qpos
        self._qpos, self._qvel, self._ctrl = qpos, self.data.qvel, self.data.ctrl
        self._obj_qpos = qpos[2 : 2 + 3 * n].reshape(n, 3)
        self._obj_qvel = self._qvel[2 : 2 + 3 * n].reshape(n, 3)
        self._yaw = self._obj_qpos[:, 2]
        self._agent_qpos = qpos[:2]
        # qpos/qvel indices of the x, y of the agent, then of each object: (1 + N, 2).
        self._xy_index = np.concatenate([[[0, 1]], 2 + 3 * np.arange(n)[:, None] + np.arange(2)])
        if self.spec_ is None:
            return
        self._obs_xy = self._obs_buf[: 1 + n, ENTITY_XY]
        self._obs_vel = self._obs_buf[: 1 + n, ENTITY_VELOCITY_XY]
        self._obs_sin = self._obs_buf[1 : 1 + n, _SIN]
        self._obs_cos = self._obs_buf[1 : 1 + n, _COS]
        self._achieved_xy = self._achieved_buf[:n, GOAL_XY]
        self._achieved_pos = self._achieved_buf[:n, _G["position"]]

    def _with_z(self, xy: np.ndarray) -> np.ndarray:
        return np.concatenate([xy, np.broadcast_to(self._sizes[:, None], (*xy.shape[:-1], 1))], -1)

    # ------------------------------------------------------------------ step
    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        ax, ay = a.tolist() if a.shape == (2,) else (math.nan, math.nan)
        if not (math.isfinite(ax) and math.isfinite(ay)):
            raise ValueError(f"action must be a finite array of shape (2,), got {a.shape} {a!r}")
        # Python floats: on two numbers numpy's call overhead is most of the step's (same IEEE results).
        px, py = self._agent_qpos.tolist()
        self._ctrl[0] = px + min(max(ax, -1.0), 1.0) * MAX_DISPLACEMENT
        self._ctrl[1] = py + min(max(ay, -1.0), 1.0) * MAX_DISPLACEMENT
        mujoco.mj_step(self.model, self.data, nstep=SUBSTEPS)
        self._steps += 1
        obs = self._get_obs()
        placed = self._placed()
        info = self._info(placed)
        # Same values as compute_reward on this step's goals (sparse: -fraction not placed, in any order).
        if self.reward_type == "dense":
            reward = -float(self._dist.mean())
        elif self._rank_order is None:
            reward = -1.0 + info["fraction_placed"]
        else:
            reward = -1.0 + np.count_nonzero(placed) / self.n_objects
        return obs, float(reward), False, self._steps >= self._max_steps, info

    def _get_obs(self) -> dict[str, np.ndarray]:
        # Only the moving fields are written (the rest was set at reset); callers get copies.
        xy = self._qpos[self._xy_index]
        self._obs_xy[...] = xy
        self._objects_xy = objects_xy = xy[1:]  # contiguous, for _placed
        self._obs_vel[...] = self._qvel[self._xy_index]
        self._obs_sin[...] = np.sin(self._yaw)
        self._obs_cos[...] = np.cos(self._yaw)
        self._achieved_xy[...] = objects_xy
        self._achieved = achieved = self._achieved_buf.copy()
        obs = {"observation": self._obs_buf.copy(), "achieved_goal": achieved, "desired_goal": self._desired.copy()}
        if self.pixel_cameras:
            obs["pixels"] = np.stack([self._render_with(c) for c in self.pixel_cameras])
        return obs

    def _placed(self) -> np.ndarray:
        """``(N,)`` bool per target: an object is on it (and records fill times for ordered goals).

        Reads the positions that :meth:`_get_obs` has just gathered.
        """
        if self._allowed is None:
            # No interchangeable objects: each object to its own target. The z of both is the object's size,
            # so the 2-D norm equals the 3-D one bit for bit.
            d = self._objects_xy - self._target_xy
            d *= d
            self._dist = np.sqrt(d[:, 0] + d[:, 1])
        else:
            self._dist = goals.matched_distances(self._achieved_pos, self._target_pos[0], self._allowed)
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

    def compute_reward(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> Any:
        """Reward for goal rows with any leading batch shape; ``info``: a dict or a sequence of dicts."""
        return goals.compute_reward(
            achieved_goal,
            desired_goal,
            info,
            threshold=self.distance_threshold,
            reward_type=self.reward_type,
            by_colour=self._by_colour if self.spec_ is not None else False,
        )

    # ------------------------------------------------------------------ rendering
    def _render_with(self, camera: str, depth: bool = False, segmentation: bool = False) -> np.ndarray:
        if camera not in CAMERAS:
            raise ValueError(f"unknown camera {camera!r}: expected one of {list(CAMERAS)}")
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.height, self.width)
            # Free the GL context before interpreter teardown, when EGL can no longer do it cleanly.
            self._renderer_finalizer = weakref.finalize(self, self._renderer.close)
        r = self._renderer
        r.enable_depth_rendering() if depth else r.disable_depth_rendering()
        r.enable_segmentation_rendering() if segmentation else r.disable_segmentation_rendering()
        r.update_scene(self.data, camera=camera)
        return r.render()

    def render(self) -> np.ndarray | None:
        """``(H, W, 3) uint8`` for ``rgb_array``, ``(H, W) float32`` metres for ``depth_array``."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array' to make()")
            return None
        return self._render_with(self.camera, depth=self.render_mode == "depth_array").copy()

    def render_views(self, cameras: tuple[str, ...] = MAIN_CAMERAS) -> dict[str, np.ndarray]:
        """RGB images ``{camera: (H, W, 3) uint8}`` from several named cameras (default: front and top)."""
        return {c: self._render_with(c).copy() for c in cameras}

    def render_segmentation(self, camera: str = "front") -> np.ndarray:
        """``(H, W) int16`` labels: 0 background, ``k + 1`` for the entity in observation row ``k``.

        The agent (row 0) is 1 and object ``i`` is ``i + 2``, so ``labels - 1`` indexes ``obs["observation"]``.
        """
        seg = self._render_with(camera, segmentation=True)
        ids, kinds = seg[..., 0], seg[..., 1]
        lut = np.zeros(self.model.ngeom + 1, dtype=np.int16)
        lut[self._agent_geom] = 1
        lut[self._geom] = np.arange(2, self.n_objects + 2)[:, None]
        labels = lut[np.where(kinds == int(mujoco.mjtObj.mjOBJ_GEOM), ids, self.model.ngeom)]
        return labels

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer_finalizer()
            self._renderer = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_renderer"] = None
        state.pop("_renderer_finalizer", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        # MjData pickles its own copy of qpos, and views pickle as copies: re-point them.
        self._bind_views()
