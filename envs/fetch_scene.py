"""MuJoCo scenes for the Fetch arm: gymnasium-robotics' Fetch robot and table, N free objects.

The robot, its mocap weld and its gripper actuators are gymnasium-robotics' own files
(``gymnasium_robotics/envs/assets/fetch/robot.xml`` and ``shared.xml``, the robot of FetchPush and
FetchPickAndPlace), included unchanged. The table is theirs too; its top centre is this library's
origin (``TABLE_ORIGIN`` in world coordinates), so rows read x = y = 0 at the table centre and
z = 0 on the table top, as for the pusher, and the cameras sit where the pusher's do relative to
the table (:func:`ecrl.envs.scene.project` holds for both).

Every object body carries one geom per shape, as in :mod:`ecrl.envs.scene`: a reset switches the
right one on and resizes it, so one model per number of objects serves every task.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from ecrl.envs.layout import SHAPES
from ecrl.envs.scene import _CAMERAS, visual_xml
from ecrl.envs.task import SIZE_RANGE

TIMESTEP = 0.002
SUBSTEPS = 20
"""Physics steps per control step: FetchPickAndPlace's 20 × 2 ms (25 Hz control)."""
MAX_DISPLACEMENT = 0.05
"""Metres the mocap target moves per step at action magnitude 1 (per axis), as in FetchPickAndPlace."""
TABLE_ORIGIN = np.array([1.3, 0.75, 0.4])
"""World position of the table top's centre: the origin of every row position."""
TABLE_HALF = (0.25, 0.35)
"""Half extents of gymnasium-robotics' Fetch table top (x, y), metres."""
OBJECT_MASS = 2.0
"""FetchPickAndPlace's block mass (kg)."""
FINGER_RANGE = 0.05
"""Travel of each gripper finger (m): 0 closed, 0.05 fully open."""
FINGER_INNER = 0.0009
"""Distance (m) from the gripper's centre plane to a closed finger's inner face."""
GRIPPER_SIZE = (0.0135, 0.065, 0.0385)
"""Nominal half extents (m) of the open gripper's fingers, world-aligned (x, y, z): the agent row's size."""
GRIP_TO_TIP = 0.0185
"""Height (m) of the ``robot0:grip`` site above the fingertips."""
# FetchPickAndPlace's _env_setup: arm joints and where the gripper is brought before every episode.
_INITIAL_QPOS = {"robot0:slide0": 0.405, "robot0:slide1": 0.48, "robot0:slide2": 0.0}
_GRIP_OFFSET = np.array([-0.498, 0.005, -0.431 + 0.2])
GRIPPER_QUAT = np.array([1.0, 0.0, 1.0, 0.0])
"""The mocap's fixed orientation offset (FetchPickAndPlace's ``rot_ctrl``)."""


def fetch_assets() -> Path:
    """Folder of gymnasium-robotics' Fetch MJCF files (found without importing the package)."""
    spec = importlib.util.find_spec("gymnasium_robotics")
    if spec is None or spec.origin is None:
        raise ValueError("the fetch embodiment needs gymnasium-robotics installed (pip install gymnasium-robotics)")
    return Path(spec.origin).parent / "envs" / "assets"


def _object_body(i: int) -> str:
    s = SIZE_RANGE[1]  # compiled at the largest size (conservative bounding volumes), resized at reset
    geoms = {"cube": f'type="box" size="{s} {s} {s}"', "cylinder": f'type="cylinder" size="{s} {s}"'}
    geoms["sphere"] = f'type="sphere" size="{s}"'
    # Round objects get rolling friction (condim 6): a pushed sphere or a toppled cylinder would
    # otherwise roll off the table at the speed it was given.
    contact = {"cube": 'condim="4" friction="1 0.005 0.0001"'}
    contact["cylinder"] = contact["sphere"] = 'condim="6" friction="1 0.005 0.005"'
    shape_geoms = "\n".join(
        f'      <geom name="obj{i}_{shape}" {geoms[shape]} contype="0" conaffinity="0" rgba="0 0 0 0" {contact[shape]}/>'
        for shape in SHAPES
    )
    x, y, z = TABLE_ORIGIN
    return f"""
    <body name="obj{i}" pos="{x} {y - 0.2 + 0.05 * i} {z + s}">
      <freejoint name="obj{i}"/>
      <inertial pos="0 0 0" mass="{OBJECT_MASS}" diaginertia="1e-3 1e-3 1e-3"/>
{shape_geoms}
    </body>
    <site name="goal{i}" type="sphere" size="{s}" pos="{x} {y} {z + s}" rgba="0 0 0 0"/>"""


