"""The Fetch arm environment: push, pick-and-place and stacking of 1 … 8 objects."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs import fetch_goals, goals
from ecrl.envs.fetch_scene import (
    FINGER_RANGE,
    GRIPPER_QUAT,
    GRIPPER_SIZE,
    MAX_DISPLACEMENT,
    OBJECT_MASS,
    SUBSTEPS,
    TABLE_HALF,
    TABLE_ORIGIN,
    build_scene,
)
from ecrl.envs.layout import (
    AGENT_GRIPPER,
    AGENT_RGB,
    ENTITY_DIM,
    ENTITY_FIELDS,
    GOAL_DIM,
    GOAL_FIELDS,
    PALETTE,
    SHAPES,
    SUCCESS_DISTANCE,
    shape_one_hot,
)
from ecrl.envs.push import _footprint
from ecrl.envs.rendering import CameraViews
from ecrl.envs.scene import CAMERAS, MAIN_CAMERAS
from ecrl.envs.splits import SPLITS, CompositionalSplit
from ecrl.envs.task import EMBODIMENT_MAX_OBJECTS, RandomTasks, TaskDistribution, TaskSpec, _check_choice, _check_n

STACK_DISTANCE = 0.02
"""Default ``distance_threshold`` of ``stack``: below the 3 cm between two levels of the smallest objects."""
CONTACT_FORCE = 100.0
"""Newtons of finger touch force read as full contact (the agent row's contact column saturates at 1)."""

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_POS, _VEL = _E["position"], _E["velocity"]
_SIN, _COS = _E["yaw"].start, _E["yaw"].start + 1
_OPEN, _CONTACT = AGENT_GRIPPER.start, AGENT_GRIPPER.start + 1
_INERTIA = {"cube": (2 / 3, 2 / 3, 2 / 3), "cylinder": (7 / 12, 7 / 12, 1 / 2), "sphere": (0.4, 0.4, 0.4)}
"""Principal moments of inertia per unit mass and squared size (half side / radius; cylinder height = 2 r)."""


class FetchEnv(CameraViews, gym.Env):
    """Gymnasium-robotics' Fetch arm and ``N`` objects on its table, for the push, pick_place and stack skills.

    The contract is :class:`~ecrl.envs.push.PushEnv`'s: a flat ``Dict`` of entity rows padded to
    ``n_max`` (:mod:`ecrl.envs.layout`), ``info["is_success"]`` and ``info["fraction_placed"]`` on
    every step, ``compute_reward`` vectorised over batches, the same cameras, pixels and
    segmentation. Goal rows are 3-D: an object is *placed* within ``distance_threshold`` of its
    (optimally assigned) target in space. ``ordered`` goals are enforced by fill times as in
    ``PushEnv``.

    Control is FetchPickAndPlace's: the action ``(4,)`` in ``[-1, 1]`` moves the mocap body welded to
    the gripper by ``action[:3]`` × :data:`~ecrl.envs.fetch_scene.MAX_DISPLACEMENT` metres from the
    gripper's current pose and sets each finger's position target to its position + ``action[3]``
    (so ``+1`` opens, ``-1`` closes, and a small value nudges); 20 physics steps of 2 ms per action.
    ``push`` blocks the gripper closed, as FetchPush does (``action[3]`` is ignored).

    The agent row is the gripper (the ``robot0:grip`` site): its position and linear velocity, a
    constant upright yaw and a nominal size, its opening in ``[0, 1]`` (mean finger travel / 5 cm) and
    contact (finger touch force / :data:`CONTACT_FORCE`, clipped) in the :data:`AGENT_GRIPPER` columns.

    Args:
        task: a :class:`TaskSpec` (embodiment ``fetch``) or a task distribution drawn from at each reset;
            ``None`` draws random objects (``n_objects``, ``goal``, ``skill``).
        skill: the skill of random or split tasks; with a ``task`` it must agree (``None``: the task's).
        n_objects: number of objects when ``task`` is not given (1 … 8).
        goal: goal kind when ``task`` is not given.
        split: a :class:`CompositionalSplit` of the fetch embodiment, or the name of a preset in ``SPLITS``.
        part: ``"train"`` or ``"test"``.
        n_max: rows to pad to (``>= n_objects``).
        reward_type: ``"sparse"`` or ``"dense"``.
        distance_threshold: metres within which an object counts as placed (``None``: 4 cm, 2 cm for ``stack``).
        area: sides (x, y) in metres of the rectangle on the table centre where objects start and targets lie.
        render_mode, camera, width, height, pixels, cameras: as for :class:`~ecrl.envs.push.PushEnv`.
    """

    metadata = {"render_modes": ["rgb_array", "depth_array"], "render_fps": 25}

    def __init__(
        self,
        task: TaskSpec | TaskDistribution | dict | None = None,
        *,
        skill: str | None = None,
        n_objects: int = 3,
        goal: str = "positions",
        split: str | CompositionalSplit | None = None,
        part: str = "train",
        n_max: int | None = None,
        reward_type: str = "sparse",
        distance_threshold: float | None = None,
        area: tuple[float, float] = (0.4, 0.56),
        render_mode: str | None = None,
        camera: str = "front",
        width: int = 96,
        height: int = 96,
        pixels: int | None = None,
        cameras: tuple[str, ...] = MAIN_CAMERAS,
    ) -> None:
        if isinstance(split, str):
            _check_choice("split", split, tuple(SPLITS))
            split = SPLITS[split]
        if split is not None and split.embodiment != "fetch":
            raise ValueError(f"FetchEnv needs a split of the 'fetch' embodiment, got one of {split.embodiment!r}")
        if isinstance(task, dict):
            task = TaskSpec.from_dict(task)
        if task is None:
            skill = skill or "push"
            task = (
                split.tasks(part, n_objects, goal, skill)
                if split is not None
                else RandomTasks(n_objects, goal, skill=skill, embodiment="fetch")
            )
        elif isinstance(task, TaskSpec):
            if task.embodiment != "fetch":
                raise ValueError(f"FetchEnv simulates the 'fetch' embodiment, the task is for {task.embodiment!r}")
            if skill is not None and skill != task.skill:
                raise ValueError(f"skill {skill!r} disagrees with the task's skill {task.skill!r}")
        if not hasattr(task, "sample"):
            raise ValueError(f"task must be a TaskSpec or a task distribution, got {type(task).__name__}")
        n = _check_n(task.n_objects)
        if n > EMBODIMENT_MAX_OBJECTS["fetch"]:
            raise ValueError(f"the fetch embodiment holds at most {EMBODIMENT_MAX_OBJECTS['fetch']} objects, got {n}")
        n_max = n if n_max is None else _check_n(n_max)
        if n_max < n:
            raise ValueError(f"n_max must be >= n_objects ({n}), got {n_max}")
        _check_choice("reward_type", reward_type, goals.REWARD_TYPES)
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
        if distance_threshold is not None and not distance_threshold > 0:
            raise ValueError(f"distance_threshold must be positive, got {distance_threshold!r}")
        area = tuple(float(a) for a in area)
        if len(area) != 2 or not (0.1 <= area[0] <= 2 * TABLE_HALF[0] and 0.1 <= area[1] <= 2 * TABLE_HALF[1]):
            raise ValueError(
                f"area must be (x, y) sides within the {2 * TABLE_HALF[0]} x {2 * TABLE_HALF[1]} m table, got {area}"
            )

        self.task, self.n_objects, self.n_max = task, n, n_max
        self.reward_type, self._threshold_arg = reward_type, distance_threshold
        self.distance_threshold = float(distance_threshold or SUCCESS_DISTANCE)
        self.area, self.render_mode, self.camera = area, render_mode, camera
        self.width, self.height = width, height
        self.pixel_cameras = cameras if pixels is not None else ()

        scene = build_scene(n)
        self.model, self._start = scene.model, scene
        self.data = mujoco.MjData(self.model)
        self._renderer: mujoco.Renderer | None = None
        m = self.model
        self._geom = np.array([[m.geom(f"obj{i}_{s}").id for s in SHAPES] for i in range(n)], dtype=np.int64)
        self._obj_body = np.array([m.body(f"obj{i}").id for i in range(n)])
        self._goal_site = np.array([m.site(f"goal{i}").id for i in range(n)])
        self._grip_site = m.site("robot0:grip").id
        self._gripper_body = m.body("robot0:gripper_link").id
        fingers = [m.joint(f"robot0:{s}_gripper_finger_joint").id for s in ("l", "r")]
        self._finger_l, self._finger_r = (int(a) for a in m.jnt_qposadr[fingers])
        if [int(m.actuator_trnid[a, 0]) for a in range(m.nu)] != fingers:
            raise ValueError("the Fetch gripper actuators are not the expected finger joints")
        free = [m.joint(f"obj{i}").id for i in range(n)]
        if any(int(m.jnt_type[j]) != int(mujoco.mjtJoint.mjJNT_FREE) for j in free):
            raise ValueError("object joints must be free joints")
        self._qpos0, self._qvel0 = int(m.jnt_qposadr[free[0]]), int(m.jnt_dofadr[free[0]])
        robot_bodies = {
            m.body(f"robot0:{b}").id for b in ("gripper_link", "r_gripper_finger_link", "l_gripper_finger_link")
        }
        self._agent_geoms = np.array([g for g in range(m.ngeom) if int(m.geom_bodyid[g]) in robot_bodies])

        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (1 + n_max, ENTITY_DIM), np.float64),
                "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
                "desired_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
            }
            | ({"pixels": gym.spaces.Box(0, 255, (len(cameras), pixels, pixels, 3), np.uint8)} if pixels else {})
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.spec_: TaskSpec | None = None
        self._vel6 = np.zeros(6)
        self._bind_views()

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        spec = (options or {}).get("task") or self.task.sample(self.np_random)
        if isinstance(spec, dict):
            spec = TaskSpec.from_dict(spec)
        if spec.n_objects != self.n_objects:
            raise ValueError(f"this env simulates {self.n_objects} objects, the task has {spec.n_objects}")
        if spec.embodiment != "fetch":
            raise ValueError(f"FetchEnv simulates the 'fetch' embodiment, the task is for {spec.embodiment!r}")
        self._apply_spec(spec)
        rng, d, s = self.np_random, self.data, self._start
        starts, targets, ranks = fetch_goals.sample_scene(rng, spec, self._sizes, self._footprints, self.area)
        mujoco.mj_resetData(self.model, d)
        d.qpos[:], d.qvel[:] = s.qpos, s.qvel
        d.mocap_pos[:], d.mocap_quat[:] = s.mocap_pos, s.mocap_quat
        half_yaw = rng.uniform(-np.pi, np.pi, self.n_objects) / 2
        self._obj_qpos[:, :2] = starts + TABLE_ORIGIN[:2]
        self._obj_qpos[:, 2] = TABLE_ORIGIN[2] + self._sizes
        self._obj_qpos[:, 3:] = np.stack([np.cos(half_yaw), 0 * half_yaw, 0 * half_yaw, np.sin(half_yaw)], -1)
        self._obj_qvel[:] = 0.0
        self._set_targets(targets, ranks)
        mujoco.mj_forward(self.model, d)
        self._steps = 0
        self._fill_time = np.full(self.n_objects, np.inf)
        obs = self._get_obs()
        return obs, self._info(self._placed())

    def _apply_spec(self, spec: TaskSpec) -> None:
        """Switch on each object's shape geom, size it, weigh it; precompute the constant parts of rows."""
        m, n = self.model, self.n_objects
        self.spec_ = spec
        self.distance_threshold = float(
            self._threshold_arg or (STACK_DISTANCE if spec.skill == "stack" else SUCCESS_DISTANCE)
        )
        self._block_gripper = spec.skill == "push"
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
        m.body_contype[self._obj_body] = 1
        m.body_conaffinity[self._obj_body] = 1
        m.geom_size[on] = sizes[:, None]
        m.geom_rbound[on] = sizes * np.sqrt(3)
        m.body_inertia[self._obj_body] = (
            OBJECT_MASS * sizes[:, None] ** 2 * np.array([_INERTIA[o.shape] for o in spec.objects])
        )
        m.site_size[self._goal_site, 0] = sizes
        m.site_rgba[self._goal_site, :3] = rgb
        m.site_rgba[self._goal_site, 3] = 0.4

        obs = np.zeros((1 + self.n_max, ENTITY_DIM))
        obs[: 1 + n, _E["present"]] = 1.0
        obs[0, _E["is_agent"]] = 1.0
        obs[0, _E["size"]] = GRIPPER_SIZE
        obs[0, _E["colour"]] = AGENT_RGB
        obs[0, _COS] = 1.0
        rows = slice(1, 1 + n)
        obs[rows, _E["is_object"]] = 1.0
        obs[rows, _E["size"]] = sizes[:, None]
        obs[rows, _E["shape"]] = np.stack([shape_one_hot(o.shape) for o in spec.objects])
        obs[rows, _E["colour"]] = rgb
        self._obs_buf = obs
        goal = np.zeros((self.n_max, GOAL_DIM))
        goal[:n, _G["present"]] = 1.0
        goal[:n, _G["size"]] = sizes[:, None]
        goal[:n, _G["shape"]] = obs[rows, _E["shape"]]
        goal[:n, _G["colour"]] = rgb
        self._achieved_buf = goal
        self._by_colour = spec.goal == "sort"
        self._same = goals.same_group(goal[None, :n], self._by_colour)
        self._allowed = self._same[0] | np.eye(n, dtype=bool) if self._same.any() else None
        self._max_steps = spec.max_steps

    def _set_targets(self, targets: np.ndarray, ranks: np.ndarray) -> None:
        n = self.n_objects
        self._achieved_buf[:n, _G["rank"].start] = ranks
        desired = self._achieved_buf.copy()
        desired[:n, _G["position"]] = targets
        self._desired = desired
        self._target_pos = desired[:n, _G["position"]].copy()
        self._rank_order = np.argsort(ranks) if self.spec_.goal == "ordered" else None
        self.model.site_pos[self._goal_site] = targets + TABLE_ORIGIN
        self._bind_views()

    def _bind_views(self) -> None:
        """Views the step path reads and writes through (rebuilt after unpickling: views do not survive it)."""
        n, d = self.n_objects, self.data
        self._obj_qpos = d.qpos[self._qpos0 : self._qpos0 + 7 * n].reshape(n, 7)
        self._obj_qvel = d.qvel[self._qvel0 : self._qvel0 + 6 * n].reshape(n, 6)
        self._grip_pos = d.site_xpos[self._grip_site]
        self._gripper_xpos, self._gripper_xquat = d.xpos[self._gripper_body], d.xquat[self._gripper_body]
        self._mocap_pos, self._mocap_quat = d.mocap_pos[0], d.mocap_quat[0]
        self._qpos, self._ctrl, self._touch = d.qpos, d.ctrl, d.sensordata
        if self.spec_ is None:
            return
        self._obs_pos = self._obs_buf[: 1 + n, _POS]
        self._obs_vel = self._obs_buf[: 1 + n, _VEL]
        self._obs_sin, self._obs_cos = self._obs_buf[1 : 1 + n, _SIN], self._obs_buf[1 : 1 + n, _COS]
        self._achieved_pos = self._achieved_buf[:n, _G["position"]]

    # ------------------------------------------------------------------ step
    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        values = a.tolist() if a.shape == (4,) else [math.nan]
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"action must be a finite array of shape (4,), got {a.shape} {a!r}")
        dx, dy, dz, g = (min(max(v, -1.0), 1.0) for v in values)
        # FetchPickAndPlace's mocap_set_action: the mocap restarts from the gripper's pose each step.
        x, y, z = self._gripper_xpos.tolist()
        self._mocap_pos[0] = x + dx * MAX_DISPLACEMENT
        self._mocap_pos[1] = y + dy * MAX_DISPLACEMENT
        self._mocap_pos[2] = z + dz * MAX_DISPLACEMENT
        np.add(self._gripper_xquat, GRIPPER_QUAT, out=self._mocap_quat)
        if self._block_gripper:
            self._ctrl[:] = 0.0
        else:
            self._ctrl[0] = self._qpos[self._finger_l] + g
            self._ctrl[1] = self._qpos[self._finger_r] + g
        mujoco.mj_step(self.model, self.data, nstep=SUBSTEPS)
        self._steps += 1
        obs = self._get_obs()
        placed = self._placed()
        info = self._info(placed)
        if self.reward_type == "dense":
            reward = -float(self._dist.mean())
        else:
            reward = -1.0 + np.count_nonzero(placed) / self.n_objects
        return obs, float(reward), False, self._steps >= self._max_steps, info

    def _get_obs(self) -> dict[str, np.ndarray]:
        obj = self._obj_qpos
        np.subtract(self._grip_pos, TABLE_ORIGIN, out=self._obs_pos[0])
        np.subtract(obj[:, :3], TABLE_ORIGIN, out=self._obs_pos[1:])
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self._grip_site, self._vel6, 0)
        self._obs_vel[0] = self._vel6[3:]
        self._obs_vel[1:] = self._obj_qvel[:, :3]
        # Yaw of each free joint's quaternion (w, x, y, z), as sin and cos without an arctan.
        q = obj[:, 3:].T
        s, c = 2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] * q[2] + q[3] * q[3])
        r = np.hypot(s, c) + 1e-12
        buf = self._obs_buf
        np.divide(s, r, out=self._obs_sin)
        np.divide(c, r, out=self._obs_cos)
        opening = (self._qpos[self._finger_l] + self._qpos[self._finger_r]) / (2 * FINGER_RANGE)
        buf[0, _OPEN] = min(max(opening, 0.0), 1.0)
        buf[0, _CONTACT] = min(float(self._touch[0] + self._touch[1]) / CONTACT_FORCE, 1.0)
        self._achieved_pos[...] = self._obs_pos[1:]
        obs = {
            "observation": buf.copy(),
            "achieved_goal": self._achieved_buf.copy(),
            "desired_goal": self._desired.copy(),
        }
        if self.pixel_cameras:
            obs["pixels"] = np.stack([self._render_with(c) for c in self.pixel_cameras])
        return obs

    def _placed(self) -> np.ndarray:
        """``(N,)`` bool per target: an object is on it (and records fill times for ordered goals)."""
        if self._allowed is None:
            self._dist = goals.norm(self._achieved_pos - self._target_pos)
        else:
            self._dist = goals.matched_distances(self._achieved_pos, self._target_pos, self._allowed)
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

    # ------------------------------------------------------------------ rendering (the rest: CameraViews)
    def render_segmentation(self, camera: str = "front") -> np.ndarray:
        """``(H, W) int16`` labels: 0 background (table, arm), 1 the gripper (row 0), ``i + 2`` object ``i``."""
        seg = self._render_with(camera, segmentation=True)
        ids, kinds = seg[..., 0], seg[..., 1]
        lut = np.zeros(self.model.ngeom + 1, dtype=np.int16)
        lut[self._agent_geoms] = 1
        lut[self._geom] = np.arange(2, self.n_objects + 2)[:, None]
        return lut[np.where(kinds == int(mujoco.mjtObj.mjOBJ_GEOM), ids, self.model.ngeom)]

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._bind_views()
