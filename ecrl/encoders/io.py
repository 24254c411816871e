"""Encoder kinds by name, and encoder checkpoints: ``encoder.safetensors`` + ``encoder.json``, no pickle."""

from __future__ import annotations

import importlib
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from ecrl.encoders.base import EntityEncoder
from ecrl.policy import CheckpointError, load_weights, read_config
from ecrl.retired import drop_retired

__all__ = ["ENCODER_KINDS", "build_encoder", "encoder_class", "load_encoder", "save_encoder"]

ENCODER_KINDS = {
    "slot": "ecrl.encoders.slot_attention:SlotAttentionEncoder",
    "particles": "ecrl.encoders.particles:ParticleEncoder",
}
"""``kind`` → the class that implements it."""

FORMAT, VERSION, WEIGHTS, CONFIG = "ecrl.encoder", 1, "encoder.safetensors", "encoder.json"


def encoder_class(kind: str) -> type[EntityEncoder]:
    if kind not in ENCODER_KINDS:
        raise ValueError(f"unknown encoder kind {kind!r}: expected one of {list(ENCODER_KINDS)}")
    module, _, name = ENCODER_KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def build_encoder(kind: str, **config: Any) -> EntityEncoder:
    """A freshly initialised encoder of ``kind`` whose config fields are ``config`` (others default)."""
    cls = encoder_class(kind)
    known = {f.name for f in fields(cls.Config)}
    unknown = set(config) - known
    if unknown:
        raise ValueError(f"{kind} encoders have no option {sorted(unknown)}; options: {sorted(known)}")
    return cls(cls.Config(**config))


def save_encoder(model: EntityEncoder, path: str | Path, meta: dict[str, Any] | None = None) -> Path:
    """Write ``model`` into directory ``path`` (created); returns it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(path / WEIGHTS))
    config = {
        "format": FORMAT,
        "version": VERSION,
        "kind": model.kind,
        "config": model.config_dict(),
        "meta": meta or {},
    }
    (path / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return path


def _resolve(path: Path) -> Path:
    if path.is_file():
        path = path.parent
    for candidate in (path, path / "final", path / "checkpoints" / "latest"):
        if (candidate / CONFIG).exists():
            return candidate
    raise CheckpointError(
        f"{path} is not an ecrl encoder checkpoint: expected a directory with {CONFIG} and {WEIGHTS} "
        "(or a run directory of ecrl-train-encoder with final/ or checkpoints/latest/)"
    )


def load_encoder(path: str | Path, device: str = "cpu") -> EntityEncoder:
    """The encoder saved at ``path`` (a checkpoint directory, one of its files, or a training run), in eval mode.

    Raises:
        CheckpointError: ``path`` is not an encoder checkpoint, or its weights do not fit its config.
    """
    root = _resolve(Path(path))
    config = read_config(root / CONFIG, FORMAT, VERSION, "an ecrl encoder config")
    if not (root / WEIGHTS).exists():
        raise CheckpointError(f"{root} has {CONFIG} but no {WEIGHTS}")
    try:
        model = build_encoder(config["kind"], **drop_retired(encoder_class(config["kind"]), config["config"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{root / CONFIG} does not describe an encoder that can be built: {e!r}") from e
    load_weights(model, root / WEIGHTS, root / CONFIG)
    model.meta = config.get("meta", {})
    return model.to(device).eval()
