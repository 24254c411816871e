"""Start positions and 3-D targets for the Fetch skills (push, pick_place, stack) and every goal kind.

Positions are in the table frame (x = y = 0 at the table centre, z = 0 on its top). Objects and
targets are drawn together so that no target covers another object's start: a skill can then be
done one object at a time, with no object to clear away first.

- ``push``: targets on the table.
- ``pick_place``: as FetchPickAndPlace samples its goal, with probability 1/2 a target is lifted
  by U(0, 0.45) m into the air (one target at most, for ``positions`` goals: the gripper holds one
  object); every other target is on the table.
- ``stack``: the targets form one tower on a free spot; level k (from the bottom, in a random order)
  rests on level k - 1, and the goal row's rank is (k + 1) / N.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ecrl.envs.scene import CLEARANCE, cluster, cluster_extent, scatter_regions
from ecrl.envs.task import TaskSpec

AIR_PROBABILITY = 0.5
"""FetchPickAndPlace: chance that a target is in the air."""
AIR_HEIGHT = 0.45
"""FetchPickAndPlace: an in-air target is lifted by U(0, AIR_HEIGHT) metres."""
ROOM = (0.03, 0.015, 0.0)
"""Extra gaps (m) between discs at reset, tried in turn: the widest that fits."""
FINGER_ROOM = 0.03
"""Extra gap (m) between rows of a cluster along y, where the gripper's fingers go down beside an object."""


def sample_scene(
    rng: np.random.Generator, spec: TaskSpec, sizes: np.ndarray, footprints: np.ndarray, area: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starts ``(N, 2)``, targets ``(N, 3)`` and ranks ``(N,)`` for one episode of ``spec``.

    Args:
        sizes: ``(N,)`` object sizes (half height, metres): an object rests at z = size.
        footprints: ``(N,)`` radii of the discs the objects cover on the table at any yaw.
        area: sides (x, y) of the rectangle, centred on the table, that starts and targets lie in.
    """
    n = spec.n_objects
    ranks = np.zeros(n)
    if spec.skill == "stack":
        centres = place_discs(rng, np.concatenate([[footprints.max()], footprints]), area)
        base, starts = centres[0], centres[1:]
        level = rng.permutation(n)  # level[i]: object i's level in the tower
        below = np.zeros(n)
        order = np.argsort(level)
        below[order] = np.concatenate([[0.0], np.cumsum(2 * sizes[order])[:-1]])
        targets = np.concatenate([np.broadcast_to(base, (n, 2)), (below + sizes)[:, None]], axis=1)
        return starts, targets, (level + 1) / n
    if spec.goal in ("positions", "ordered"):
        discs = place_discs(rng, np.concatenate([footprints, footprints]), area)
        starts, xy = discs[:n], discs[n:]
        if spec.goal == "ordered":
            ranks = (rng.permutation(n) + 1) / n
    else:
        spacing = np.array([2 * sizes.max() + CLEARANCE / 2, 2 * sizes.max() + CLEARANCE / 2 + FINGER_ROOM])
        groups = [np.arange(n)] if spec.goal == "adjacent" else _colour_groups(spec)
        radii = np.array([_cluster_radius(len(g), spacing) + footprints.max() for g in groups])
        centres = place_discs(rng, np.concatenate([radii, footprints]), area)
        starts = centres[len(groups) :]
        xy = np.zeros((n, 2))
        for centre, members in zip(centres[: len(groups)], groups, strict=True):
            xy[members] = centre + cluster(np.zeros(2), len(members), 1.0)[rng.permutation(len(members))] * spacing
    z = sizes.copy()
    if spec.skill == "pick_place" and spec.goal == "positions" and rng.uniform() < AIR_PROBABILITY:
        z[rng.integers(n)] += rng.uniform(0, AIR_HEIGHT)
    return starts, np.concatenate([xy, z[:, None]], axis=1), ranks


def place_discs(
    rng: np.random.Generator, radii: np.ndarray, area: tuple[float, float], tries: int = 200, restarts: int = 10
) -> np.ndarray:
    """``(K, 2)`` centres of non-overlapping discs of ``radii: (K,)`` inside the ``area`` rectangle.

    :func:`~ecrl.envs.scene.scatter_regions` with :data:`ROOM` extra metres between discs where they
    fit (a gripper's fingers go down beside an object), less where they do not. Raises
    ``ValueError`` when the discs do not fit even without the extra room.
    """
    for room in ROOM:
        with contextlib.suppress(ValueError):
            return scatter_regions(rng, radii + room / 2, area, tries, restarts, stable=True)
    raise ValueError(
        f"{len(radii)} discs of radius up to {radii.max():.3f} m do not fit a {area[0]} x {area[1]} m area: "
        "use fewer or smaller objects, or a larger area"
    )


def _colour_groups(spec: TaskSpec) -> list[np.ndarray]:
    colours = [o.colour for o in spec.objects]
    return [np.flatnonzero(np.array(colours) == c) for c in sorted(set(colours))]


def _cluster_radius(n: int, spacing: np.ndarray) -> float:
    """Radius of the disc around :func:`cluster`'s grid of ``n`` points with per-axis ``spacing``."""
    return float(np.hypot(*(cluster_extent(n, 1.0) * spacing)))
