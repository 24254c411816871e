"""The entity row layouts every ``ecrl`` environment writes and every model reads.

An observation is a set of rows, one per entity, padded with all-zero rows to a fixed ``n_max``.
A row never says *which slot* it is: only what the entity is (type, shape, size, colour) and
where it is. Models therefore cannot tie parameters to an object index, and a model trained on
3 objects reads a scene with 12.

Entity row (``ENTITY_DIM`` features), used by ``obs["observation"]`` (agent row + object rows):

=========  =====  ===============================================================
field      width  meaning
=========  =====  ===============================================================
present    1      1 for a real entity, 0 for a padded row (a padded row is all 0)
is_agent   1      1 for the end effector
is_object  1      1 for a manipulable object
position   3      x, y, z in metres, table centre at x = y = 0, table top at z = 0
yaw        2      sin(yaw), cos(yaw)
velocity   3      linear velocity in m/s
size       3      half extents in metres (x, y, z)
shape      S      one-hot over :data:`SHAPES`
colour     3      RGB in [0, 1] (:data:`PALETTE`)
=========  =====  ===============================================================

Goal row (``GOAL_DIM`` features), shared by ``achieved_goal`` and ``desired_goal`` so that HER's
relabelling (a future achieved goal becomes the desired goal) is a plain copy:

=========  =====  ===============================================================
present    1      as above
position   3      the object's position (achieved) or its target (desired)
size       3      the attributes of the object the row refers to, so that a model
shape      S      matches objects to goals by attributes, never by slot
colour     3
rank       1      ``ordered`` goals: (k + 1) / N for the k-th target to fill; ``stack``: the
                  target's tower level, (k + 1) / N from the bottom; else 0
=========  =====  ===============================================================

The agent row has no shape, so its ``shape`` columns carry the state of a gripper instead
(:data:`AGENT_GRIPPER`): column 0 its opening in [0, 1] (0 closed), column 1 its contact in [0, 1];
both are 0 for the planar pusher, which has no gripper. Object rows never use these columns so.

Fetch arm (:mod:`ecrl.envs.fetch`): positions are world positions minus the table top's centre
(:data:`~ecrl.envs.fetch_scene.TABLE_ORIGIN`), as for the pusher.

==================  ==============================================================================
row field           Fetch source
==================  ==============================================================================
gripper position    the ``robot0:grip`` site (between the fingers, 1.85 cm above their tips)
gripper yaw         constant (0, 1): FetchPickAndPlace's control keeps the gripper's orientation
gripper velocity    the grip site's linear velocity (``mj_objectVelocity``, world frame)
gripper size        a nominal constant box (0.0135, 0.065, 0.0385) m, the open fingers
gripper shape cols  opening: the two fingers' mean travel / 5 cm in [0, 1]; contact: the touch force
                    on the fingers' inner faces / 100 N, clipped to [0, 1]
object position     the free joint's position (the object's centre)
object yaw          sin, cos of the free joint quaternion's rotation about z
object velocity     the free joint's linear velocity (``qvel``)
goal position       3-D: on the table, in the air (``pick_place``) or on a tower level (``stack``)
==================  ==============================================================================

OGBench cubes (:mod:`ecrl.envs.ogbench`): positions are OGBench's world positions minus its
workspace centre (0.425, 0, 0), so the table top is z = 0 and a cube resting on it has z = 0.02.

==================  ==============================================================================
row field           OGBench source
==================  ==============================================================================
gripper position    the pinch site (``proprio/effector_pos``)
gripper yaw         sin, cos of ``proprio/effector_yaw``
gripper velocity    the pinch site's displacement over the last step / 0.05 s (0 after a reset)
gripper size        a nominal constant box (0.045, 0.015, 0.035) m
gripper shape cols  ``proprio/gripper_opening`` (qpos of the driver joint / 0.8, clipped to
                    [0, 1]) and ``proprio/gripper_contact`` (right pad's contact force / 50,
                    clipped), the same quantities as OGBench's state vector
cube position       ``privileged/block_i_pos`` (the cube's free-joint position)
cube yaw            sin, cos of ``privileged/block_i_yaw``
cube velocity       the free joint's linear velocity (``qvel``)
cube size/shape     half side 0.02 m (the model's), ``cube``
cube colour         OGBench's colour of cube ``i`` (red, blue, orange, green, purple, yellow,
                    magenta, gray)
goal position       task mode: the cube's goal (its target mocap body); play mode: the target
                    cube's target, every other cube's own position (it has no goal)
==================  ==============================================================================
"""

