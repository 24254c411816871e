"""The Fetch arm environment: push, pick-and-place and stacking of 1 … 8 objects."""

from __future__ import annotations

import mujoco
import numpy as np

from ecrl.envs import fetch_goals
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
from ecrl.envs.goal_env import EntityGoalEnv
from ecrl.envs.layout import AGENT_GRIPPER, ENTITY_FIELDS, GOAL_FIELDS, SHAPES, SUCCESS_DISTANCE
from ecrl.envs.scene import MAIN_CAMERAS, footprint
from ecrl.envs.splits import CompositionalSplit
from ecrl.envs.task import TaskDistribution, TaskSpec

STACK_DISTANCE = 0.02
"""Default ``distance_threshold`` of ``stack``: below the 3 cm between two levels of the smallest objects."""
ACTION_DIM = 4
"""Width of the arm's actions: the gripper's displacement (x, y, z) and the fingers."""
CONTACT_FORCE = 100.0
"""Newtons of finger touch force read as full contact (the agent row's contact column saturates at 1)."""

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_POS, _VEL = _E["position"], _E["velocity"]
_SIN, _COS = _E["yaw"].start, _E["yaw"].start + 1
_OPEN, _CONTACT = AGENT_GRIPPER.start, AGENT_GRIPPER.start + 1
_INERTIA = {"cube": (2 / 3, 2 / 3, 2 / 3), "cylinder": (7 / 12, 7 / 12, 1 / 2), "sphere": (0.4, 0.4, 0.4)}
"""Principal moments of inertia per unit mass and squared size (half side / radius; cylinder height = 2 r)."""


class FetchEnv(EntityGoalEnv):
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
    embodiment, substeps, _simulates = "fetch", SUBSTEPS, "the 'fetch' embodiment"

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
        self._set_task(task, skill=skill, n_objects=n_objects, goal=goal, split=split, part=part, n_max=n_max)
        self._set_reward(reward_type, distance_threshold)
        self._set_cameras(render_mode, camera, width, height, pixels, cameras)
        area = tuple(float(a) for a in area)
        if len(area) != 2 or not (0.1 <= area[0] <= 2 * TABLE_HALF[0] and 0.1 <= area[1] <= 2 * TABLE_HALF[1]):
            raise ValueError(
                f"area must be (x, y) sides within the {2 * TABLE_HALF[0]} x {2 * TABLE_HALF[1]} m table, got {area}"
            )

        n = self.n_objects
        self._threshold_arg = distance_threshold
        self.distance_threshold = float(distance_threshold or SUCCESS_DISTANCE)
        self.area = area

        scene = build_scene(n)
        self.model, self._start = scene.model, scene
        self.data = mujoco.MjData(self.model)
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

        self._make_spaces(ACTION_DIM)
        self._vel6 = np.zeros(6)
        self._bind_views()

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        spec = self._draw_task(seed, options)
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
        return self._start_episode()

    def _apply_spec(self, spec: TaskSpec) -> None:
        """Switch on each object's shape geom, size it, weigh it; precompute the constant parts of rows."""
        m, n = self.model, self.n_objects
        self.spec_ = spec
        self.distance_threshold = float(
            self._threshold_arg or (STACK_DISTANCE if spec.skill == "stack" else SUCCESS_DISTANCE)
        )
        self._block_gripper = spec.skill == "push"
        sizes, rgb = self._show_objects(spec, goal_alpha=0.4)
        self._sizes = sizes
        self._footprints = np.array([footprint(o.shape, o.size) for o in spec.objects])
        m.body_inertia[self._obj_body] = (
            OBJECT_MASS * sizes[:, None] ** 2 * np.array([_INERTIA[o.shape] for o in spec.objects])
        )
        self._obs_buf, self._achieved_buf = self._row_templates(spec, sizes, rgb, agent_size=GRIPPER_SIZE)
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
    def _apply_action(self, a: list[float]) -> None:
        dx, dy, dz, g = a
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
