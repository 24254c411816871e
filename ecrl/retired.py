"""Options the library no longer has, so that what was saved with them still loads.

An option stays in the library only while a committed result shows it beats the default; a
rejected one is a paragraph in the results README that measured it (issue 20). Checkpoints and
run configurations saved before an option was removed may still name it. :func:`drop_retired`
takes such saved keyword arguments before they reach a constructor: an option saved at its
*neutral* value (the one that does what the library still does) is dropped; at any other value
the saved model relied on behaviour that is gone, and loading it is an error that says where the
trial is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ANY", "RETIRED", "Retired", "RetiredOptionError", "drop_retired", "retired_types"]

ANY = object()
"""Neutral at every value: the option acted only through another retired option of the same model."""


@dataclass(frozen=True)
class Retired:
    """A removed option: the value that reproduces what remains, the README that recorded its trial, and
    what to use instead where its behaviour moved elsewhere (empty: it is gone; ``{value}`` stands for the saved value)."""

    neutral: Any
    record: str
    instead: str = ""


class RetiredOptionError(ValueError):
    """Saved keyword arguments use a removed option at a value whose behaviour is gone."""


_ENCODER_ABLATION = "results/encoders/ablation/README.md"
_PUSH3 = "results/diffusion_push3/README.md"
_PUSH2 = "results/rl_push2/README.md"
_ENTITY_GOALS = Retired(True, _PUSH3)
_RELATIVE_GOALS = Retired(False, _PUSH3)
_FETCH_PP2 = "results/fetch_pick_place2/README.md"
_FOCUS = (
    "a model no longer chooses the objects it sees: remove the option from the saved kwargs (policy.json) and "
    "wrap the loaded policy in ecrl.focus.Focus(policy, k={value}) (ecrl-eval --focus {value})"
)

RETIRED: dict[str, dict[str, Retired]] = {
    "ecrl.encoders.particles:ParticleEncoder": {
        "locality_weight": Retired(0.0, _ENCODER_ABLATION),
        "locality_start": Retired(ANY, _ENCODER_ABLATION),
        "heatmap_stride": Retired(4, _ENCODER_ABLATION),
        "suppression_px": Retired(4.0, _ENCODER_ABLATION),
        "crop_zoom": Retired(1.0, _ENCODER_ABLATION),
        "centring_weight": Retired(0.0, _ENCODER_ABLATION),
        "particle_scale": Retired(0.0, _ENCODER_ABLATION),
        "colour_detail": Retired(0.5, "results/encoders/top_close/README.md"),
        "explain_away": Retired(False, "results/encoders/agent/README.md"),
    },
    "ecrl.diffusion.denoiser:DenoiserConfig": {
        "entity_goals": _ENTITY_GOALS,
        "relative_goals": _RELATIVE_GOALS,
        "goal_offsets": Retired(False, _FETCH_PP2),
        "past": Retired(0, "results/pixels_push2/README.md"),
    },
    "ecrl.diffusion.config:DiffusionTrainConfig": {
        "entity_goals": _ENTITY_GOALS,
        "relative_goals": _RELATIVE_GOALS,
        "still_objects": Retired(0, _PUSH3),
        "still_clearance": Retired(ANY, _PUSH3),
        "fuse_views": Retired(False, "results/pixels_push2/README.md"),
    },
    "ecrl.diffusion.planner:DiffusionPlanner": {
        "focus": Retired(0, _PUSH3, _FOCUS),
        "placed_within": Retired(ANY, _PUSH3),
    },
    "ecrl.policies.actor:EntityActorModule": {
        "commit": Retired(True, _PUSH2),
        "skip_placed": Retired(True, _PUSH2),
        "focus": Retired(0, _PUSH2, _FOCUS),
        "placed_within": Retired(ANY, _PUSH2),
        "select": Retired(
            False,
            _PUSH2,
            "the learnt object scorer is gone (any fixed order of objects did as well); drop 'select' from "
            "policy.json and the scorer.* tensors from policy.safetensors, then evaluate the action net with "
            "ecrl.focus.Focus(policy, k=1, patience=30) (ecrl-eval --focus 1 --patience 30)",
        ),
        "patience": Retired(ANY, _PUSH2),
    },
    "ecrl.policies.config:TrainConfig": {
        "bc_q_filter": Retired(False, "results/rl_push1/README.md"),
        "select": Retired(
            False, _PUSH2, "train the plain actor (no scorer) and evaluate it with ecrl-eval --focus 1 --patience 30"
        ),
    },
}
"""``"<module>:<class>"`` of what the saved keyword arguments build (a policy's ``builder``, an encoder
kind's class, a config dataclass) → its retired options."""


def _name(model: str | type) -> str:
    return f"{model.__module__}:{model.__qualname__}" if isinstance(model, type) else model


def retired_types(model: str | type) -> dict[str, type]:
    """The type of each retired option of ``model`` (``str`` for those neutral at any value), to parse them
    from a command line saved in a run's configuration."""
    return {name: str if r.neutral is ANY else type(r.neutral) for name, r in RETIRED.get(_name(model), {}).items()}


def drop_retired(model: str | type, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` saved for ``model`` without its retired options.

    ``model`` is what they build: a key of :data:`RETIRED` or the class itself (a model with no
    retired options gets its ``kwargs`` back unchanged).

    Raises:
        RetiredOptionError: a retired option is saved at a value other than its neutral one.
    """
    model = _name(model)
    retired = RETIRED.get(model, {})
    kept = dict(kwargs)
    for name, option in retired.items():
        if name not in kept:
            continue
        value = kept.pop(name)
        if option.neutral is not ANY and value != option.neutral:
            what = f"{model.rpartition(':')[2]} option {name}={value!r} was retired"
            if option.instead:
                raise RetiredOptionError(f"{what}: {option.instead.format(value=value)} ({option.record} says why)")
            raise RetiredOptionError(
                f"{what}: the library now always does what "
                f"{name}={option.neutral!r} did ({option.record} says why). "
                f"Use an ecrl version from before its removal to run what was saved with it, or retrain without it"
            )
    return kept
