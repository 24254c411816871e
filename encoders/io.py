"""Encoder kinds by name, and encoder checkpoints: ``encoder.safetensors`` + ``encoder.json``, no pickle.

An encoder checkpoint is a model checkpoint of :mod:`ecrl.checkpoint` whose builder is the one
registered for the encoder's kind (:data:`ENCODER_KINDS`) and whose ``kwargs`` are the fields of
its config. Version 1 stored them as ``{"kind": …, "config": {…}}``; such checkpoints still load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ecrl import checkpoint
from ecrl.checkpoint import CheckpointError, CheckpointFormat
from ecrl.encoders.base import EntityEncoder

__all__ = ["ENCODER", "ENCODER_KINDS", "build_encoder", "encoder_class", "load_encoder", "save_encoder"]

ENCODER_KINDS = {"slot": "slot_encoder", "particles": "particle_encoder"}
"""``kind`` (``ecrl-train-encoder --kind``) → the registered builder of that encoder."""


def _builder_name(kind: str) -> str:
    if kind not in ENCODER_KINDS:
        raise ValueError(f"unknown encoder kind {kind!r}: expected one of {list(ENCODER_KINDS)}")
    return ENCODER_KINDS[kind]


def _v1(config: dict[str, Any]) -> dict[str, Any]:
    """Version 1: ``{"kind": …, "config": {…}}`` instead of ``builder`` and ``kwargs``."""
    try:
        name = _builder_name(config.get("kind"))
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    return {**config, "builder": name, "kwargs": config.get("config")}


ENCODER = CheckpointFormat("ecrl.encoder", 2, "encoder", "an ecrl encoder", legacy={1: _v1})
"""Encoder checkpoints: ``encoder.json`` + ``encoder.safetensors``."""


def encoder_class(kind: str) -> type[EntityEncoder]:
    """The class of the encoders of ``kind``."""
    return checkpoint.builder(_builder_name(kind)).__self__  # the registered builder is its from_fields


def build_encoder(kind: str, **config: Any) -> EntityEncoder:
    """A freshly initialised encoder of ``kind`` whose config fields are ``config`` (others default)."""
    return checkpoint.build(_builder_name(kind), config)


def save_encoder(model: EntityEncoder, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
    """Write ``model`` into directory ``path`` (created); returns it."""
    return checkpoint.save(path, model, ENCODER, _builder_name(model.kind), model.config_dict(), meta=meta or {})


def load_encoder(path: str | Path, device: str | torch.device = "cpu") -> EntityEncoder:
    """The encoder saved at ``path`` (a checkpoint directory, one of its files, or a training run), in eval mode.

    Raises:
        CheckpointError: ``path`` is not an encoder checkpoint, or its weights do not fit its config.
    """
    model, config = checkpoint.load(path, ENCODER, device)
    if not isinstance(model, EntityEncoder):
        raise CheckpointError(f"{path} holds a {type(model).__name__}, not an encoder")
    model.meta = config.get("meta", {})
    return model
