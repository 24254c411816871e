"""The entity-centric diffusion denoiser: (entities × steps + actions + goals) tokens → clean plan.

A plan is a window of ``T = H + 1`` steps: every entity's *dynamic state* at steps ``0 … H`` and the
action taken at steps ``0 … H - 1``. The denoiser reads a noisy plan and predicts the clean one
(x₀-prediction, see :class:`EntityDenoiser`).

Features. An entity row (:data:`ecrl.entities.ENTITY_FIELDS`) splits into

- *static* attributes, constant over an episode (``STATIC_DIM`` = 12): ``present, is_agent,
  is_object``, size (half extents, × 25), shape one-hot, colour RGB;
- *dynamic* state (``DYNAMIC_DIM`` = 4): position x, y (× 4, so the ±0.3 m table spans ±1.2) and
  sin/cos of the yaw. Yaw is dynamic because pushing turns objects (cubes rotate on their hinge joint
  and the contact a pusher makes depends on it). Height is left out (objects slide on a flat table,
  their z is fixed by their size) and so is velocity (a plan at the control rate already says how
  things move; finite differences of positions carry it).

That is the ``planar`` state of the push tasks. Where objects are lifted and stacked (OGBench's cubes,
an arm), the ``spatial`` state (``SPATIAL_DYNAMIC_DIM`` = 7, :attr:`DenoiserConfig.state`) adds the
height (× 4) and the gripper's opening and contact (the agent row's :data:`~ecrl.envs.layout.AGENT_GRIPPER`
columns; zero for objects): x, y, z, sin yaw, cos yaw, opening, contact. The gripper columns then
leave the static attributes (they change within an episode). Training sets it from the dataset's env.

The scales are the fixed ones the RL networks use (``policies/nets.py``), so every feature is O(1).
Goal rows (:data:`ecrl.entities.GOAL_FIELDS`) enter whole, with positions × 4 and sizes × 25.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ecrl import checkpoint
from ecrl.attention import AttentionBlock, MultiHeadAttention, mlp
from ecrl.checkpoint import CheckpointFormat, config_from, register_builder
from ecrl.entities import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS
from ecrl.envs.layout import AGENT_GRIPPER, ENTITY_PRESENT, ENTITY_XY
from ecrl.retired import drop_retired

__all__ = [
    "DYNAMIC_DIM",
    "SPATIAL_DYNAMIC_DIM",
    "STATES",
    "STATIC_DIM",
    "DenoiserConfig",
    "denoiser_config",
    "EntityDenoiser",
    "generic_rows",
    "goal_features",
    "join_rows",
    "load_denoiser",
    "save_denoiser",
    "split_rows",
]

POSITION_SCALE = 4.0
"""Positions (m) × 4: the ±0.3 m table spans ±1.2."""
SIZE_SCALE = 25.0
"""Half extents (m) × 25: 1.5–3.5 cm objects become 0.4–0.9."""

_STATIC_FIELDS = ("present", "is_agent", "is_object", "size", "shape", "colour")
_STATIC_COLUMNS = torch.cat([torch.arange(ENTITY_DIM)[ENTITY_FIELDS[name]] for name in _STATIC_FIELDS])
_ENTITY_SCALE = torch.ones(ENTITY_DIM)
_ENTITY_SCALE[ENTITY_FIELDS["size"]] = SIZE_SCALE
_STATIC_SCALE = _ENTITY_SCALE[_STATIC_COLUMNS]
_YAW = ENTITY_FIELDS["yaw"]
_GOAL_SCALE = torch.ones(GOAL_DIM)
_GOAL_SCALE[GOAL_FIELDS["position"]] = POSITION_SCALE
_GOAL_SCALE[GOAL_FIELDS["size"]] = SIZE_SCALE

STATIC_DIM = len(_STATIC_COLUMNS)
"""Width of the static features: present, is_agent, is_object, size (3), shape one-hot, colour (3)."""
DYNAMIC_DIM = 4
"""Width of the planar dynamic features: x, y (× 4), sin yaw, cos yaw."""
SPATIAL_DYNAMIC_DIM = 7
"""Width of the spatial dynamic features: x, y, z (× 4), sin yaw, cos yaw, gripper opening, gripper contact."""
STATES: dict[str, int] = {"planar": DYNAMIC_DIM, "spatial": SPATIAL_DYNAMIC_DIM}
"""The dynamic states a denoiser plans (:attr:`DenoiserConfig.state`) and their widths."""
_XYZ = ENTITY_FIELDS["position"]
_AGENT = ENTITY_FIELDS["is_agent"].start
# Static columns that hold the gripper's state in agent rows (the shape one-hot's first two columns).
_STATIC_GRIPPER = torch.tensor(
    [_STATIC_COLUMNS.tolist().index(c) for c in range(AGENT_GRIPPER.start, AGENT_GRIPPER.stop)]
)


def _check_shapes(**specs: tuple[torch.Tensor, tuple[int | str, ...]]) -> dict[str, int]:
    """Check tensors against shapes whose letters must agree across tensors; returns the letters' sizes.

    Raises:
        ValueError: naming the tensor, its expected shape (letters bound so far filled in) and its shape.
    """
    sizes: dict[str, int] = {}
    for name, (tensor, dims) in specs.items():
        known = {dim: sizes[dim] for dim in dims if isinstance(dim, str) and dim in sizes}
        ok = tensor.ndim == len(dims)
        for dim, size in zip(dims, tensor.shape if ok else (), strict=False):
            ok = ok and size == (sizes.setdefault(dim, size) if isinstance(dim, str) else dim)
        if not ok:
            where = f" with {', '.join(f'{k}={v}' for k, v in known.items())}" if known else ""
            raise ValueError(f"{name}: expected shape ({', '.join(map(str, dims))}){where}, got {tuple(tensor.shape)}")
    return sizes


def _check_bool(**masks: torch.Tensor) -> None:
    for name, mask in masks.items():
        if mask.dtype != torch.bool:
            raise ValueError(f"{name}: expected a bool tensor, got dtype {mask.dtype}")


def split_rows(observation: torch.Tensor, state: str = "planar") -> tuple[torch.Tensor, torch.Tensor]:
    """Split entity rows over a window into normalised static and dynamic features.

    Args:
        observation: ``(B, T, N, ENTITY_DIM)`` entity rows at ``T`` steps (padded rows all zero).
        state: ``"planar"`` or ``"spatial"`` (see the module docstring).

    Returns:
        ``static (B, N, STATIC_DIM)`` read at step 0 (constant over an episode) and
        ``dynamic (B, T, N, D)``: planar (``D = DYNAMIC_DIM``) x, y × 4, sin yaw, cos yaw; spatial
        (``D = SPATIAL_DYNAMIC_DIM``) x, y, z × 4, sin yaw, cos yaw, gripper opening and contact.
    """
    _check_shapes(observation=(observation, ("B", "T", "N", ENTITY_DIM)))
    if state not in STATES:
        raise ValueError(f"state must be one of {list(STATES)}, got {state!r}")
    scale = _STATIC_SCALE.to(observation.device, observation.dtype)
    static = observation[:, 0, :, _STATIC_COLUMNS.to(observation.device)] * scale
    if state == "planar":
        dynamic = torch.cat([observation[..., ENTITY_XY] * POSITION_SCALE, observation[..., _YAW]], dim=-1)
        return static, dynamic
    agent = observation[..., _AGENT : _AGENT + 1] > 0.5
    gripper = observation[..., AGENT_GRIPPER] * agent
    static = static.clone()
    static[..., _STATIC_GRIPPER.to(observation.device)] *= ~agent[:, 0]
    dynamic = torch.cat([observation[..., _XYZ] * POSITION_SCALE, observation[..., _YAW], gripper], dim=-1)
    return static, dynamic


def generic_rows(
    observation: torch.Tensor, width: int, planned: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generic entity rows over a window: static context (the rows at step 0) and dynamic state (the ``planned``
    columns of every step; default: all of them).

    Args:
        observation: ``(B, T, N, width)`` normalised rows (padded rows are excluded by the mask).
    """
    _check_shapes(observation=(observation, ("B", "T", "N", width)))
    if not planned:
        return observation[:, 0], observation
    return observation[:, 0], observation[..., list(planned)]


