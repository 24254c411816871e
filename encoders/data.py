"""Camera frames of a pixel dataset (``ecrl-collect --pixels``) as encoder training and evaluation data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ecrl.datasets import DatasetError, DemoDataset
from ecrl.encoders.base import frames_to_images
from ecrl.encoders.particle_config import OBJECT_MIN_PIXELS
from ecrl.envs.layout import ENTITY_FIELDS
from ecrl.envs.scene import project

__all__ = ["Frames"]


class Frames:
    """The frames of some episodes of a pixel dataset, with their segmentation and object positions.

    Args:
        data: a :class:`~ecrl.datasets.DemoDataset` (or its path) recorded with ``--pixels``.
        episodes: which of its episodes (default: all).

    Attributes:
        images: ``(M, V, P, P, 3)`` uint8 frames (a view into the dataset's arrays, no copy when
            ``episodes`` is None).
        segmentation: ``(M, V, P, P)`` uint8 labels (0 background, 1 agent, ``i + 2`` object ``i``).
        positions: ``(M, n_max, 2)`` table ``(x, y)`` of each object, metres.
        n_objects: ``(M,)`` objects in each frame.
        agent_points: ``(M, V, 2)`` float32 image-plane ``(x, y)`` in ``[-1, 1]`` (x right, y down) of the
            agent (the pusher's centre) in each view, projected from its recorded position with the
            camera's calibration: what a robot knows of its own end effector, without looking. Outside
            ``[-1, 1]`` where it has left the view.
        object_points: ``(M, V, n_max, 2)`` float32 image-plane ``(x, y)`` of each object's centre, projected
            the same way from its recorded position (NaN where the frame has fewer objects): simulator
            labels, used only by a particle encoder's ``object_weight``.
        cameras: the camera of each view.
    """

    def __init__(self, data: DemoDataset | str | Path, episodes: np.ndarray | None = None) -> None:
        data = data if isinstance(data, DemoDataset) else DemoDataset(data)
        if data.pixels is None:
            raise DatasetError(f"{data.path} holds no frames: collect it with `ecrl-collect --pixels 64`")
        self.path, self.cameras, self.size = data.path, data.cameras, int(data.pixel_meta["size"])
        per_state = np.repeat(np.arange(len(data)), data.lengths + 1)
        rows = slice(None) if episodes is None else np.flatnonzero(np.isin(per_state, np.asarray(episodes)))
        self.images, self.segmentation = data.pixels[rows], data.segmentation[rows]
        self.positions = data.observation[rows, 1:, ENTITY_FIELDS["position"]][..., :2]
        self.n_objects = data.n_objects[per_state[rows]]
        agent = data.observation[rows, 0, ENTITY_FIELDS["position"]]
        self.agent_points = np.stack([project(agent, c) for c in self.cameras], 1).astype(np.float32)
        objects = data.observation[rows, 1:, ENTITY_FIELDS["position"]]
        absent = np.arange(objects.shape[1])[None, :] >= self.n_objects[:, None]
        self.object_points = np.stack([project(objects, c) for c in self.cameras], 1).astype(np.float32)
        self.object_points[np.broadcast_to(absent[:, None], self.object_points.shape[:3])] = np.nan

    def __len__(self) -> int:
        return len(self.images)

    @property
    def views(self) -> int:
        return len(self.cameras)

    def batch(self, index: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        """``(B, V, 3, P, P)`` float images in ``[0, 1]`` of frames ``index``."""
        return frames_to_images(torch.as_tensor(self.images[index]).to(device))

    def agent_batch(self, index: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        """``(B, V, 2)`` :attr:`agent_points` of frames ``index``."""
        return torch.as_tensor(self.agent_points[index]).to(device)

    def object_batch(self, index: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        """``(B, V, n_max, 2)`` :attr:`object_points` of frames ``index``, NaN where an object is absent, outside the
        view, or shows fewer than :data:`~ecrl.encoders.particle_config.OBJECT_MIN_PIXELS` pixels in that view."""
        points = self.object_points[index].copy()
        labels = self.segmentation[index]  # (B, V, P, P)
        ids = np.arange(points.shape[2], dtype=np.int64) + 2
        shown = (labels[:, :, None] == ids[None, None, :, None, None]).sum((-2, -1)) >= OBJECT_MIN_PIXELS
        hidden = ~shown | ~(np.abs(points) <= 1).all(-1)
        points[hidden] = np.nan
        return torch.as_tensor(points).to(device)
