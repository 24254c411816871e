"""The planar push environment: a pusher moves objects on a table to goal configurations."""

from __future__ import annotations

import mujoco
import numpy as np

from ecrl.envs import goals
from ecrl.envs.goal_env import EntityGoalEnv
from ecrl.envs.layout import (
    ENTITY_FIELDS,
    ENTITY_VELOCITY_XY,
    ENTITY_XY,
    GOAL_FIELDS,
    GOAL_XY,
    SHAPES,
    SUCCESS_DISTANCE,
)
from ecrl.envs.scene import (
    AGENT_HALF_HEIGHT,
    AGENT_RADIUS,
    MAIN_CAMERAS,
    SUBSTEPS,
    build_model,
    footprint,
    scatter,
)
from ecrl.envs.splits import CompositionalSplit
from ecrl.envs.task import TaskDistribution, TaskSpec

MAX_DISPLACEMENT = 0.03
"""Metres the pusher's set point moves per step at action magnitude 1 (per axis)."""

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_SIN, _COS = _E["yaw"].start, _E["yaw"].start + 1


class PushEnv(EntityGoalEnv):
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
        goal_pixels: also observe the goal as images (needs ``pixels``; ``positions`` goals only): the
            observation dict gains ``goal_pixels``, ``(V, P, P, 3)`` uint8 frames of the goal
            configuration from the same cameras (:meth:`render_goal_views`), rendered once per reset.
    """

    metadata = {"render_modes": ["rgb_array", "depth_array"], "render_fps": 20}
    embodiment, substeps, _simulates = "pusher", SUBSTEPS, "the planar pusher"

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
        goal_pixels: bool = False,
    ) -> None:
        if goal_pixels and pixels is None:
            raise ValueError("goal_pixels renders the goal from the pixels cameras: pass pixels=P too")
        self.goal_pixels = bool(goal_pixels)
        self._set_task(task, skill=None, n_objects=n_objects, goal=goal, split=split, part=part, n_max=n_max)
        self._set_reward(reward_type, distance_threshold)
        self._set_cameras(render_mode, camera, width, height, pixels, cameras)
        task, n = self.task, self.n_objects
        self.distance_threshold, self.table_size = float(distance_threshold), float(table_size)
        # Fail now, not at the first reset, if N bodies cannot fit the table (random objects: a 3 cm cube at most).
        sizes = [footprint(o.shape, o.size) for o in task.objects] if isinstance(task, TaskSpec) else []
        scatter(np.random.default_rng(0), np.full(n + 1, max(sizes, default=footprint("cube", 0.03))), self.table_size)

        self.model = build_model(n, self.table_size)
        self.data = mujoco.MjData(self.model)
        m = self.model
        self._geom = np.array([[m.geom(f"obj{i}_{s}").id for s in SHAPES] for i in range(n)], dtype=np.int64)  # (N, S)
        self._goal_site = np.array([m.site(f"goal{i}").id for i in range(n)])
        self._obj_body = np.array([m.body(f"obj{i}").id for i in range(n)])
        self._agent_geoms = np.array([m.geom("agent").id])
        self._obj_joint = np.array([[m.joint(f"obj{i}_{a}").id for a in "xy"] for i in range(n)])
        self._make_spaces(2)
        if self.goal_pixels:
            self.observation_space["goal_pixels"] = self.observation_space["pixels"]

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        spec = self._draw_task(seed, options)
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
        if self.goal_pixels:
            views = self.render_goal_views(self.pixel_cameras)
            self._goal_frames = np.stack([views[c] for c in self.pixel_cameras])
        return self._start_episode()

    def render_goal_views(self, cameras: tuple[str, ...] = MAIN_CAMERAS) -> dict[str, np.ndarray]:
        """RGB images ``{camera: (H, W, 3) uint8}`` of the episode's goal configuration: every object at
        its target (its yaw as it is now), with neither the pusher nor the goal markers in view.

        Goal images as ECRL and EC-Diffuser give them. Only ``positions`` goals are one configuration
        (``adjacent``, ``sort`` and ``ordered`` goals are met by many): other kinds raise. The scene is
        put back as it was, so rendering the goal changes nothing in the episode.
        """
        if self.spec_ is None:
            raise RuntimeError("render_goal_views needs an episode: call reset() first")
        if self.spec_.goal != "positions":
            raise ValueError(
                f"a goal image shows one configuration; {self.spec_.goal!r} goals are met by many (use 'positions')"
            )
        m, qpos = self.model, self.data.qpos
        saved_qpos = qpos.copy()
        agent_rgba, site_rgba = m.geom_rgba[self._agent_geoms].copy(), m.site_rgba[self._goal_site].copy()
        try:
            self._obj_qpos[:, :2] = self._target_xy
            m.geom_rgba[self._agent_geoms, 3] = 0.0
            m.site_rgba[self._goal_site, 3] = 0.0
            mujoco.mj_kinematics(m, self.data)
            return self.render_views(cameras)
        finally:
            qpos[:] = saved_qpos
            m.geom_rgba[self._agent_geoms], m.site_rgba[self._goal_site] = agent_rgba, site_rgba
            mujoco.mj_forward(m, self.data)

    def _apply_spec(self, spec: TaskSpec) -> None:
        """Switch on each object's shape geom, colour and size; precompute the constant parts of rows."""
        m, n = self.model, self.n_objects
        self.spec_ = spec
        sizes, rgb = self._show_objects(spec, goal_alpha=0.45)
        self._sizes = sizes
        self._footprints = np.array([footprint(o.shape, o.size) for o in spec.objects])
        m.body_pos[self._obj_body, 2] = sizes
        m.jnt_range[self._obj_joint] = np.stack([-(self.table_size / 2 - sizes), self.table_size / 2 - sizes], -1)[
            :, None
        ]
        obs, goal = self._row_templates(spec, sizes, rgb, agent_size=(AGENT_RADIUS, AGENT_RADIUS, AGENT_HALF_HEIGHT))
        obs[0, _E["position"].start + 2] = AGENT_HALF_HEIGHT
        obs[1 : 1 + n, _E["position"].start + 2] = sizes
        goal[:n, _G["position"].start + 2] = sizes
        self._obs_template, self._goal_template = obs, goal

    def _set_targets(self, targets: np.ndarray, ranks: np.ndarray) -> None:
        n = self.n_objects
        desired = self._goal_template.copy()
        desired[:n, GOAL_XY] = targets
        desired[:n, _G["rank"].start] = ranks
        self._goal_template[:n, _G["rank"].start] = ranks
        self._desired = desired
        self._target_pos = desired[:n, _G["position"]]
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
    def _apply_action(self, a: list[float]) -> None:
        px, py = self._agent_qpos.tolist()
        self._ctrl[0] = px + a[0] * MAX_DISPLACEMENT
        self._ctrl[1] = py + a[1] * MAX_DISPLACEMENT

    def _get_obs(self) -> dict[str, np.ndarray]:
        # Only the moving fields are written (the rest was set at reset); callers get copies.
        xy = self._qpos[self._xy_index]
        self._obs_xy[...] = xy
        self._objects_xy = objects_xy = xy[1:]  # contiguous, for _distances
        self._obs_vel[...] = self._qvel[self._xy_index]
        self._obs_sin[...] = np.sin(self._yaw)
        self._obs_cos[...] = np.cos(self._yaw)
        self._achieved_xy[...] = objects_xy
        self._achieved = achieved = self._achieved_buf.copy()
        obs = {"observation": self._obs_buf.copy(), "achieved_goal": achieved, "desired_goal": self._desired.copy()}
        if self.pixel_cameras:
            obs["pixels"] = np.stack([self._render_with(c) for c in self.pixel_cameras])
            if self.goal_pixels:
                obs["goal_pixels"] = self._goal_frames.copy()
        return obs

    def _distances(self) -> np.ndarray:
        if self._allowed is not None:
            return super()._distances()
        # No interchangeable objects: each object to its own target. The z of both is the object's size,
        # so the 2-D norm equals the 3-D one bit for bit.
        d = self._objects_xy - self._target_xy
        d *= d
        return np.sqrt(d[:, 0] + d[:, 1])