def join_rows(reference: torch.Tensor, dynamic: torch.Tensor) -> torch.Tensor:
    """Write (predicted) dynamic features back into entity rows: the inverse of :func:`split_rows`.

    Each step's rows are copies of ``reference`` (static attributes, and the height of a planar state)
    with position and yaw from ``dynamic`` (a spatial state: also the height, and the agent's gripper
    opening and contact); sin/cos yaw are renormalised onto the unit circle and velocity is set to
    zero (not modelled). Padded rows (``present`` 0 in ``reference``) stay all zero.

    Args:
        reference: ``(B, N, ENTITY_DIM)`` rows of the same entities, e.g. the current observation.
        dynamic: ``(B, T, N, D)`` normalised dynamic features, ``D`` = ``DYNAMIC_DIM`` (planar) or
            ``SPATIAL_DYNAMIC_DIM`` (spatial).

    Returns:
        ``(B, T, N, ENTITY_DIM)`` rows in world units.
    """
    sizes = _check_shapes(reference=(reference, ("B", "N", ENTITY_DIM)), dynamic=(dynamic, ("B", "T", "N", "D")))
    if sizes["D"] not in STATES.values():
        raise ValueError(
            f"dynamic: expected {DYNAMIC_DIM} (planar) or {SPATIAL_DYNAMIC_DIM} (spatial) features, got {sizes['D']}"
        )
    rows = reference[:, None].expand(-1, dynamic.shape[1], -1, -1).clone()
    spatial = sizes["D"] == SPATIAL_DYNAMIC_DIM
    position = _XYZ if spatial else ENTITY_XY
    width = position.stop - position.start
    rows[..., position] = dynamic[..., :width] / POSITION_SCALE
    rows[..., _YAW] = F.normalize(dynamic[..., width : width + 2], dim=-1)
    if spatial:
        agent = rows[..., _AGENT : _AGENT + 1] > 0.5
        rows[..., AGENT_GRIPPER] = torch.where(agent, dynamic[..., width + 2 :], rows[..., AGENT_GRIPPER])
    rows[..., ENTITY_FIELDS["velocity"]] = 0.0
    return rows * (reference[:, None, :, ENTITY_PRESENT : ENTITY_PRESENT + 1] > 0.5)


