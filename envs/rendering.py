"""Rendering from a scene's named cameras: RGB, depth and segmentation through one lazily made renderer."""

from __future__ import annotations

import weakref

import gymnasium as gym
import mujoco
import numpy as np

from ecrl.envs.scene import CAMERAS, MAIN_CAMERAS
from ecrl.envs.task import _check_choice


class CameraViews:
    """``render``, ``render_views``, ``render_segmentation`` and picklability for an env with ``model``, ``data``,
    ``width``, ``height``, ``camera`` and ``render_mode``; the GL context is made at the first image and freed on
    ``close``. Segmentation reads ``n_objects``, ``_agent_geoms`` (the agent's geoms) and ``_geom`` ``(N, S)``
    (each object's geoms)."""

    _renderer: mujoco.Renderer | None = None

    def _render_with(self, camera: str, depth: bool = False, segmentation: bool = False) -> np.ndarray:
        _check_choice("camera", camera, CAMERAS)
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.height, self.width)
            # Free the GL context before interpreter teardown, when EGL can no longer do it cleanly.
            self._renderer_finalizer = weakref.finalize(self, self._renderer.close)
        r = self._renderer
        r.enable_depth_rendering() if depth else r.disable_depth_rendering()
        r.enable_segmentation_rendering() if segmentation else r.disable_segmentation_rendering()
        r.update_scene(self.data, camera=camera)
        return r.render()

    def render(self) -> np.ndarray | None:
        """``(H, W, 3) uint8`` for ``rgb_array``, ``(H, W) float32`` metres for ``depth_array``."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array' to make()")
            return None
        return self._render_with(self.camera, depth=self.render_mode == "depth_array").copy()

    def render_views(self, cameras: tuple[str, ...] = MAIN_CAMERAS) -> dict[str, np.ndarray]:
        """RGB images ``{camera: (H, W, 3) uint8}`` from several named cameras (default: front and top)."""
        return {c: self._render_with(c).copy() for c in cameras}

    def render_segmentation(self, camera: str = "front") -> np.ndarray:
        """``(H, W) int16`` labels: 0 background, ``k + 1`` for the entity in observation row ``k``.

        The agent (row 0) is 1 and object ``i`` is ``i + 2``, so ``labels - 1`` indexes ``obs["observation"]``.
        """
        seg = self._render_with(camera, segmentation=True)
        ids, kinds = seg[..., 0], seg[..., 1]
        lut = np.zeros(self.model.ngeom + 1, dtype=np.int16)
        lut[self._agent_geoms] = 1
        lut[self._geom] = np.arange(2, self.n_objects + 2)[:, None]
        return lut[np.where(kinds == int(mujoco.mjtObj.mjOBJ_GEOM), ids, self.model.ngeom)]

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer_finalizer()
            self._renderer = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_renderer"] = None
        state.pop("_renderer_finalizer", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
