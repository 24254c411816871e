"""MuJoCo scenes for the planar pusher: one compiled model per number of objects, reused across resets.

Every object body carries one geom per shape in :data:`~ecrl.envs.layout.SHAPES`; a reset switches
the right one on (contact bits, colour) and resizes it, so changing objects never recompiles.
Objects move on planar joints (slide x, slide y, hinge yaw) with damping standing in for table
friction: no object-table contacts, only object-object and pusher-object ones.
"""

from __future__ import annotations

import copy
import functools

import mujoco
import numpy as np

from ecrl.envs.layout import AGENT_RGB, SHAPES
from ecrl.envs.task import SIZE_RANGE

TIMESTEP = 0.005
SUBSTEPS = 10
"""Physics steps per control step (20 Hz control)."""
AGENT_RADIUS = 0.015
AGENT_HALF_HEIGHT = 0.04
CLEARANCE = 0.01
"""Minimum gap between any two bodies (and between a target and its object) at reset."""
OBJECT_MASS = 0.1
AGENT_REACH = 2 * (SIZE_RANGE[1] + AGENT_RADIUS) + CLEARANCE
"""How far beyond the objects' area the pusher can go, so that it gets behind an object at the edge."""

_CAMERAS = {
    "front": 'pos="0 -0.62 0.52" xyaxes="1 0 0 0 0.64 0.77"',
    "top": 'pos="0 0 1.0" xyaxes="1 0 0 0 1 0"',
    # The top camera narrowed from 45° to 40° field of view: the objects' area of the default 0.6 m
    # table (objects stay within it) fills the image, so objects cover 1.3× the pixels; the pusher
    # leaves the view when it goes beyond the table's edge.
    "top_close": 'pos="0 0 1.0" xyaxes="1 0 0 0 1 0" fovy="40"',
}
CAMERAS: tuple[str, ...] = tuple(_CAMERAS)
"""Named cameras every scene has."""
MAIN_CAMERAS: tuple[str, ...] = ("front", "top")
"""The cameras of videos and of pixel observations by default."""


def _object_body(i: int, half: float) -> str:
    # Compiled at the largest size so that the compile-time bounding boxes used by the collision
    # mid-phase stay conservative; resets resize and move it (see PushEnv._apply_spec).
    s = SIZE_RANGE[1]
    geoms = {"cube": f'type="box" size="{s} {s} {s}"', "cylinder": f'type="cylinder" size="{s} {s}"'}
    geoms["sphere"] = f'type="sphere" size="{s}"'
    shape_geoms = "\n".join(
        f'      <geom name="obj{i}_{shape}" {geoms[shape]} contype="0" conaffinity="0" rgba="0 0 0 0"/>'
        for shape in SHAPES
    )
    joint = f'damping="4" limited="true" range="{-half} {half}"'
    return f"""
    <body name="obj{i}" pos="0 0 {s}">
      <inertial pos="0 0 0" mass="{OBJECT_MASS}" diaginertia="4e-5 4e-5 4e-5"/>
      <joint name="obj{i}_x" type="slide" axis="1 0 0" {joint}/>
      <joint name="obj{i}_y" type="slide" axis="0 1 0" {joint}/>
      <joint name="obj{i}_yaw" type="hinge" axis="0 0 1" damping="0.004"/>
{shape_geoms}
    </body>
    <site name="goal{i}" type="cylinder" size="{s} 0.0005" pos="0 0 0.0005" rgba="0 0 0 0"/>"""


def visual_xml(ambient: float, diffuse: float) -> str:
    """The scenes' ``<visual>``: no shadows or multisampling, a grey headlight, offscreen images up to 256 pixels."""
    return f"""  <visual>
    <quality shadowsize="0" offsamples="0"/>
    <headlight ambient="{ambient} {ambient} {ambient}" diffuse="{diffuse} {diffuse} {diffuse}" specular="0 0 0"/>
    <global offwidth="256" offheight="256"/>
  </visual>"""