def goal_features(desired_goal: torch.Tensor) -> torch.Tensor:
    """Normalised goal rows ``(B, M, GOAL_DIM)``: positions × 4, sizes × 25, the rest as is."""
    _check_shapes(desired_goal=(desired_goal, ("B", "M", GOAL_DIM)))
    return desired_goal * _GOAL_SCALE.to(desired_goal.device, desired_goal.dtype)


@dataclass
class DenoiserConfig:
    """Size of an :class:`EntityDenoiser` and the noise schedule it is trained with.

    Attributes:
        width: token width.
        heads: attention heads (``width`` must split evenly into them).
        blocks: transformer blocks.
        mlp_ratio: hidden width of the blocks' MLPs, as a multiple of ``width``.
        horizon: ``H``, actions per plan; a plan has ``H + 1`` states per entity.
        action_dim: ``A``, width of an action (actions lie in ``[-1, 1]``).
        diffusion_steps: ``T_train``, noise levels of the DDPM the model is trained on.
        noise_schedule: ``"cosine"`` (Nichol & Dhariwal) or ``"linear"`` betas.
        entity_dim: 0 (default): entity rows in the state layout, split into static attributes and
            dynamic state (:func:`split_rows`). ``D > 0``: *generic* entity rows of width ``D`` with no
            known layout, e.g. an encoder's entities from pixels (:mod:`ecrl.diffusion.pixels`): a
            row, normalised by the caller, is both the entity's dynamic state (all ``D`` features are
            planned) and, at step 0, its static context (:func:`generic_rows`).
        state: the dynamic state planned from state rows: ``"planar"`` (x, y, yaw: the push tasks)
            or ``"spatial"`` (x, y, z, yaw and the gripper: lifting and stacking, e.g. OGBench's
            cubes). Set by training from the dataset's env, like ``entity_dim`` from an encoder.
        planned: generic rows only: the columns planned as dynamic state (e.g. a particle's position),
            the whole row staying static context at step 0; empty (default): every column is planned.
            Set by training (``--plan-positions``).
        goal_dim: 0 (default): goal rows in the goal layout (``GOAL_DIM`` wide, normalised by
            :func:`goal_features`, padded rows masked by their present flag). ``D > 0``: *generic* goal
            rows of width ``D``, normalised by the caller and all real, e.g. an encoder's entities of
            goal images (:mod:`ecrl.diffusion.pixels`, ``goal_images``).
    """

    width: int = 32
    heads: int = 2
    blocks: int = 2
    mlp_ratio: int = 2
    horizon: int = 4
    action_dim: int = 2
    diffusion_steps: int = 100
    noise_schedule: str = "cosine"
    entity_dim: int = 0
    state: str = "planar"
    goal_dim: int = 0
    planned: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.planned = [int(c) for c in self.planned]  # a list: the kwargs a checkpoint's JSON gives back
        sizes = (self.width, self.heads, self.blocks, self.mlp_ratio, self.horizon, self.action_dim)
        if min(sizes) < 1 or self.diffusion_steps < 2:
            raise ValueError(f"invalid denoiser size {asdict(self)}")
        if self.width % 2 or self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be even and divisible by heads ({self.heads})")
        if self.noise_schedule not in ("cosine", "linear"):
            raise ValueError(f"noise_schedule must be 'cosine' or 'linear', got {self.noise_schedule!r}")
        if self.entity_dim < 0:
            raise ValueError(f"entity_dim must be 0 (state rows) or a row width > 0, got {self.entity_dim}")
        if self.state not in STATES:
            raise ValueError(f"state must be one of {list(STATES)}, got {self.state!r}")
        if self.goal_dim < 0:
            raise ValueError(f"goal_dim must be 0 (goal rows) or a row width > 0, got {self.goal_dim}")
        if self.planned and (
            not self.entity_dim
            or len(set(self.planned)) != len(self.planned)
            or not all(0 <= c < self.entity_dim for c in self.planned)
        ):
            raise ValueError(
                f"planned must name distinct columns of generic rows (entity_dim {self.entity_dim}), got {self.planned}"
            )

    @property
    def static_dim(self) -> int:
        """Width of an entity's static features: ``STATIC_DIM``, or ``entity_dim`` for generic rows."""
        return self.entity_dim or STATIC_DIM

    @property
    def dynamic_dim(self) -> int:
        """Width of an entity's planned state: ``STATES[state]``, or for generic rows ``entity_dim`` (or the number of
        ``planned`` columns)."""
        return len(self.planned) or self.entity_dim or STATES[self.state]

    def split(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, T, N, row width)`` rows → ``static (B, N, static_dim)``, ``dynamic (B, T, N, dynamic_dim)``."""
        if self.entity_dim:
            return generic_rows(observation, self.entity_dim, self.planned)
        return split_rows(observation, self.state)

    @property
    def goal_row_dim(self) -> int:
        """Width of the goal rows the denoiser's callers hand in: ``GOAL_DIM`` or ``goal_dim``."""
        return self.goal_dim or GOAL_DIM

    @property
    def row_dim(self) -> int:
        """Width of the entity rows the denoiser's callers hand in: ``ENTITY_DIM`` or ``entity_dim``."""
        return self.entity_dim or ENTITY_DIM


