"""OGBench's own cube datasets as entity rows: :func:`load_ogbench_episodes` reads a dataset file
(``cube-*-play-v0.npz``) into episodes in the layout of :class:`~ecrl.envs.ogbench.OGBenchCubeEnv`, with
hindsight goals (:func:`hindsight_goals`); ``ecrl-collect --from-ogbench`` writes them as a dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ecrl.envs import goals
from ecrl.envs.layout import (
    AGENT_GRIPPER,
    AGENT_RGB,
    ENTITY_DIM,
    ENTITY_FIELDS,
    GOAL_DIM,
    GOAL_FIELDS,
    SUCCESS_DISTANCE,
    shape_one_hot,
)
from ecrl.envs.ogbench import (
    ACTION_DIM,
    CUBE_DIM,
    CUBE_ENV_TYPES,
    GRIPPER_SCALE,
    GRIPPER_SIZE,
    ROBOT_DIM,
    XYZ_SCALE,
    OGBenchCubeTask,
    check_n_cubes,
)

__all__ = ["CUBE_RGB", "hindsight_goals", "load_ogbench_episodes", "rows_from_ogbench_observations"]

_E, _G = ENTITY_FIELDS, GOAL_FIELDS
_POS, _VEL, _SIN, _COS = _E["position"], _E["velocity"], _E["yaw"].start, _E["yaw"].start + 1
_OPENING, _CONTACT = AGENT_GRIPPER.start, AGENT_GRIPPER.start + 1

CUBE_RGB = np.array(
    [
        [0.96, 0.26, 0.33],  # red
        [0.35, 0.55, 0.91],  # blue
        [1.0, 0.69, 0.21],  # orange
        [0.06, 0.74, 0.21],  # green
        [0.61, 0.28, 0.82],  # purple
        [0.76, 0.96, 0.04],  # yellow
        [0.82, 0.28, 0.61],  # magenta
        [0.5, 0.5, 0.5],  # gray
    ]
)
"""OGBench's cube colours by cube index (``CubeEnv._cube_colors``), for files that do not record them."""


def rows_from_ogbench_observations(observations: np.ndarray, n_cubes: int, dt: float = 0.05) -> np.ndarray:
    """Entity rows ``(T, 1 + n, ENTITY_DIM)`` of one episode's OGBench state observations ``(T, 19 + 9 n)``.

    OGBench's vector holds, after 19 robot dims (joints, effector position × 10 about the centre,
    yaw cos/sin, opening × 3, contact), per cube its position × 10, quaternion and yaw cos/sin.
    Velocities are finite differences over ``dt`` (the effector's, as the live env; cubes' are
    replaced by ``qvel`` in :func:`load_ogbench_episodes` when the file has it).
    """
    n = check_n_cubes(n_cubes)
    t = len(observations)
    if observations.ndim != 2 or observations.shape[1] != ROBOT_DIM + CUBE_DIM * n:
        raise ValueError(
            f"OGBench cube-{CUBE_ENV_TYPES[n]} observations are (T, {ROBOT_DIM + CUBE_DIM * n}), got {observations.shape}"
        )
    ob = observations.astype(np.float64)
    cubes = ob[:, ROBOT_DIM:].reshape(t, n, CUBE_DIM)
    rows = np.zeros((t, 1 + n, ENTITY_DIM))
    rows[:, :, _E["present"]] = 1.0
    rows[:, 0, _E["is_agent"]] = 1.0
    rows[:, 0, _POS] = ob[:, 12:15] / XYZ_SCALE
    rows[:, 0, _COS], rows[:, 0, _SIN] = ob[:, 15], ob[:, 16]
    rows[:, 0, _OPENING], rows[:, 0, _CONTACT] = ob[:, 17] / GRIPPER_SCALE, ob[:, 18]
    rows[:, 0, _E["size"]] = GRIPPER_SIZE
    rows[:, 0, _E["colour"]] = AGENT_RGB
    rows[:, 1:, _E["is_object"]] = 1.0
    rows[:, 1:, _POS] = cubes[..., :3] / XYZ_SCALE
    rows[:, 1:, _COS], rows[:, 1:, _SIN] = cubes[..., 7], cubes[..., 8]
    rows[:, 1:, _E["size"]] = 0.02  # OGBench's cube half side
    rows[:, 1:, _E["shape"]] = shape_one_hot("cube")
    rows[:, 1:, _E["colour"]] = CUBE_RGB[:n]
    rows[1:, :, _VEL] = np.diff(rows[:, :, _POS], axis=0) / dt
    return rows


