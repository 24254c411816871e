"""An exponential moving average of a model's weights, the copy a diffusion run samples and saves from."""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import nn

__all__ = ["EMA"]


class EMA:
    """Exponential moving average of a model's weights: ``avg ← d · avg + (1 − d) · weights``.

    The decay warms up as ``min(decay, (1 + k) / (10 + k))`` after ``k`` updates, so early averages
    do not hold on to the random initialisation. :attr:`model` is the averaged copy (eval mode, no
    gradients): sample from it and save it (``save_denoiser(ema.model, path)``); :meth:`state_dict`
    and :meth:`load_state_dict` carry the average and the update count for resuming.

    Args:
        model: the model being trained.
        decay: the decay once warmed up.
    """

    def __init__(self, model: nn.Module, decay: float = 0.999) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.decay, self.updates = decay, 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards ``model``'s current weights (buffers are copied)."""
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        self.updates += 1
        for avg, p in zip(self.model.parameters(), model.parameters(), strict=True):
            avg.lerp_(p.detach(), 1.0 - d)
        for avg, b in zip(self.model.buffers(), model.buffers(), strict=True):
            avg.copy_(b)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averaged weights plus ``ema_updates`` (a 0-d tensor, so the dict saves with safetensors)."""
        return {**self.model.state_dict(), "ema_updates": torch.tensor(self.updates)}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restore what :meth:`state_dict` returned."""
        state = dict(state)
        self.updates = int(state.pop("ema_updates", 0))
        self.model.load_state_dict(state)