def scene_xml(n_objects: int, table_size: float) -> str:
    """MJCF of a pusher and ``n_objects`` objects on a square table of side ``table_size`` metres."""
    half = table_size / 2
    r = AGENT_RADIUS
    cameras = "\n".join(f'    <camera name="{n}" {pose}/>' for n, pose in _CAMERAS.items())
    objects = "".join(_object_body(i, half) for i in range(n_objects))
    ah = half + AGENT_REACH
    hh = AGENT_HALF_HEIGHT
    return f"""<mujoco model="ecrl_push_{n_objects}">
  <compiler angle="radian"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" gravity="0 0 0">
    <flag energy="disable"/>
  </option>
{visual_xml(0.25, 0.35)}
  <default><geom friction="0.4 0.005 0.0001" condim="3"/></default>
  <worldbody>
    <light name="sun" pos="0 0 2" dir="0 0 -1" directional="true" castshadow="false" diffuse="0.55 0.55 0.55" specular="0 0 0"/>
    <geom name="floor" type="plane" size="1 1 0.01" pos="0 0 -0.05" rgba="0.25 0.27 0.3 1" contype="0" conaffinity="0"/>
    <geom name="rim" type="box" size="{ah + r} {ah + r} 0.024" pos="0 0 -0.026" rgba="0.55 0.5 0.45 1" contype="0" conaffinity="0"/>
    <geom name="table" type="box" size="{half} {half} 0.025" pos="0 0 -0.025" rgba="0.78 0.72 0.62 1" contype="0" conaffinity="0"/>
{cameras}
    <body name="agent" pos="0 0 {hh}">
      <inertial pos="0 0 0" mass="1" diaginertia="1e-3 1e-3 1e-3"/>
      <joint name="agent_x" type="slide" axis="1 0 0" limited="true" range="{-ah} {ah}"/>
      <joint name="agent_y" type="slide" axis="0 1 0" limited="true" range="{-ah} {ah}"/>
      <geom name="agent" type="cylinder" size="{r} {hh}" rgba="{" ".join(map(str, AGENT_RGB))} 1"/>
    </body>{objects}
  </worldbody>
  <actuator>
    <position name="agent_x" joint="agent_x" kp="1500" kv="60" ctrllimited="true" ctrlrange="{-ah} {ah}"/>
    <position name="agent_y" joint="agent_y" kp="1500" kv="60" ctrllimited="true" ctrlrange="{-ah} {ah}"/>
  </actuator>
</mujoco>"""


@functools.lru_cache(maxsize=64)
def _compiled(n_objects: int, table_size: float) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(scene_xml(n_objects, table_size))


def build_model(n_objects: int, table_size: float) -> mujoco.MjModel:
    """A private copy of the compiled scene (compiled once per ``(n_objects, table_size)``)."""
    return copy.copy(_compiled(n_objects, float(table_size)))


def footprint(shape: str, size: float) -> float:
    """Radius of the disc an object covers on the table at any yaw (a cube's corners reach size * sqrt(2))."""
    return float(size) * (np.sqrt(2) if shape == "cube" else 1.0)


def grid_cells(table_size: float, cell: float) -> np.ndarray:
    """``(C, 2)`` centres of a square grid of ``cell``-sized cells covering the table."""
    per_side = int(table_size // cell)
    offsets = (np.arange(per_side) - (per_side - 1) / 2) * cell
    gx, gy = np.meshgrid(offsets, offsets, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], axis=1)


def scatter(rng: np.random.Generator, radii: np.ndarray, table_size: float) -> np.ndarray:
    """``(K, 2)`` non-overlapping positions for discs of ``radii: (K,)`` (at least ``CLEARANCE`` apart).

    Each disc gets its own grid cell (sized for the largest disc) and a uniform jitter inside it,
    so no rejection loop is needed. Raises ``ValueError`` when the discs cannot fit the table.
    """
    cell = 2 * float(radii.max()) + CLEARANCE
    cells = grid_cells(table_size, cell)
    if len(radii) > len(cells):
        raise ValueError(
            f"{len(radii)} bodies of radius up to {radii.max():.3f} m do not fit a {table_size} m table "
            f"(room for {len(cells)}): use fewer or smaller objects, or a larger table_size"
        )
    chosen = cells[rng.choice(len(cells), size=len(radii), replace=False)]
    slack = (cell - CLEARANCE) / 2 - radii
    return chosen + rng.uniform(-1, 1, size=(len(radii), 2)) * slack[:, None]


def scatter_regions(
    rng: np.random.Generator,
    radii: np.ndarray,
    table_size: float | tuple[float, float],
    tries: int = 500,
    restarts: int = 20,
    *,
    stable: bool = False,
) -> np.ndarray:
    """``(K, 2)`` centres of non-overlapping discs of unequal ``radii: (K,)``, largest placed first.

    Rejection sampling: :func:`scatter`'s equal cells waste room when one disc is much larger.
    Greedy placement can jam a table that has room, so a jammed attempt starts over (``restarts``
    times). Raises ``ValueError`` when every attempt has a disc that finds no room in ``tries`` draws.

    Args:
        table_size: the side of a square table, or the (x, y) sides of a rectangle, centred on the origin.
        stable: place discs of equal radius in index order (numpy's default sort, which the push
            env's scenes were recorded with, orders them by platform).
    """
    half = np.asarray(table_size, dtype=float) / 2
    where = f"{table_size} m table" if half.ndim == 0 else f"{table_size[0]} x {table_size[1]} m area"
    if (radii.max() > half).any():
        raise ValueError(f"a region of radius {radii.max():.3f} m does not fit a {where}")
    order = np.argsort(-radii, kind="stable" if stable else None)
    sorted_radii = radii[order]
    for _ in range(restarts):
        centres = np.zeros((len(radii), 2))  # in placing order, the k-th placed disc in row k
        for k, r in enumerate(sorted_radii):
            candidates = rng.uniform(-(half - r), half - r, size=(tries, 2))
            first = _first_free(candidates, centres[:k], sorted_radii[:k], r)
            if first is None:
                break
            centres[k] = candidates[first]
        else:
            placed = np.empty_like(centres)
            placed[order] = centres
            return placed
    raise ValueError(f"{len(radii)} regions of radii up to {radii.max():.3f} m do not fit a {where}")