def sinusoid(x: torch.Tensor, width: int, max_period: float = 10_000.0) -> torch.Tensor:
    """Sinusoidal features ``(…, width)`` of positions ``x (…)``, frequencies geometric from 1 to ``1 / max_period``."""
    half = width // 2
    freqs = torch.exp(-math.log(max_period) / half * torch.arange(half, device=x.device, dtype=torch.float32))
    angles = x[..., None].float() * freqs
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class AdaLNBlock(nn.Module):
    """Pre-norm transformer block modulated by a conditioning vector (DiT's adaLN-Zero).

    Each norm's scale and shift, and a gate on each residual branch, come from the conditioning;
    they start at zero, so a fresh block is the identity.
    """

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm_attention = nn.LayerNorm(width, elementwise_affine=False)
        self.attention = MultiHeadAttention(width, heads)
        self.norm_mlp = nn.LayerNorm(width, elementwise_affine=False)
        self.mlp = mlp([width, mlp_ratio * width, width])
        self.modulation = nn.Linear(width, 6 * width)
        nn.init.zeros_(self.modulation.weight)
        nn.init.zeros_(self.modulation.bias)

    def forward(self, x: torch.Tensor, condition: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``x: (B, L, C)``, ``condition: (B, C)``, ``mask: (B, L)`` bool over keys (None: all) → ``(B, L, C)``."""
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.modulation(condition)[:, None].chunk(6, dim=-1)
        h = torch.addcmul(shift_a, self.norm_attention(x), 1 + scale_a)
        x = torch.addcmul(x, gate_a, self.attention(h, h, mask))
        h = torch.addcmul(shift_m, self.norm_mlp(x), 1 + scale_m)
        return torch.addcmul(x, gate_m, self.mlp(h))


class EntityDenoiser(nn.Module):
    """Predict a clean plan (entity states over time and actions) from a noisy one.

    Tokens: one per (step, entity), the embedded dynamic state plus an embedding of the entity's
    static attributes; one per action; one per goal row. A step embedding (learned, initialised
    sinusoidal) is shared by every entity token of a step and that step's action token; there is no
    embedding of the entity index, so the model is permutation-equivariant over entities and runs on
    any number of them. Each token kind has its own embedding MLP, whose bias acts as the kind's type
    embedding.

    Design choices:

    - **Goals as tokens in the same sequence**, attended by (and attending to) every other token,
      rather than cross-attention: a single attention per block costs less per call on a CPU than
      self- plus cross-attention, and goal tokens get contextualised by the objects (which goal is
      whose is a matching problem over attributes; both directions help).
    - **Full attention** over all ``N (H + 1) + H + M`` tokens (≈ 90 for N = 4, H = 16; ≈ 450 at
      N = 13, H = 32): at these sizes one attention is cheaper than factorised entity/time attention
      (twice the ops, and small ops are what cost on a CPU) and lets every entity-step see every other.
    - **x₀-prediction**: few-step DDIM sampling (5–10 steps) works from the model's estimate of the
      clean plan; predicting x₀ makes that estimate direct (no division by small ``√ᾱ`` at high
      noise) and lets the sampler clamp actions to ``[-1, 1]``. EC-Diffuser predicts x₀ as well.
    - **Diffusion time by adaLN-Zero** in every block and before the output heads.
    - **Current state by inpainting** (the sampler and the loss clamp the step-0 states to the
      observation); **goal by conditioning** (goal tokens). Inpainting goal positions at the last
      step would force a plan to reach the goal within ``H`` steps, which a short horizon often cannot;
      the sampler still accepts any extra inpainted entries (see :func:`ecrl.diffusion.sample`).

    - **Each entity reads its goal first**: an entity token made of its static
      attributes and its current (step-0, always clean) state cross-attends to the goal tokens once,
      and the result replaces the plain attribute embedding in all of that entity's step tokens.
      Without it the goal reaches an entity's future states only through the shared self-attention,
      and on a CPU budget (~10k updates) a model learnt to push objects but hardly to push them
      towards their goals (its plans barely changed when the goal moved by 20 cm).

    Padded entities (``mask`` False) and invalid steps (``valid`` False) are masked out as attention
    keys; padded entities' outputs are zero.
    """

    @classmethod
    def from_fields(cls, **fields: Any) -> EntityDenoiser:
        """A denoiser whose config has ``fields`` (others default): the registered builder ``entity_denoiser``."""
        return cls(denoiser_config(fields))

    def __init__(self, config: DenoiserConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or DenoiserConfig()
        w = config.width
        self.embed_state = mlp([config.dynamic_dim, w, w])
        self.embed_static = mlp([config.static_dim, w, w])
        self.embed_action = mlp([config.action_dim, w, w])
        self.embed_goal = mlp([config.goal_row_dim, w, w])
        self.entity_goals = AttentionBlock(w, config.heads, config.mlp_ratio)
        # Stands in for every goal row when the goal is dropped (classifier-free guidance).
        self.null_goal = nn.Parameter(torch.zeros(w))
        # Learned, from a sinusoidal start: distinct steps from the first update, free to adapt.
        self.step_embedding = nn.Parameter(sinusoid(torch.arange(config.horizon + 1), w, max_period=100.0))
        self.embed_time = mlp([w, w, w], activation=nn.SiLU)
        self.blocks = nn.ModuleList(AdaLNBlock(w, config.heads, config.mlp_ratio) for _ in range(config.blocks))
        self.norm_out = nn.LayerNorm(w, elementwise_affine=False)
        self.modulation_out = nn.Linear(w, 2 * w)
        nn.init.zeros_(self.modulation_out.weight)
        nn.init.zeros_(self.modulation_out.bias)
        self.head_state = nn.Linear(w, config.dynamic_dim)
        self.head_action = nn.Linear(w, config.action_dim)

    def forward(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        t: torch.Tensor | int,
        static: torch.Tensor,
        goals: torch.Tensor,
        mask: torch.Tensor,
        goal_mask: torch.Tensor,
        valid: torch.Tensor | None = None,
        drop_goal: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Predict the clean plan.

        Args:
            states: ``(B, H + 1, N, DYNAMIC_DIM)`` noisy normalised dynamic states.
            actions: ``(B, H, A)`` noisy actions.
            t: ``(B,)`` diffusion steps in ``[0, diffusion_steps)``, or one step for the whole batch.
            static: ``(B, N, STATIC_DIM)`` normalised static attributes (:func:`split_rows`).
            goals: ``(B, M, GOAL_DIM)`` normalised goal rows (:func:`goal_features`).
            mask: ``(B, N)`` bool, True for real entities.
            goal_mask: ``(B, M)`` bool, True for real goals.
            valid: ``(B, H + 1)`` bool, False for steps past the end of an episode (default: all
                valid); action ``k`` counts as valid where step ``k + 1`` is.
            drop_goal: ``(B,)`` bool, True where the model is to plan without the goal: its goal
                tokens are replaced by one learned null token (for classifier-free guidance).

        Returns:
            ``states (B, H + 1, N, DYNAMIC_DIM)`` (zero for padded entities) and ``actions (B, H, A)``.
        """
        config = self.config
        steps, horizon = config.horizon + 1, config.horizon
        specs = {
            "states": (states, ("B", steps, "N", config.dynamic_dim)),
            "actions": (actions, ("B", horizon, config.action_dim)),
            "static": (static, ("B", "N", config.static_dim)),
            "goals": (goals, ("B", "M", config.goal_row_dim)),
            "mask": (mask, ("B", "N")),
            "goal_mask": (goal_mask, ("B", "M")),
        }
        if valid is not None:
            specs["valid"] = (valid, ("B", steps))
        batch = _check_shapes(**specs)["B"]
        _check_bool(mask=mask, goal_mask=goal_mask, **({} if valid is None else {"valid": valid}))
        t = torch.as_tensor(t, device=states.device)
        if t.ndim == 0:
            t = t.expand(batch)
        _check_shapes(t=(t, (batch,)))

        step = self.step_embedding
        state_embedding, goal_tokens = self.embed_state(states), self.embed_goal(goals)
        if drop_goal is not None:
            _check_shapes(drop_goal=(drop_goal, (batch,)))
            _check_bool(drop_goal=drop_goal)
            dropped = drop_goal[:, None]
            goal_tokens = torch.where(dropped[..., None], self.null_goal.to(goal_tokens.dtype), goal_tokens)
            first = torch.zeros_like(goal_mask)
            first[:, 0] = True
            goal_mask = torch.where(dropped, first, goal_mask)
        # Each entity, as it is now, reads the goals.
        entity = self.entity_goals(self.embed_static(static) + state_embedding[:, 0], goal_tokens, goal_mask)
        entity_tokens = state_embedding + entity[:, None] + step[:, None]
        x = torch.cat(
            [
                rearrange(entity_tokens, "b t n c -> b (t n) c"),
                self.embed_action(actions) + step[:-1],
                goal_tokens,
            ],
            dim=1,
        )
        entity_keys = mask[:, None].expand(-1, steps, -1) if valid is None else mask[:, None] & valid[..., None]
        action_keys = mask.new_ones(batch, horizon) if valid is None else valid[:, 1:]
        keys = torch.cat([rearrange(entity_keys, "b t n -> b (t n)"), action_keys, goal_mask], dim=1)
        # No mask lets attention take its fastest kernel. Finding out reads the mask on the host: free on the
        # CPU, but a wait for the device on every call on CUDA (and a graph break when compiled), so not there.
        if keys.device.type == "cpu" and not torch.compiler.is_compiling() and bool(keys.all()):
            keys = None
        condition = F.silu(self.embed_time(sinusoid(t, config.width)))
        for block in self.blocks:
            x = block(x, condition, keys)
        shift, scale = self.modulation_out(condition)[:, None].chunk(2, dim=-1)
        x = torch.addcmul(shift, self.norm_out(x), 1 + scale)
        n_state = entity_tokens.shape[1] * entity_tokens.shape[2]
        out_states = rearrange(self.head_state(x[:, :n_state]), "b (t n) d -> b t n d", t=steps)
        out_actions = self.head_action(x[:, n_state : n_state + horizon])
        return out_states * mask[:, None, :, None], out_actions


register_builder("entity_denoiser")(EntityDenoiser.from_fields)


def denoiser_config(config: DenoiserConfig | Mapping[str, Any]) -> DenoiserConfig:
    """``config``, or the :class:`DenoiserConfig` with its fields (as a checkpoint's kwargs hold it).

    Raises:
        ValueError: a field that :class:`DenoiserConfig` does not have.
    """
    if isinstance(config, DenoiserConfig):
        return config
    return config_from(DenoiserConfig, drop_retired(DenoiserConfig, config), "denoisers")


def _v1(config: dict[str, Any]) -> dict[str, Any]:
    """Version 1 stored the config's fields as ``config`` (its builder was implied)."""
    return {**config, "builder": "entity_denoiser", "kwargs": config.get("config")}


DENOISER = CheckpointFormat("ecrl.denoiser", 2, "denoiser", "an ecrl denoiser", legacy={1: _v1})
"""Denoiser checkpoints: ``denoiser.json`` + ``denoiser.safetensors``."""
WEIGHTS, CONFIG = DENOISER.weights, DENOISER.config


def save_denoiser(model: EntityDenoiser, path: str | Path) -> Path:
    """Write ``denoiser.safetensors`` + ``denoiser.json`` into directory ``path``; returns it."""
    return checkpoint.save(path, model, DENOISER, "entity_denoiser", asdict(model.config))


def load_denoiser(path: str | Path, device: str | torch.device = "cpu") -> EntityDenoiser:
    """Load a denoiser saved by :func:`save_denoiser` (no pickle involved), in eval mode.

    Args:
        path: the checkpoint directory, or one of its two files.
        device: where the weights go.

    Raises:
        CheckpointError: (a ``ValueError``) for a missing, corrupt or mismatched checkpoint.
    """
    model, _ = checkpoint.load(path, DENOISER, device)
    if not isinstance(model, EntityDenoiser):
        raise checkpoint.CheckpointError(f"{path} holds a {type(model).__name__}, not a denoiser")
    return model
