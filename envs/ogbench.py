"""OGBench's cube suite behind the library's entity contract (optional extra: ``pip install 'ecrl[ogbench]'``).

:class:`OGBenchCubeEnv` wraps OGBench's own ``CubeEnv`` (a UR5e arm with a Robotiq 2F-85 gripper,
1, 2, 3, 4 or 8 cubes) unchanged: every step is OGBench's step, and ``info["is_success"]`` is
OGBench's own success flag (``info["success"]``: every cube within 4 cm of its goal in ``task``
mode, the current target cube on its target in ``play`` mode). Around it the adapter presents the
contract of :class:`~ecrl.envs.push.PushEnv`: ``observation (1 + n_max, ENTITY_DIM)`` (the
gripper first, then one row per cube), ``achieved_goal``/``desired_goal (n_max, GOAL_DIM)``, a
batched :meth:`~OGBenchCubeEnv.compute_reward`, ``info["fraction_placed"]`` (cubes within 4 cm of
their goal rows; in ``play`` mode only the target cube's row is a goal elsewhere than where it is)
and :meth:`~OGBenchCubeEnv.render_views`. The mapping of OGBench's state to rows is in the
:mod:`ecrl.envs.layout` docstring ("OGBench cubes").

Registered ids (``import ecrl.envs``): ``ecrl/OGBenchCube-v0`` (``n_cubes`` and ``task_id`` as
keywords of ``gym.make``) and ``ecrl/OGBenchCube{Single,Double,Triple,Quadruple,Octuple}-v0``.
Episodes end at OGBench's limits (200 / 500 / 1,000 / 1,000 / 1,500 steps for 1 / 2 / 3 / 4 / 8
cubes), in ``task`` mode also at success (OGBench's ``terminate_at_goal``).

The same module holds the play oracle that ``ecrl-collect --env ogbench-cube --play`` drives
(:class:`CubePlayOracle`); :mod:`ecrl.envs.ogbench_data` reads OGBench's dataset files. Only this
module imports ``ogbench``, and only when an env or oracle is built.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs import goals
from ecrl.envs.layout import (
    AGENT_GRIPPER,
    AGENT_RGB,
    ENTITY_DIM,
    ENTITY_FIELDS,
    GOAL_DIM,
    GOAL_FIELDS,
    GOAL_PRESENT,
    SUCCESS_DISTANCE,
    shape_one_hot,
)

CUBE_ENV_TYPES: dict[int, str] = {1: "single", 2: "double", 3: "triple", 4: "quadruple", 8: "octuple"}
"""OGBench's name of the cube env with ``n`` cubes (``cube-<name>-v0``)."""
EPISODE_STEPS: dict[int, int] = {1: 200, 2: 500, 3: 1000, 4: 1000, 8: 1500}
"""OGBench's evaluation episode limit per number of cubes (its registered ``max_episode_steps``)."""
PLAY_EPISODE_STEPS = 1001
"""Steps of a play episode in OGBench's ``cube-*-play`` recipe."""
PLAY_P_STACK: dict[int, tuple[float, float]] = {
    1: (0.0, 0.0),
    2: (0.0, 0.25),
    3: (0.05, 0.35),
    4: (0.1, 0.5),
    8: (0.0, 0.35),
}
"""Range of the per-episode stacking probability ``p_stack`` in OGBench's play recipe."""
PLAY_NOISE, PLAY_NOISE_SMOOTHING = 0.1, 0.5
"""OGBench's plan-oracle noise for play data (``CubePlanOracle(noise=0.1, noise_smoothing=0.5)``)."""
N_TASKS = 5
"""Evaluation tasks OGBench defines per cube env (``task_id`` 1 … ``N_TASKS``). Its success radius, a cube
within 4 cm (3-D) of its goal, is the library's :data:`~ecrl.envs.layout.SUCCESS_DISTANCE`."""
ACTION_DIM = 5
"""OGBench's action: effector displacement x, y, z, yaw, gripper, each in ``[-1, 1]``."""
TABLE_CENTRE = np.array([0.425, 0.0, 0.0])
"""OGBench's workspace centre (the table top is at z = 0); rows hold positions relative to it."""
MODES = ("task", "play")
_OGB_MODE = {"task": "task", "play": "data_collection"}
# OGBench's flat state observation: scalings and the width of the robot part (joints, effector, gripper).
XYZ_SCALE, GRIPPER_SCALE, ROBOT_DIM, CUBE_DIM = 10.0, 3.0, 19, 9

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_POS, _VEL, _SIN, _COS = _E["position"], _E["velocity"], _E["yaw"].start, _E["yaw"].start + 1
_OPENING, _CONTACT = AGENT_GRIPPER.start, AGENT_GRIPPER.start + 1
GRIPPER_SIZE = (0.045, 0.015, 0.035)
"""Half extents (m) written to the gripper row's ``size``: a nominal box around the fingers (a constant)."""