def _first_free(candidates: np.ndarray, centres: np.ndarray, radii: np.ndarray, radius: float) -> int | None:
    """Index of the first of ``candidates (T, 2)`` whose disc of ``radius`` keeps ``CLEARANCE`` from every disc
    ``centres (P, 2)``, ``radii (P,)``, or ``None``. The first few are tried alone, since one of them usually is
    free; the arithmetic is ``np.linalg.norm``'s (square, add, square root), so the scenes are those it gave."""
    for rows in (slice(0, 8), slice(8, None)):
        d = candidates[rows, None] - centres[None]
        ok = (np.sqrt(np.add.reduce(d * d, axis=-1)) - radii - radius >= CLEARANCE).all(axis=1)
        if ok.any():
            return rows.start + int(ok.argmax())
    return None


def cluster(centre: np.ndarray, n: int, spacing: float) -> np.ndarray:
    """``(n, 2)`` points of a compact square grid (row by row) with ``spacing``, centred on ``centre``."""
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    idx = np.arange(n)
    grid = np.stack([idx % cols - (cols - 1) / 2, idx // cols - (rows - 1) / 2], axis=1)
    return centre + grid * spacing


def cluster_extent(n: int, spacing: float) -> float:
    """Half width of :func:`cluster`'s grid for ``n`` points, from centre to the outermost point."""
    return (int(np.ceil(np.sqrt(n))) - 1) / 2 * spacing


@functools.lru_cache(maxsize=len(CAMERAS))
def _camera_pose(camera: str) -> tuple[np.ndarray, np.ndarray, float]:
    """World position ``(3,)``, orientation ``(3, 3)`` (columns: the camera's x right, y up, z back) and
    vertical field of view (degrees) of a named camera; cameras are fixed, so any scene has the same."""
    if camera not in _CAMERAS:
        raise ValueError(f"unknown camera {camera!r}; the scenes have {CAMERAS}")
    model = _compiled(1, 0.6)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    return data.cam_xpos[i].copy(), data.cam_xmat[i].reshape(3, 3).copy(), float(model.cam_fovy[i])


def project(points: np.ndarray, camera: str) -> np.ndarray:
    """Image-plane coordinates ``(..., 2)`` of world ``points (..., 3)`` (metres) seen by ``camera``.

    ``x`` to the right and ``y`` down, both in ``[-1, 1]`` across a square image (pixel ``j`` of ``P``
    has its centre at ``(2 j + 1) / P - 1``), the convention of the encoders' keypoints. Points
    outside the view fall outside ``[-1, 1]``; points behind the camera come out as NaN.
    """
    points = np.asarray(points, dtype=np.float64)
    if points.shape[-1:] != (3,):
        raise ValueError(f"points: expected shape (..., 3), got {points.shape}")
    position, axes, fovy = _camera_pose(camera)
    local = (points - position) @ axes  # camera frame: x right, y up, z back (MuJoCo's convention)
    ahead = -local[..., 2]
    ahead = np.where(ahead > 1e-9, ahead, np.nan)
    focal = 1.0 / np.tan(np.radians(fovy) / 2)
    return np.stack([focal * local[..., 0] / ahead, -focal * local[..., 1] / ahead], -1)


def unproject(image_xy: np.ndarray, camera: str, height: float | np.ndarray = 0.0) -> np.ndarray:
    """World points ``(..., 3)`` where the rays of ``camera`` through ``image_xy (..., 2)`` meet the
    horizontal plane ``z = height`` (metres; the table top is ``z = 0``): :func:`project`'s inverse for
    points at a known height, e.g. an object's centre at its half height.

    ``image_xy`` uses :func:`project`'s convention (``x`` right, ``y`` down, ``[-1, 1]`` across the image).
    A ray that never meets the plane in front of the camera (parallel to it, or meeting it behind)
    gives NaN.
    """
    image_xy = np.asarray(image_xy, dtype=np.float64)
    if image_xy.shape[-1:] != (2,):
        raise ValueError(f"image_xy: expected shape (..., 2), got {image_xy.shape}")
    position, axes, fovy = _camera_pose(camera)
    focal = 1.0 / np.tan(np.radians(fovy) / 2)
    local = np.stack([image_xy[..., 0] / focal, -image_xy[..., 1] / focal, -np.ones(image_xy.shape[:-1])], -1)
    ray = local @ axes.T  # the ray's direction in the world, one unit ahead of the camera
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (np.asarray(height, dtype=np.float64) - position[2]) / ray[..., 2]
    t = np.where(np.isfinite(t) & (t > 0), t, np.nan)
    return position + t[..., None] * ray