def hindsight_goals(achieved_goal: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Play data has no goal of its own: its last state is the goal of the whole episode.

    Args:
        achieved_goal: ``(T + 1, n, GOAL_DIM)`` goal rows of the episode's states.

    Returns:
        ``desired_goal (n, GOAL_DIM)`` (the last achieved rows), and per step the sparse ``reward (T,)``
        and ``is_success (T,)`` (every cube within 4 cm of it) after that step.
    """
    desired = achieved_goal[-1].copy()
    reward = np.asarray(
        goals.compute_reward(
            achieved_goal[1:],
            np.broadcast_to(desired, achieved_goal[1:].shape),
            None,
            threshold=SUCCESS_DISTANCE,
            reward_type="sparse",
            by_colour=False,
        ),
        np.float32,
    ).reshape(-1)
    return desired, reward, reward == 0.0


def load_ogbench_episodes(path: str | Path, n_cubes: int | None = None) -> list[dict[str, Any]]:
    """The episodes of an OGBench cube dataset file, as unpadded entity arrays.

    The file holds OGBench's documented keys: ``observations (S, 19 + 9 n)`` float state vectors,
    ``actions (S, 5)``, ``terminals (S,)`` (1 on an episode's last row), optionally ``qpos (S, nq)``
    and ``qvel (S, nv)``. An episode of ``L`` rows has ``L`` states and ``L - 1`` steps (its last
    action has no next state). Goals are hindsight goals (:func:`hindsight_goals`).

    Args:
        path: an ``.npz`` file such as ``cube-double-play-v0.npz``.
        n_cubes: the number of cubes (default: from the observation width).

    Returns:
        One dict per episode: ``observation (L, 1 + n, ENTITY_DIM)``, ``achieved_goal (L, n, GOAL_DIM)``,
        ``desired_goal (n, GOAL_DIM)``, ``action (L - 1, 5)``, ``reward``, ``is_success`` ``(L - 1,)``,
        ``task`` (an :class:`OGBenchCubeTask`), all float32 / bool.

    Raises:
        ValueError: a file without those keys, of another shape, or whose last row is not terminal.
    """
    path = Path(path)
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a readable OGBench .npz dataset: {e}") from e
    with data:
        missing = {"observations", "actions", "terminals"} - set(data.files)
        if missing:
            raise ValueError(f"{path} lacks OGBench's keys {sorted(missing)} (has {sorted(data.files)})")
        ob, actions, terminals = data["observations"], data["actions"], data["terminals"].astype(bool)
        qvel = data["qvel"] if "qvel" in data.files else None
    if n_cubes is None:
        width = ob.shape[1] - ROBOT_DIM if ob.ndim == 2 else -1
        if width <= 0 or width % CUBE_DIM or width // CUBE_DIM not in CUBE_ENV_TYPES:
            raise ValueError(f"{path}: observations {ob.shape} are not an OGBench cube env's state vectors")
        n_cubes = width // CUBE_DIM
    n = check_n_cubes(n_cubes)
    if actions.shape != (len(ob), ACTION_DIM) or terminals.shape != (len(ob),):
        raise ValueError(f"{path}: actions {actions.shape} and terminals {terminals.shape} must have {len(ob)} rows")
    if len(ob) and not terminals[-1]:
        raise ValueError(f"{path}: the last row is not terminal (a truncated file?)")
    ends = np.flatnonzero(terminals) + 1
    episodes = []
    task = OGBenchCubeTask(n, "play")
    for start, stop in zip(np.concatenate([[0], ends[:-1]]), ends, strict=True):
        rows = rows_from_ogbench_observations(ob[start:stop], n)
        if qvel is not None:  # the cubes' free joints follow 14 robot dofs: 6 linear+angular per cube
            rows[:, 1:, _VEL] = qvel[start:stop, 14:].reshape(stop - start, n, 6)[..., :3]
        achieved = np.zeros((stop - start, n, GOAL_DIM))
        achieved[..., _G["present"]] = 1.0
        achieved[..., _G["position"]] = rows[:, 1:, _POS]
        achieved[..., _G["size"]] = rows[:, 1:, _E["size"]]
        achieved[..., _G["shape"]] = rows[:, 1:, _E["shape"]]
        achieved[..., _G["colour"]] = rows[:, 1:, _E["colour"]]
        desired, reward, success = hindsight_goals(achieved)
        episodes.append(
            {
                "observation": rows.astype(np.float32),
                "achieved_goal": achieved.astype(np.float32),
                "desired_goal": desired.astype(np.float32),
                "action": actions[start : stop - 1].astype(np.float32),
                "reward": reward,
                "is_success": success,
                "task": task,
            }
        )
    return episodes