def import_ogbench() -> Any:
    """The ``ogbench`` package, or an ``ImportError`` saying which extra installs it."""
    try:
        import ogbench
        import ogbench.manipspace  # noqa: F401  (registers OGBench's env ids)
    except ImportError as e:
        raise ImportError(
            f"the OGBench cube envs need the optional extra 'ogbench': pip install 'ecrl[ogbench]' (import failed: {e})"
        ) from e
    return ogbench


def check_n_cubes(n_cubes: Any) -> int:
    """``n_cubes`` as an int, or a ``ValueError`` listing OGBench's sizes."""
    if isinstance(n_cubes, bool) or not isinstance(n_cubes, int | np.integer) or int(n_cubes) not in CUBE_ENV_TYPES:
        raise ValueError(f"n_cubes must be one of OGBench's sizes {list(CUBE_ENV_TYPES)}, got {n_cubes!r}")
    return int(n_cubes)


@dataclass(frozen=True)
class OGBenchCubeTask:
    """What an OGBench cube episode was: the size, the mode and (``task`` mode) the evaluation task.

    It plays the part of a :class:`~ecrl.envs.task.TaskSpec` in datasets (``task_json``).
    """

    n_cubes: int
    mode: str = "play"
    task_id: int | None = None
    task_name: str | None = None

    def __post_init__(self) -> None:
        check_n_cubes(self.n_cubes)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.task_id is not None and not 1 <= self.task_id <= N_TASKS:
            raise ValueError(f"task_id must be in 1 … {N_TASKS} (or None), got {self.task_id!r}")

    @property
    def n_objects(self) -> int:
        return self.n_cubes

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": "ogbench", "env": f"cube-{CUBE_ENV_TYPES[self.n_cubes]}", **asdict(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OGBenchCubeTask:
        if d.get("benchmark") != "ogbench":
            raise ValueError(f"not an OGBench task (benchmark = {d.get('benchmark')!r}): {dict(d)}")
        return cls(int(d["n_cubes"]), d.get("mode", "play"), d.get("task_id"), d.get("task_name"))


