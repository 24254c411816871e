"""From camera frames to the rows a planner or a policy reads: a frozen encoder's entities, normalised.

:class:`FrameRows` is the front end that every model acting from pixels shares (the diffusion
planner of :mod:`ecrl.diffusion.pixels`, the EIT of :mod:`ecrl.policies.actor`): ``obs["pixels"]``
(frames of an env made with ``pixels=P``) → the frozen encoder's ``V · K`` entity rows → per-feature
normalisation → optionally **table-frame keypoints** (``table_height=h``): each particle's image position
lifted to where its camera's ray meets the plane ``z = h`` (:func:`lift_to_table`, the cameras'
calibration of :func:`ecrl.envs.scene.unproject`), the frame of the goal rows and of the other views'
particles. An encoder with an **agent particle** (``uses_agent``: particle 0 of every view follows the pusher)
gets one more column, 1 on that particle's row and 0 elsewhere (:func:`with_agent_column`), so that a model
can tell it from the others: the rows are ``D + 1`` wide.

:class:`EncodedObservation` puts those rows into an env's observations (key ``"entities"``), for the
RL trainer, whose networks read observation dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from ecrl.encoders.base import EntityEncoder, frames_to_images
from ecrl.encoders.io import build_encoder
from ecrl.envs.scene import unproject

__all__ = [
    "ENTITIES_KEY",
    "OBJECT_CENTRE",
    "TABLE_REACH",
    "EncodedObservation",
    "FrameRows",
    "frame_statistics",
    "lift_to_table",
    "position_columns",
    "with_agent_column",
]

OBJECT_CENTRE = 0.025
"""The height (metres) of the plane table-frame keypoints are lifted to by default: the centre of an object of
the default size (``ObjectSpec.size``, a cube's half side or a sphere's radius)."""

TABLE_REACH = 1.0
"""Lifted positions are clipped to ``[-TABLE_REACH, TABLE_REACH]`` metres: a ray above the horizon (a
particle on the wall or the sky of the front camera) meets no table and is put at that edge."""

ENTITIES_KEY = "entities"
"""The observation key :class:`EncodedObservation` adds: ``(M, W)`` rows of :meth:`FrameRows.entity_rows`."""


def position_columns(encoder: EntityEncoder) -> slice:
    """The columns of an entity row that hold the keypoint's image position (an encoder with ``fields()``)."""
    fields = encoder.fields() if hasattr(encoder, "fields") else {}
    if "position" not in fields:
        raise ValueError(
            f"table-frame keypoints lift each entity's image position: the {encoder.kind!r} encoder's rows have no "
            "'position' field (use the particle encoder)"
        )
    return fields["position"]


def lift_to_table(entities: np.ndarray, cameras: list[str], columns: slice, height: float) -> np.ndarray:
    """Entity rows ``(..., V * K, D)`` with each view's image positions (``columns``) replaced by table-frame ones.

    A position ``(x, y)`` of view ``v`` (image coordinates in ``[-1, 1]``) becomes the ``(x, y)`` in metres
    where the ray of ``cameras[v]`` through it meets the plane ``z = height``, clipped to
    :data:`TABLE_REACH`. The other columns are unchanged.
    """
    if entities.shape[-2] % len(cameras):
        raise ValueError(f"{entities.shape[-2]} entities per frame do not split into {len(cameras)} camera views")
    out = np.array(entities, dtype=np.float32, copy=True)
    k = entities.shape[-2] // len(cameras)
    for v, camera in enumerate(cameras):
        block = out[..., v * k : (v + 1) * k, columns]
        world = unproject(block, camera, height)[..., :2]
        out[..., v * k : (v + 1) * k, columns] = np.clip(
            np.nan_to_num(world, nan=TABLE_REACH), -TABLE_REACH, TABLE_REACH
        )
    return out


def with_agent_column(rows: np.ndarray | torch.Tensor, views: int) -> np.ndarray | torch.Tensor:
    """Rows ``(..., V * K, D)`` → ``(..., V * K, D + 1)``: the last column is 1 on each view's particle 0 (the
    agent particle of an encoder with ``uses_agent``) and 0 on the others."""
    k = rows.shape[-2] // views
    if rows.shape[-2] != views * k or k < 1:
        raise ValueError(f"{rows.shape[-2]} entities per frame do not split into {views} camera views")
    flag = np.zeros(rows.shape[-2], dtype=np.float32)
    flag[::k] = 1.0
    if isinstance(rows, torch.Tensor):
        column = torch.as_tensor(flag, device=rows.device, dtype=rows.dtype).expand(*rows.shape[:-1])
        return torch.cat([rows, column[..., None]], -1)
    column = np.broadcast_to(flag.astype(rows.dtype), rows.shape[:-1])
    return np.concatenate([rows, column[..., None]], -1)


