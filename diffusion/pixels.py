"""Planning from pixels: a diffusion planner over a frozen encoder's entities.

A pixel dataset (``ecrl-collect --pixels``) holds camera frames of every state. A frozen
object-centric encoder (:mod:`ecrl.encoders`, trained by ``ecrl-train-encoder``) turns each frame
into ``V · K`` entity rows; a denoiser of *generic* rows (``DenoiserConfig.entity_dim = D``) plans
over them exactly as the state planner plans over state entities: the current rows inpainted at
step 0, the goal rows (the targets' attributes and positions, as in the state planner) as
conditioning, future rows and actions predicted jointly.

- :class:`LatentWindows` encodes every frame once, normalises the rows (per-feature mean and
  standard deviation over the dataset) and, within each episode and camera, re-orders the entities
  of every frame to follow those of the frame before (optimal assignment on the normalised rows), so
  that a token keeps meaning the same thing along a window: an encoder's slots or particles come in
  no particular order per image.
- :class:`PixelPlanner` is the policy: ``obs["pixels"]`` (an env made with ``pixels=P``) → encoder
  → normalised rows → :class:`~ecrl.diffusion.planner.DiffusionPlanner`. Its policy ``meta`` carries
  ``pixels = {"size", "cameras"}``, from which the evaluation runner makes envs that render them.
- **Goal images** (``goal_images=True``): the goal is given as frames of the goal configuration from
  the same cameras (``ecrl-collect --goal-pixels``, ``PushEnv(goal_pixels=True)``), encoded by the
  same encoder and normalised the same way: ``V · K`` generic goal rows (``DenoiserConfig.goal_dim``)
  instead of the goal rows. ``meta["pixels"]`` then has ``"goal": true`` and the runner's envs
  observe ``goal_pixels`` too.
- **Table-frame keypoints** (``table_height=h``, the particles' positions in the table's frame) are an
  option of the front end the planner shares with the EIT from pixels,
  :class:`~ecrl.encoders.rows.FrameRows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from tqdm.auto import tqdm

from ecrl.checkpoint import register_builder
from ecrl.datasets import DatasetError, DemoDataset
from ecrl.diffusion.planner import DiffusionPlanner
from ecrl.encoders import EntityEncoder, frames_to_images
from ecrl.encoders.rows import (
    FrameRows,
    lift_to_table,
    position_columns,
    with_agent_column,
)

__all__ = ["LatentWindows", "PixelPlanner", "tracked_rows"]


def _encode_all(encoder: EntityEncoder, pixels: np.ndarray, batch: int, device, progress: bool) -> np.ndarray:
    out = []
    encoder.eval()
    with torch.no_grad():
        for first in tqdm(range(0, len(pixels), batch), desc="encode frames", unit="batch", disable=not progress):
            images = frames_to_images(torch.as_tensor(pixels[first : first + batch]).to(device))
            out.append(encoder.encode(images)[0].float().cpu().numpy())
    return np.concatenate(out)


def track(rows: np.ndarray, lengths: np.ndarray, views: int, pinned: int = 0) -> np.ndarray:
    """Re-order each frame's entities to follow the previous frame's, per episode and camera.

    Args:
        rows: ``(S + E, V * K, D)`` normalised rows of every state, episodes one after the other.
        lengths: ``(E,)`` steps per episode (an episode has ``length + 1`` states).
        views: ``V``.
        pinned: the first ``pinned`` entities of every view keep their place (an encoder's agent particle,
            which is the pusher's in every frame).

    Returns:
        The same rows, permuted within each frame and camera.
    """
    out = rows.copy()
    k = rows.shape[1] // views
    start = 0
    for length in lengths:
        for t in range(start + 1, start + int(length) + 1):
            for v in range(views):
                block = slice(v * k + pinned, (v + 1) * k)
                _, order = linear_sum_assignment(cdist(out[t - 1, block], out[t, block], "sqeuclidean"))
                out[t, block] = out[t, block][order]
        start += int(length) + 1
    return out


def tracked_rows(rows: np.ndarray, lengths: np.ndarray, encoder: EntityEncoder) -> np.ndarray:
    """:func:`track` for ``encoder``'s normalised rows; with an agent particle (``uses_agent``) that particle keeps
    its place and the rows get its column (:func:`~ecrl.encoders.rows.with_agent_column`)."""
    views, agent = encoder.config.views, encoder.uses_agent
    out = track(rows, lengths, views, pinned=int(agent))
    return with_agent_column(out, views) if agent else out


class LatentWindows:
    """Training windows of a pixel dataset with the state rows replaced by a frozen encoder's (normalised, tracked) rows.

    Args:
        data: a pixel dataset.
        encoder: the frozen encoder (its cameras and image size must be the dataset's).
        device: where the encoder runs.

    With ``goal_images``, each episode's goal frames (``data.goal_pixels``) are encoded and normalised
    alike into :attr:`goal_rows`, and a window's ``desired_goal`` is its episode's. With
    ``table_height``, the rows' positions are lifted to the table's frame (:func:`lift_to_table`)
    before they are normalised.

    With an encoder's agent particle (``uses_agent``), particle 0 of every view keeps its place in tracking and the
    rows get the agent column of :func:`~ecrl.encoders.rows.with_agent_column`.

    Attributes:
        rows: ``(S + E, V * K, width)`` normalised, tracked entity rows of every state (``width``: ``D``, or
            ``D + 1`` with an agent particle).
        goal_rows: ``(E, V * K, width)`` normalised entity rows of each episode's goal frames (``None``
            without ``goal_images``).
        mean, std: ``(D,)`` the normalisation.
        success: per episode (as :attr:`DemoDataset.success`).
    """

    def __init__(
        self,
        data: DemoDataset,
        encoder: EntityEncoder,
        device: torch.device | str = "cpu",
        progress: bool = True,
        goal_images: bool = False,
        table_height: float | None = None,
    ) -> None:
        if data.pixels is None:
            raise DatasetError(
                f"{data.path} holds no frames: planning over an encoder's entities needs `ecrl-collect --pixels`"
            )
        if goal_images and data.goal_pixels is None:
            raise DatasetError(
                f"{data.path} holds no goal frames: planning towards goal images needs `ecrl-collect --pixels P "
                "--goal-pixels`"
            )
        views, size = len(data.cameras), int(data.pixel_meta["size"])
        if (encoder.config.views, encoder.config.image_size) != (views, size):
            raise DatasetError(
                f"the encoder reads {encoder.config.views} camera(s) at {encoder.config.image_size} px; {data.path} "
                f"holds {views} camera(s) ({', '.join(data.cameras)}) at {size} px"
            )
        self.data, self.success = data, data.success
        lift = lambda rows: rows  # noqa: E731
        if table_height is not None:
            columns, cameras = position_columns(encoder), list(data.cameras)
            lift = lambda rows: lift_to_table(rows, cameras, columns, table_height)  # noqa: E731
        raw = lift(_encode_all(encoder, data.pixels, 256, device, progress))
        self.mean, self.std = raw.mean((0, 1)), raw.std((0, 1)) + 1e-6
        self.rows = tracked_rows((raw - self.mean) / self.std, data.lengths, encoder).astype(np.float32)
        self.width = self.rows.shape[-1]
        self.goal_rows = None
        if goal_images:
            goal = lift(_encode_all(encoder, data.goal_pixels, 256, device, progress))
            goal = (goal - self.mean) / self.std
            self.goal_rows = (with_agent_column(goal, views) if encoder.uses_agent else goal).astype(np.float32)

    def sample_windows(self, batch_size: int, horizon: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """As :meth:`DemoDataset.sample_windows`, with ``observation (B, H + 1, V * K, width)`` encoder rows and an
        all-True ``mask`` (with goal images, also ``desired_goal (B, V * K, width)`` and an all-True ``goal_mask``)."""
        batch = self.data.sample_windows(batch_size, horizon, rng)
        batch["observation"] = self.rows[batch["state_index"]]
        batch["mask"] = np.ones((batch_size, self.rows.shape[1]), bool)
        if self.goal_rows is not None:
            episode = np.searchsorted(self.data.state_starts, batch["state_index"][:, 0], side="right") - 1
            batch["desired_goal"] = self.goal_rows[episode]
            batch["goal_mask"] = np.ones(self.goal_rows.shape[:2], bool)[episode]
        return batch


@register_builder("pixel_planner")
class PixelPlanner(FrameRows):
    """Observation dict with ``pixels (B, V, P, P, 3)`` uint8 → action ``(B, A)``, through a frozen encoder and a planner.

    Args:
        encoder, mean, std, table_height, cameras: the front end
            (:class:`~ecrl.encoders.rows.FrameRows`; the normalisation is :class:`LatentWindows`').
        planner: the keyword arguments of the :class:`DiffusionPlanner` (its denoiser has ``entity_dim``
            = the front end's row width).
        goal_images: the goal is ``obs["goal_pixels"]``, frames of the goal configuration, encoded like the
            observation (the planner's denoiser has ``goal_dim`` = the row width); otherwise the goal rows.
    """

    def __init__(
        self,
        encoder: Mapping[str, Any],
        planner: Mapping[str, Any],
        mean: list[float],
        std: list[float],
        goal_images: bool = False,
        table_height: float | None = None,
        cameras: list[str] | None = None,
    ) -> None:
        super().__init__(encoder, mean, std, table_height, cameras)
        self.planner = DiffusionPlanner(**planner)
        self.goal_images = bool(goal_images)
        width = self.planner.denoiser.config.entity_dim
        goal_dim = self.planner.denoiser.config.goal_dim
        if goal_dim != (width if self.goal_images else 0):
            raise ValueError(
                f"goal_images={self.goal_images} needs the planner's goal_dim to be "
                f"{width if self.goal_images else 0}, got {goal_dim}"
            )
        if width != self.width:
            raise ValueError(f"the planner's rows are {width} wide, the encoder's {self.width}: they must agree")

    @property
    def kwargs(self) -> dict[str, Any]:
        return {
            **self.row_kwargs,
            "planner": self.planner.kwargs,
            **({"goal_images": True} if self.goal_images else {}),
        }

    def reset(self, *_: Any) -> None:
        self.planner.reset()

    @torch.no_grad()
    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        rows = self.entity_rows(obs)
        mask = torch.ones(rows.shape[:2], dtype=torch.bool, device=rows.device)
        goal = obs["desired_goal"]
        if self.goal_images:
            if "goal_pixels" not in obs:
                raise ValueError(
                    "this planner plans towards goal images: its observations need 'goal_pixels' "
                    "(make the env with pixels=P, goal_pixels=True)"
                )
            goal = self.rows(obs["goal_pixels"])
        return self.planner({"observation": rows, "desired_goal": goal, "mask": mask})