from __future__ import annotations

import numpy as np

SHAPES: tuple[str, ...] = ("cube", "cylinder", "sphere")
"""Object shapes, in one-hot order."""

PALETTE: dict[str, tuple[float, float, float]] = {
    "red": (0.90, 0.15, 0.15),
    "green": (0.15, 0.75, 0.20),
    "blue": (0.15, 0.35, 0.95),
    "yellow": (0.95, 0.85, 0.10),
    "cyan": (0.10, 0.85, 0.90),
    "magenta": (0.90, 0.20, 0.80),
    "orange": (1.00, 0.55, 0.05),
    "purple": (0.50, 0.20, 0.75),
    "white": (0.95, 0.95, 0.95),
    "brown": (0.55, 0.35, 0.15),
}
"""Named object colours (RGB in [0, 1])."""

AGENT_RGB = (0.35, 0.35, 0.35)
N_SHAPES = len(SHAPES)


def _slices(widths: dict[str, int]) -> tuple[dict[str, slice], int]:
    out, start = {}, 0
    for name, width in widths.items():
        out[name] = slice(start, start + width)
        start += width
    return out, start


ENTITY_FIELDS, ENTITY_DIM = _slices(
    {
        "present": 1,
        "is_agent": 1,
        "is_object": 1,
        "position": 3,
        "yaw": 2,
        "velocity": 3,
        "size": 3,
        "shape": N_SHAPES,
        "colour": 3,
    }
)
AGENT_GRIPPER = slice(ENTITY_FIELDS["shape"].start, ENTITY_FIELDS["shape"].start + 2)
"""Columns of the agent row holding its gripper's opening and contact (the agent has no shape)."""
GOAL_FIELDS, GOAL_DIM = _slices({"present": 1, "position": 3, "size": 3, "shape": N_SHAPES, "colour": 3, "rank": 1})

# Goal columns that identify *what* an object is (not where): rows agreeing on these are the
# same kind of object, hence interchangeable for set-matching goals.
GOAL_ATTRIBUTES = slice(GOAL_FIELDS["size"].start, GOAL_FIELDS["colour"].stop)
GOAL_COLOUR = GOAL_FIELDS["colour"]
GOAL_POSITION = GOAL_FIELDS["position"]
GOAL_PRESENT = GOAL_FIELDS["present"].start

# Columns that code outside the env reads on its hot paths: masks from "present", planar geometry
# from the x, y of "position" (every skill so far acts and succeeds in the table plane).
ENTITY_PRESENT = ENTITY_FIELDS["present"].start
"""Column of an entity row's ``present`` flag (``rows[..., ENTITY_PRESENT] > 0.5`` is the mask)."""
ENTITY_XY = slice(ENTITY_FIELDS["position"].start, ENTITY_FIELDS["position"].start + 2)
"""Columns of an entity row's planar position x, y."""
ENTITY_VELOCITY_XY = slice(ENTITY_FIELDS["velocity"].start, ENTITY_FIELDS["velocity"].start + 2)
"""Columns of an entity row's planar velocity."""
GOAL_XY = slice(GOAL_POSITION.start, GOAL_POSITION.start + 2)
"""Columns of a goal row's planar position x, y."""

SUCCESS_DISTANCE = 0.04
"""Metres within which an object counts as placed: the default ``distance_threshold`` of every env."""


def shape_one_hot(shape: str) -> np.ndarray:
    """``(S,)`` one-hot of ``shape`` over :data:`SHAPES`."""
    out = np.zeros(N_SHAPES)
    out[SHAPES.index(shape)] = 1.0
    return out