def _yaw_of_quat(q: np.ndarray) -> np.ndarray:
    """Yaw (rad) of ``(..., 4)`` wxyz quaternions, OGBench's formula (``SO3.compute_yaw_radians``)."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


class OGBenchCubeEnv(goals.GoalReward, gym.Env):
    """OGBench's cube env (``cube-<single|double|…>-v0``) with entity-row observations.

    Args:
        n_cubes: 1, 2, 3, 4 or 8.
        task_id: ``task`` mode: OGBench's evaluation task (1 … 5) at every reset; ``None`` draws one
            per reset from the env's seeded generator (OGBench itself would use numpy's global one).
            ``reset(options={"task_id": k})`` overrides it for one episode.
        mode: ``"task"`` (OGBench's evaluation tasks) or ``"play"`` (OGBench's ``data_collection``
            mode: random scene, one target cube at a time, never terminates; see :class:`CubePlayOracle`).
        n_max: cube rows to pad to (``>= n_cubes``; default ``n_cubes``).
        reward_type: ``"sparse"`` (minus the fraction of cubes off their goals) or ``"dense"`` (minus
            the mean distance), from :meth:`compute_reward`.
        max_episode_steps: truncate after this many steps (default: OGBench's limit for ``task``,
            :data:`PLAY_EPISODE_STEPS` for ``play``).
        render_mode: ``"rgb_array"`` renders OGBench's ``front`` camera at ``width`` x ``height``.
        **ogbench_kwargs: passed to OGBench's env unchanged (e.g. ``permute_blocks``, ``visualize_info``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        n_cubes: int = 2,
        task_id: int | None = None,
        *,
        mode: str = "task",
        n_max: int | None = None,
        reward_type: str = "sparse",
        max_episode_steps: int | None = None,
        render_mode: str | None = None,
        width: int = 200,
        height: int = 200,
        **ogbench_kwargs: Any,
    ) -> None:
        n = check_n_cubes(n_cubes)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
        if task_id is not None and (mode != "task" or not 1 <= task_id <= N_TASKS):
            raise ValueError(f"task_id must be in 1 … {N_TASKS} in task mode (None: random), got {task_id!r}")
        n_max = n if n_max is None else int(n_max)
        if n_max < n:
            raise ValueError(f"n_max must be >= n_cubes ({n}), got {n_max}")
        if reward_type not in goals.REWARD_TYPES:
            raise ValueError(f"unknown reward_type {reward_type!r}: expected one of {list(goals.REWARD_TYPES)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}: expected one of {self.metadata['render_modes']}")
        default_steps = EPISODE_STEPS[n] if mode == "task" else PLAY_EPISODE_STEPS
        max_steps = default_steps if max_episode_steps is None else int(max_episode_steps)
        if max_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps!r}")
        import_ogbench()
        self.ogbench_id = f"cube-{CUBE_ENV_TYPES[n]}-v0"
        kwargs = {"mode": _OGB_MODE[mode], "width": width, "height": height} | ogbench_kwargs
        if mode == "play":
            kwargs.setdefault("terminate_at_goal", False)  # OGBench's play recipe
        # OGBench's env as registered (its own kwargs), without gymnasium's wrappers: this class keeps time.
        self.ogbench_env = gym.make(self.ogbench_id, disable_env_checker=True, **kwargs).unwrapped
        self.n_objects, self.n_max, self.mode, self.task_id = n, n_max, mode, task_id
        self.reward_type, self.max_episode_steps, self.render_mode = reward_type, max_steps, render_mode
        self.distance_threshold = SUCCESS_DISTANCE
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (1 + n_max, ENTITY_DIM), np.float64),
                "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
                "desired_goal": gym.spaces.Box(-np.inf, np.inf, (n_max, GOAL_DIM), np.float64),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.spec_: OGBenchCubeTask | None = None
        self.ogbench_info: dict[str, Any] = {}
        """OGBench's own ``info`` of the last reset or step (what its oracles read)."""
        self._bound = False

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}: expected only 'task_id'")
        ogb_options = None
        task_id = None
        if self.mode == "task":
            task_id = options.get("task_id", self.task_id)
            if task_id is None:
                task_id = int(self.np_random.integers(1, N_TASKS + 1))
            if isinstance(task_id, bool) or not isinstance(task_id, int | np.integer) or not 1 <= task_id <= N_TASKS:
                raise ValueError(f"task_id must be in 1 … {N_TASKS}, got {task_id!r}")
            ogb_options = {"task_id": int(task_id)}
        elif "task_id" in options:
            raise ValueError("task_id is an option of task mode; play mode has no evaluation tasks")
        # OGBench gets the same seed: reset(seed=s) here is OGBench's own reset(seed=s) on the same task.
        ogb_seed = seed
        with warnings.catch_warnings():
            # OGBench's task reset samples from a fresh float64-bounded Box, which gymnasium warns about.
            warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
            _, self.ogbench_info = self.ogbench_env.reset(seed=ogb_seed, options=ogb_options)
        if not self._bound:
            self._bind()
        ogb = self.ogbench_env
        name = ogb.cur_task_info["task_name"] if self.mode == "task" else None
        self.spec_ = OGBenchCubeTask(self.n_objects, self.mode, task_id, name)
        self._templates()
        self._steps = 0
        self._prev_effector = self._data.site_xpos[self._pinch].copy()
        obs = self.observe()
        return obs, self._info(bool(ogb._success), self._goal_distances())

    def _bind(self) -> None:
        """Indices into OGBench's model (compiled at its first reset, and never recompiled)."""
        ogb, n = self.ogbench_env, self.n_objects
        model = ogb._model
        self._model, self._data = model, ogb._data
        joints = [model.joint(f"object_joint_{i}").id for i in range(n)]
        self._cube_q = model.jnt_qposadr[joints][:, None] + np.arange(7)  # (n, 7): xyz, wxyz
        self._cube_v = model.jnt_dofadr[joints][:, None] + np.arange(3)  # (n, 3): linear velocity
        self._mocap = np.array(ogb._cube_target_mocap_ids)
        self._pinch = ogb._pinch_site_id
        self._gripper_q = model.jnt_qposadr[ogb._gripper_opening_joint_id]
        self._pad = model.body("ur5e/robotiq/right_pad").id
        self._half = np.array([model.geom_size[ids[0]] for ids in ogb._cube_geom_ids_list])  # (n, 3)
        self._dt = ogb._control_timestep
        self._quat = np.zeros(4)
        self._bound = True

    def _templates(self) -> None:
        """The constant parts of the rows (sizes, shapes, colours: the cube colours of this episode)."""
        n, rgb = self.n_objects, np.asarray(self.ogbench_env._cube_colors)[: self.n_objects, :3]
        obs = np.zeros((1 + self.n_max, ENTITY_DIM))
        obs[: 1 + n, _E["present"]] = 1.0
        obs[0, _E["is_agent"]] = 1.0
        obs[0, _E["size"]] = GRIPPER_SIZE
        obs[0, _E["colour"]] = AGENT_RGB
        obs[1 : 1 + n, _E["is_object"]] = 1.0
        obs[1 : 1 + n, _E["size"]] = self._half
        obs[1 : 1 + n, _E["shape"]] = shape_one_hot("cube")
        obs[1 : 1 + n, _E["colour"]] = rgb
        goal = np.zeros((self.n_max, GOAL_DIM))
        goal[:n, _G["present"]] = 1.0
        goal[:n, _G["size"]] = self._half
        goal[:n, _G["shape"]] = shape_one_hot("cube")
        goal[:n, _G["colour"]] = rgb
        self._obs_buf, self._achieved_buf, self._desired_buf = obs, goal, goal.copy()
        self._present = goal[:, GOAL_PRESENT] > 0.5

    # ------------------------------------------------------------------ step
    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        # OGBench gets the action as given: its dtype changes its float arithmetic (float32 rounds differently).
        a = np.asarray(action)
        if a.shape != (ACTION_DIM,) or a.dtype.kind not in "fiu" or not np.isfinite(a).all():
            raise ValueError(f"action must be a finite array of shape ({ACTION_DIM},), got {a.shape} {a!r}")
        self._prev_effector = self._data.site_xpos[self._pinch].copy()
        _, _, terminated, _, self.ogbench_info = self.ogbench_env.step(a)
        self._steps += 1
        obs = self.observe()
        # compute_reward on this step's rows, bit for bit, without its batch handling (cubes differ in colour).
        dist = self._goal_distances()
        reward = goals.reward_from_distances(dist, self._present, self.distance_threshold, self.reward_type)
        info = self._info(bool(self.ogbench_info["success"]), dist)
        return obs, float(reward), bool(terminated), self._steps >= self.max_episode_steps, info

    def observe(self) -> dict[str, np.ndarray]:
        """The observation of the simulator's current state (what :meth:`step` returns)."""
        data, n = self._data, self.n_objects
        q = data.qpos[self._cube_q]  # (n, 7)
        pos = q[:, :3] - TABLE_CENTRE
        yaw = _yaw_of_quat(q[:, 3:])
        obs = self._obs_buf
        effector = data.site_xpos[self._pinch]
        mujoco.mju_mat2Quat(self._quat, data.site_xmat[self._pinch])
        w, x, y, z = self._quat.tolist()  # four numbers: plain floats are cheaper than numpy calls
        effector_yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        obs[0, _POS] = effector - TABLE_CENTRE
        obs[0, _VEL] = (effector - self._prev_effector) / self._dt
        obs[0, _SIN], obs[0, _COS] = math.sin(effector_yaw), math.cos(effector_yaw)
        obs[0, _OPENING] = min(max(data.qpos[self._gripper_q] / 0.8, 0.0), 1.0)  # OGBench's gripper_opening
        force = data.cfrc_ext[self._pad]
        obs[0, _CONTACT] = min(math.sqrt(force @ force) / 50, 1.0)  # its gripper_contact
        rows = slice(1, 1 + n)
        obs[rows, _POS] = pos
        obs[rows, _SIN], obs[rows, _COS] = np.sin(yaw), np.cos(yaw)
        obs[rows, _VEL] = data.qvel[self._cube_v]
        self._achieved_buf[:n, _G["position"]] = pos
        desired = data.mocap_pos[self._mocap] - TABLE_CENTRE
        if self.mode == "play":
            # Only the target cube has a goal in play; the others' goals are where they are (placed).
            target = int(self.ogbench_env._target_block)
            others = np.arange(n) != target
            desired[others] = pos[others]
        self._desired_buf[:n, _G["position"]] = desired
        return {
            "observation": obs.copy(),
            "achieved_goal": self._achieved_buf.copy(),
            "desired_goal": self._desired_buf.copy(),
        }

    def _goal_distances(self) -> np.ndarray:
        """``(n_max,)`` distances (m) of the cube rows to their goal rows (0 for padding)."""
        return goals.norm(self._achieved_buf[:, _G["position"]] - self._desired_buf[:, _G["position"]])

    def _info(self, success: bool, dist: np.ndarray) -> dict[str, Any]:
        placed = (dist <= self.distance_threshold) & self._present
        return {
            "is_success": success,
            "fraction_placed": float(placed.sum() / self.n_objects),
            "task_id": self.spec_.task_id if self.spec_ else None,
        }

    def set_new_target(self, p_stack: float) -> dict[str, Any]:
        """Play mode: OGBench's ``set_new_target`` (a new target cube and goal); returns OGBench's info."""
        if self.mode != "play":
            raise ValueError("set_new_target is for play mode (OGBench's data_collection mode)")
        if not 0.0 <= p_stack <= 1.0:
            raise ValueError(f"p_stack must be a probability in [0, 1], got {p_stack!r}")
        _, self.ogbench_info = self.ogbench_env.set_new_target(p_stack=p_stack)
        return self.ogbench_info

    # ------------------------------------------------------------------ rendering
    def render(self) -> np.ndarray | None:
        """``(H, W, 3) uint8`` from OGBench's ``front`` camera."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array' to make()")
            return None
        return self.ogbench_env.render().copy()

    def render_views(self) -> dict[str, np.ndarray]:
        """``{"front": (H, W, 3) uint8}``: OGBench's ``front`` camera, with or without a ``render_mode``
        (the evaluation's videos; the push env's :meth:`~ecrl.envs.push.PushEnv.render_views` has several)."""
        return {"front": self.ogbench_env.render().copy()}

    def close(self) -> None:
        self.ogbench_env.close()


# ---------------------------------------------------------------------------------------------- play oracle
@contextlib.contextmanager
def _global_numpy_state(state: dict[str, Any]) -> Iterator[None]:
    """Run OGBench's oracle (which draws from numpy's global generator) on ``state["rng"]``'s stream."""
    # The legacy global generator is the point here: it is what OGBench's oracles draw from.
    saved = np.random.get_state()  # noqa: NPY002
    np.random.set_state(state["rng"])  # noqa: NPY002
    try:
        yield
    finally:
        state["rng"] = np.random.get_state()  # noqa: NPY002
        np.random.set_state(saved)  # noqa: NPY002