class FrameRows(nn.Module):
    """Camera frames → normalised entity rows, through a frozen encoder.

    Args:
        encoder: ``{"kind": …, "config": {…}}`` of the encoder (:func:`ecrl.encoders.build_encoder`); its
            weights are loaded with the module's.
        mean, std: the per-feature normalisation of the encoder's (lifted) rows, ``D`` values each
            (:func:`frame_statistics`, or a dataset's, :class:`ecrl.diffusion.pixels.LatentWindows`).
        table_height: lift the rows' positions to the table's frame at this height (:func:`lift_to_table`);
            ``cameras`` names the views, in the encoder's order. ``None``: image positions.

    Attributes:
        width: the width of the rows: the encoder's ``D``, plus one with an agent particle (:func:`with_agent_column`).
    """

    def __init__(
        self,
        encoder: Mapping[str, Any],
        mean: list[float],
        std: list[float],
        table_height: float | None = None,
        cameras: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.encoder = build_encoder(encoder["kind"], **encoder["config"]).eval().requires_grad_(False)
        d = self.encoder.entity_dim
        if len(mean) != d or len(std) != d:
            raise ValueError(
                f"the encoder's rows are {d} wide, the normalisation {len(mean)}/{len(std)}: they must agree"
            )
        self.table_height = None if table_height is None else float(table_height)
        self.cameras = list(cameras or [])
        if self.table_height is not None:
            self.columns = position_columns(self.encoder)
            if len(self.cameras) != self.encoder.config.views:
                raise ValueError(
                    f"table-frame keypoints need the name of each of the encoder's {self.encoder.config.views} "
                    f"camera(s), got {self.cameras}"
                )
        self.width = d + self.encoder.uses_agent
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    @property
    def row_kwargs(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this front end (a subclass's ``kwargs`` include them)."""
        return {
            "encoder": {"kind": self.encoder.kind, "config": self.encoder.config_dict()},
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            **({"table_height": self.table_height, "cameras": self.cameras} if self.table_height is not None else {}),
        }

    def train(self, mode: bool = True) -> FrameRows:
        super().train(mode)
        self.encoder.eval()  # frozen: always the deterministic eval-mode encoding
        return self

    def rows(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(B, V, P, P, 3)`` uint8 frames → ``(B, V * K, width)`` normalised entity rows."""
        if pixels.ndim != 5 or pixels.shape[-1] != 3:
            raise ValueError(f"obs['pixels']: expected (B, V, P, P, 3) uint8 frames, got shape {tuple(pixels.shape)}")
        entities, _ = self.encoder.encode(frames_to_images(pixels.to(self.mean.device)))
        if self.table_height is not None:
            lifted = lift_to_table(entities.cpu().numpy(), self.cameras, self.columns, self.table_height)
            entities = torch.from_numpy(lifted).to(entities.device)
        rows = (entities - self.mean) / self.std
        return with_agent_column(rows, self.encoder.config.views) if self.encoder.uses_agent else rows

    def entity_rows(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """An observation dict's rows ``(B, V * K, width)``: :meth:`rows` of ``obs["pixels"]``."""
        if "pixels" not in obs:
            raise ValueError(
                "this model acts from camera frames: its observations need 'pixels' (make the env with pixels=P)"
            )
        return self.rows(obs["pixels"])


def frame_statistics(
    encoder: EntityEncoder,
    pixels: np.ndarray,
    cameras: list[str] | None = None,
    table_height: float | None = None,
    batch: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature ``mean, std`` ``(D,)`` of the encoder's (lifted) rows over frames ``(S, V, P, P, 3)`` uint8."""
    encoder.eval()
    out = []
    with torch.no_grad():
        for first in range(0, len(pixels), batch):
            out.append(encoder.encode(frames_to_images(torch.as_tensor(pixels[first : first + batch])))[0].numpy())
    rows = np.concatenate(out)
    if table_height is not None:
        rows = lift_to_table(rows, list(cameras or []), position_columns(encoder), table_height)
    return rows.mean((0, 1)), rows.std((0, 1)) + 1e-6


class EncodedObservation(gym.ObservationWrapper):
    """An env made with ``pixels=P`` whose observations carry ``"entities"`` (:meth:`FrameRows.entity_rows`,
    float32) in place of ``"pixels"``; the other keys are unchanged."""

    def __init__(self, env: gym.Env, rows: FrameRows) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or "pixels" not in space.spaces:
            raise ValueError(f"EncodedObservation encodes camera frames: make the env with pixels=P, got {space}")
        self.frame_rows = rows.eval()
        tokens = rows.encoder.config.entities * rows.encoder.config.views
        entities = spaces.Box(-np.inf, np.inf, shape=(tokens, rows.width), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {k: v for k, v in space.spaces.items() if k != "pixels"} | {ENTITIES_KEY: entities}
        )

    def observation(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = {"pixels": torch.as_tensor(np.asarray(obs["pixels"])[None])}
        with torch.no_grad():
            rows = self.frame_rows.entity_rows(batch)[0].numpy().astype(np.float32)
        return {k: v for k, v in obs.items() if k != "pixels"} | {ENTITIES_KEY: rows}