def scene_xml(n_objects: int) -> str:
    """MJCF of the Fetch robot, its table and ``n_objects`` free objects (one geom per shape each)."""
    assets = fetch_assets()
    fetch = assets / "fetch"
    ox, oy, oz = TABLE_ORIGIN
    cameras = "\n".join(f'    <camera name="{n}" {_shift(pose)}/>' for n, pose in _CAMERAS.items())
    objects = "".join(_object_body(i) for i in range(n_objects))
    return f"""<mujoco model="ecrl_fetch_{n_objects}">
  <compiler angle="radian" coordinate="local" meshdir="{assets / "stls" / "fetch"}" texturedir="{assets / "textures"}"/>
  <option timestep="{TIMESTEP}">
    <flag warmstart="enable" multiccd="enable"/>
  </option>
{visual_xml(0.3, 0.4)}
  <include file="{fetch / "shared.xml"}"/>
  <worldbody>
    <geom name="floor0" pos="0.8 0.75 0" size="0.85 0.7 1" type="plane" condim="3" material="floor_mat"/>
    <include file="{fetch / "robot.xml"}"/>
    <body pos="{ox} {oy} {oz / 2}" name="table0">
      <geom name="table" size="{TABLE_HALF[0]} {TABLE_HALF[1]} {oz / 2}" type="box" mass="2000" material="table_mat"/>
    </body>
{cameras}{objects}
    <light directional="true" ambient="0.2 0.2 0.2" diffuse="0.8 0.8 0.8" specular="0.3 0.3 0.3" castshadow="false" pos="0 0 4" dir="0 0 -1" name="light0"/>
  </worldbody>
  <actuator>
    <position ctrllimited="true" ctrlrange="0 0.2" joint="robot0:l_gripper_finger_joint" kp="30000" name="robot0:l_gripper_finger_joint" user="1"/>
    <position ctrllimited="true" ctrlrange="0 0.2" joint="robot0:r_gripper_finger_joint" kp="30000" name="robot0:r_gripper_finger_joint" user="1"/>
  </actuator>
  <sensor>
    <touch name="l_touch" site="l_touch"/>
    <touch name="r_touch" site="r_touch"/>
  </sensor>
</mujoco>"""


def _shift(pose: str) -> str:
    """A pusher camera's MJCF attributes with its position moved from the table frame to the world."""
    words = pose.split('"')
    pos = np.array(words[1].split(), dtype=float) + TABLE_ORIGIN
    return f'pos="{" ".join(f"{v:.6g}" for v in pos)}"' + '"'.join(words[2:])


@dataclass(frozen=True)
class FetchScene:
    """A compiled Fetch scene and the robot state every episode starts from."""

    model: mujoco.MjModel
    qpos: np.ndarray
    """``(nq,)`` the settled robot (objects where they were compiled)."""
    qvel: np.ndarray
    mocap_pos: np.ndarray
    mocap_quat: np.ndarray


@functools.lru_cache(maxsize=16)
def _compiled(n_objects: int) -> FetchScene:
    spec = mujoco.MjSpec.from_string(scene_xml(n_objects))
    # Touch zones on the fingers' inner halves, for the agent row's contact column.
    for side, sign in (("l", 1.0), ("r", -1.0)):
        finger = spec.body(f"robot0:{side}_gripper_finger_link")
        finger.add_site(
            name=f"{side}_touch",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[0.04, 0.012, 0.016],
            pos=[0, sign * 0.008, 0],
            rgba=[0, 0, 0, 0],
        )
    model = spec.compile()
    # The mocap's drawn axes (1 m bars) are a debugging aid of gymnasium-robotics: keep them out of images.
    model.geom_rgba[model.geom_bodyid == model.body("robot0:mocap").id, 3] = 0.0
    data = mujoco.MjData(model)
    # FetchPickAndPlace's _env_setup: place the base, reset the weld, bring the gripper over the table.
    for name, value in _INITIAL_QPOS.items():
        data.qpos[model.jnt_qposadr[model.joint(name).id]] = value
    model.eq_data[:, :7] = [0, 0, 0, 0, 0, 0, 1]
    mujoco.mj_forward(model, data)
    data.mocap_pos[0] = _GRIP_OFFSET + data.site("robot0:grip").xpos
    data.mocap_quat[0] = GRIPPER_QUAT
    for _ in range(10):
        mujoco.mj_step(model, data, nstep=SUBSTEPS)
    return FetchScene(model, data.qpos.copy(), data.qvel.copy(), data.mocap_pos.copy(), data.mocap_quat.copy())


def build_scene(n_objects: int) -> FetchScene:
    """A private copy of the compiled scene for ``n_objects`` (compiled once per N)."""
    scene = _compiled(n_objects)
    return FetchScene(copy.copy(scene.model), scene.qpos, scene.qvel, scene.mocap_pos, scene.mocap_quat)