class CubePlayOracle:
    """OGBench's ``cube-*-play`` recipe as a batch policy of :func:`ecrl.rollout.rollout` (``reset(envs, seeds)``, ``act``).

    Per episode (OGBench's ``data_gen_scripts/generate_manipspace.py``, ``dataset_type=play``):
    OGBench's ``CubePlanOracle(noise=0.1, noise_smoothing=0.5)`` plans a pick-and-place of the
    current target cube (keyframes with random heights and timings, temporally correlated noise);
    when its plan is done, ``set_new_target(p_stack)`` picks a new target cube and goal, stacking it
    on another cube with probability ``p_stack``, drawn once per episode from :data:`PLAY_P_STACK`.
    Actions are clipped to ``[-1, 1]``; no random actions. The envs must be ``mode="play"``
    :class:`OGBenchCubeEnv` s (1,001-step episodes by default).

    The oracle draws from numpy's global generator; here each episode's oracle draws from its own
    stream seeded by the episode's seed, so an episode depends on its seed alone (not on the batch).
    """

    def reset(self, envs: Sequence[gym.Env], seeds: Sequence[int]) -> None:
        from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle

        self.envs = [env.unwrapped for env in envs]
        self.oracles, self.states, self.p_stack = [], [], []
        for env, seed in zip(self.envs, seeds, strict=True):
            if not isinstance(env, OGBenchCubeEnv) or env.mode != "play":
                raise ValueError(f"CubePlayOracle drives OGBenchCubeEnv in play mode, got {env!r}")
            state = {"rng": np.random.RandomState(np.random.SeedSequence([0x0B, seed]).generate_state(1)).get_state()}
            with _global_numpy_state(state):
                lo, hi = PLAY_P_STACK[env.n_objects]
                self.p_stack.append(float(np.random.uniform(lo, hi)))  # noqa: NPY002 (as OGBench's script)
                oracle = CubePlanOracle(env=env.ogbench_env, noise=PLAY_NOISE, noise_smoothing=PLAY_NOISE_SMOOTHING)
                oracle.reset(None, env.ogbench_info)
            self.oracles.append(oracle)
            self.states.append(state)

    def act(self, obs: Mapping[str, np.ndarray], active: np.ndarray) -> np.ndarray:
        """``(B, 5)`` actions for the ``active: (B,) bool`` envs (zeros elsewhere)."""
        actions = np.zeros((len(active), ACTION_DIM), np.float32)
        for i in np.flatnonzero(active):
            env, oracle = self.envs[i], self.oracles[i]
            if oracle.done:  # the previous plan ended with the last step: a new target, a new plan
                info = env.set_new_target(self.p_stack[i])
                with _global_numpy_state(self.states[i]):
                    oracle.reset(None, info)
            actions[i] = np.clip(oracle.select_action(None, env.ogbench_info), -1, 1)
        return actions
