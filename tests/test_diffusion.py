"""Entity-centric diffusion: features, denoiser symmetries, DDPM loss, DDIM sampling, checkpoints."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from ecrl.checkpoint import CheckpointError
from ecrl.diffusion import (
    DYNAMIC_DIM,
    EMA,
    STATIC_DIM,
    DenoiserConfig,
    EntityDenoiser,
    NoiseSchedule,
    goal_features,
    join_rows,
    load_denoiser,
    loss,
    sample,
    save_denoiser,
    split_rows,
)
from ecrl.entities import ENTITY_DIM, ENTITY_FIELDS, GOAL_DIM, GOAL_FIELDS

TINY = DenoiserConfig(width=32, heads=2, blocks=2, horizon=6)
F = ENTITY_FIELDS


def _randomised(config: DenoiserConfig = TINY, seed: int = 0) -> EntityDenoiser:
    """A denoiser with every weight random: adaLN-Zero's zero gates would hide what the blocks do."""
    torch.manual_seed(seed)
    model = EntityDenoiser(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model


def _rows(batch: int, steps: int, n_objects: int, n_max: int | None = None, seed: int = 0) -> torch.Tensor:
    """``(B, T, 1 + n_max, ENTITY_DIM)`` rows: an agent and ``n_objects`` objects, zero rows after them."""
    g = torch.Generator().manual_seed(seed)
    n = 1 + n_objects
    rows = torch.zeros(batch, steps, 1 + (n_max if n_max is not None else n_objects), ENTITY_DIM)
    rows[:, :, :n, F["present"]] = 1.0
    rows[:, :, 0, F["is_agent"]] = 1.0
    rows[:, :, 1:n, F["is_object"]] = 1.0
    rows[:, :, :n, F["position"]] = (torch.rand(batch, steps, n, 3, generator=g) - 0.5) * 0.6
    yaw = torch.rand(batch, steps, n, generator=g) * 6.28
    rows[:, :, :n, F["yaw"]] = torch.stack([yaw.sin(), yaw.cos()], -1)
    rows[:, :, :n, F["velocity"]] = torch.randn(batch, steps, n, 3, generator=g) * 0.1
    attributes = slice(F["size"].start, F["colour"].stop)
    width = attributes.stop - attributes.start
    rows[:, :, :n, attributes] = torch.rand(batch, 1, n, width, generator=g).expand(-1, steps, -1, -1)
    return rows


def _goals(batch: int, m: int, m_max: int | None = None, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    goals = torch.zeros(batch, m_max if m_max is not None else m, GOAL_DIM)
    goals[:, :m] = torch.rand(batch, m, GOAL_DIM, generator=g)
    goals[:, :m, GOAL_FIELDS["present"]] = 1.0
    return goals


def _inputs(config: DenoiserConfig, batch: int = 2, n_objects: int = 3, m: int = 3, seed: int = 0) -> dict:
    """Noisy model inputs for ``n_objects`` objects and ``m`` goals."""
    g = torch.Generator().manual_seed(seed)
    static, _ = split_rows(_rows(batch, 1, n_objects, seed=seed))
    steps = config.horizon + 1
    return {
        "states": torch.randn(batch, steps, 1 + n_objects, DYNAMIC_DIM, generator=g),
        "actions": torch.randn(batch, config.horizon, config.action_dim, generator=g),
        "t": torch.randint(0, config.diffusion_steps, (batch,), generator=g),
        "static": static,
        "goals": goal_features(_goals(batch, m, seed=seed + 1)),
        "mask": torch.ones(batch, 1 + n_objects, dtype=torch.bool),
        "goal_mask": torch.ones(batch, m, dtype=torch.bool),
    }


def test_split_and_join_rows_round_trip():
    rows = _rows(2, 5, 3, n_max=5)
    static, dynamic = split_rows(rows)
    assert static.shape == (2, 6, STATIC_DIM) and dynamic.shape == (2, 5, 6, DYNAMIC_DIM)
    assert dynamic[..., :2].abs().max() <= 1.2  # ±0.3 m × 4
    assert torch.equal(static[:, 4:], torch.zeros_like(static[:, 4:]))
    back = join_rows(rows[:, 0], dynamic)
    for field in ("present", "is_agent", "is_object", "size", "shape", "colour"):
        torch.testing.assert_close(back[..., F[field]], rows[:, :1, :, F[field]].expand_as(back[..., F[field]]))
    xy = slice(F["position"].start, F["position"].start + 2)
    torch.testing.assert_close(back[..., xy], rows[..., xy])
    torch.testing.assert_close(back[..., F["yaw"]], rows[..., F["yaw"]])
    assert back[..., F["velocity"]].abs().max() == 0  # not modelled
    assert back[:, :, 4:].abs().max() == 0  # padded rows stay all zero


def test_denoiser_is_permutation_equivariant_over_entities_and_invariant_over_goals():
    model = _randomised()
    x = _inputs(TINY, n_objects=4, m=4)
    states, actions = model(**x)
    perm, goal_perm = torch.tensor([3, 0, 4, 2, 1]), torch.tensor([2, 3, 1, 0])
    permuted = dict(x, states=x["states"][:, :, perm], static=x["static"][:, perm], goals=x["goals"][:, goal_perm])
    p_states, p_actions = model(**permuted)
    torch.testing.assert_close(p_states, states[:, :, perm], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p_actions, actions, atol=1e-5, rtol=1e-5)


def test_padded_entities_and_goals_change_nothing():
    model = _randomised()
    x = _inputs(TINY, n_objects=2, m=2)
    states, actions = model(**x)
    batch, steps = x["states"].shape[:2]
    garbage = lambda *shape: torch.randn(*shape) * 100  # noqa: E731 - padded rows may hold anything
    padded = dict(
        x,
        states=torch.cat([x["states"], garbage(batch, steps, 3, DYNAMIC_DIM)], 2),
        static=torch.cat([x["static"], torch.zeros(batch, 3, STATIC_DIM)], 1),
        mask=torch.cat([x["mask"], torch.zeros(batch, 3, dtype=torch.bool)], 1),
        goals=torch.cat([x["goals"], garbage(batch, 2, GOAL_DIM)], 1),
        goal_mask=torch.cat([x["goal_mask"], torch.zeros(batch, 2, dtype=torch.bool)], 1),
    )
    p_states, p_actions = model(**padded)
    torch.testing.assert_close(p_states[:, :, :3], states, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p_actions, actions, atol=1e-5, rtol=1e-5)
    assert p_states[:, :, 3:].abs().max() == 0  # padded entities' outputs are zero


def test_sample_runs_on_any_number_of_entities():
    model = _randomised()
    for n_entities in range(1, 13):
        plan = sample(model, _rows(2, 1, n_entities - 1)[:, 0], _goals(2, max(n_entities - 1, 1)), steps=2)
        assert plan.actions.shape == (2, TINY.horizon, TINY.action_dim)
        assert plan.states.shape == (2, TINY.horizon + 1, n_entities, DYNAMIC_DIM)
        assert plan.rows.shape == (2, TINY.horizon + 1, n_entities, ENTITY_DIM)
        assert plan.actions.abs().max() <= 1.0 and torch.isfinite(plan.states).all()


def test_inpainted_entries_are_honoured_exactly():
    model = _randomised()
    obs = _rows(2, 1, 3, n_max=5)[:, 0]
    known = torch.randn(2, TINY.horizon + 1, 6, DYNAMIC_DIM)
    known_mask = torch.zeros(2, TINY.horizon + 1, 6, DYNAMIC_DIM, dtype=torch.bool)
    known_mask[:, -1, 1:4, :2] = True  # final positions of the three objects
    known_mask[0, 3, 0] = True  # and the whole agent state at step 3 in the first plan
    plan = sample(model, obs, _goals(2, 3), steps=5, known_states=known, known_mask=known_mask)
    _, state0 = split_rows(obs[:, None])
    assert torch.equal(plan.states[:, 0], state0[:, 0])
    assert torch.equal(plan.states[known_mask], known[known_mask])
    assert plan.states[:, :, 4:].abs().max() == 0  # padded entities
    expected = obs.clone()
    expected[..., F["velocity"]] = 0.0  # velocity is not modelled
    torch.testing.assert_close(plan.rows[:, 0], expected)


def test_ddim_is_deterministic_for_eta_zero():
    model = _randomised()
    obs, goals = _rows(1, 1, 2)[:, 0], _goals(1, 2)
    draw = lambda seed, eta: (
        sample(  # noqa: E731
            model, obs, goals, steps=4, eta=eta, generator=torch.Generator().manual_seed(seed)
        ).states  # not the actions: a random model's actions can all sit at the clamp
    )
    assert torch.equal(draw(0, 0.0), draw(0, 0.0))
    assert not torch.equal(draw(0, 0.0), draw(0, 1.0))
    assert not torch.equal(draw(0, 0.0), draw(1, 0.0))


def _straight_lines(batch: int, horizon: int, n_objects: int = 2, seed: int = 0) -> dict:
    """Windows where the agent moves 5 cm × a constant action per step and objects stay put."""
    g = torch.Generator().manual_seed(seed)
    rows = _rows(batch, 1, n_objects, seed=seed).expand(-1, horizon + 1, -1, -1).clone()
    rows[..., F["velocity"]] = 0.0
    action = torch.rand(batch, 1, 2, generator=g) * 2 - 1
    xy = slice(F["position"].start, F["position"].start + 2)
    start = (torch.rand(batch, 1, 2, generator=g) - 0.5) * 0.2
    rows[:, :, 0, xy] = start + 0.05 * action * torch.arange(horizon + 1)[None, :, None]
    return {"observation": rows, "action": action.expand(-1, horizon, -1), "desired_goal": _goals(batch, n_objects)}


def test_loss_decreases_on_straight_line_motions():
    torch.manual_seed(0)
    model = EntityDenoiser(TINY)
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    held_out = _straight_lines(64, TINY.horizon, seed=99)

    def evaluate() -> float:
        with torch.no_grad():
            return loss(model, held_out, torch.Generator().manual_seed(0)).total.item()

    before, g = evaluate(), torch.Generator().manual_seed(1)
    for i in range(150):
        terms = loss(model, _straight_lines(32, TINY.horizon, seed=i), g)
        optimiser.zero_grad()
        terms.total.backward()
        optimiser.step()
    after = evaluate()
    assert after < 0.5 * before, (before, after)


def _towards_goal(batch: int, horizon: int, seed: int = 0) -> dict:
    """Windows where the agent moves in a straight line onto the (single) goal's position in ``horizon`` steps."""
    data = _straight_lines(batch, horizon, seed=seed)
    g = torch.Generator().manual_seed(seed + 12345)
    start, target = ((torch.rand(batch, 1, 2, generator=g) - 0.5) * 0.3 for _ in range(2))
    action = (target - start) / (0.05 * horizon)
    xy = slice(F["position"].start, F["position"].start + 2)
    data["observation"][:, :, 0, xy] = start + 0.05 * action * torch.arange(horizon + 1)[None, :, None]
    data["action"] = action.expand(-1, horizon, -1)
    data["desired_goal"] = _goals(batch, 1, seed=seed)
    data["desired_goal"][:, 0, GOAL_FIELDS["position"].start : GOAL_FIELDS["position"].start + 2] = target[:, 0]
    return data


@pytest.mark.slow
def test_sampled_plans_head_for_the_goal_after_training():
    """The plan is fully determined by the current state and the goal: sampling must recover it."""
    torch.manual_seed(0)
    model = EntityDenoiser(TINY)
    optimiser = torch.optim.Adam(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(1)
    for i in range(3000):
        terms = loss(model, _towards_goal(32, TINY.horizon, seed=i), g, action_weight=10.0)
        optimiser.zero_grad()
        terms.total.backward()
        optimiser.step()
    held_out = _towards_goal(64, TINY.horizon, seed=10_000)
    plan = sample(model.eval(), held_out["observation"][:, 0], held_out["desired_goal"], steps=5)
    error = (plan.actions - held_out["action"]).square().mean()
    assert error < 0.2 * held_out["action"].var(), error


def test_loss_ignores_padded_entities_and_invalid_steps():
    model = _randomised()
    batch = _straight_lines(4, TINY.horizon)
    batch["observation"] = torch.cat([batch["observation"], torch.zeros(4, TINY.horizon + 1, 2, ENTITY_DIM)], 2)
    batch["valid"] = torch.ones(4, TINY.horizon, dtype=torch.bool)  # per action, as the dataset gives it
    batch["valid"][:, 3:] = False
    reference = loss(model, batch, torch.Generator().manual_seed(0))
    changed = {k: v.clone() for k, v in batch.items()}
    changed["observation"][:, 4:, :, F["position"]] += 1.0  # past the end of the episode
    changed["action"][:, 3:] = -changed["action"][:, 3:]  # action 3 leads to step 4: invalid
    changed["observation"][:, :, 3:, F["position"]] = 5.0  # padded entities (present stays 0)
    other = loss(model, changed, torch.Generator().manual_seed(0))
    torch.testing.assert_close(other.total, reference.total)
    assert reference.states > 0 and reference.actions > 0


def test_save_load_round_trip(tmp_path):
    model = _randomised(DenoiserConfig(width=16, heads=2, blocks=1, horizon=4, noise_schedule="linear"))
    path = save_denoiser(model, tmp_path / "ckpt")
    loaded = load_denoiser(path / "denoiser.json")
    assert loaded.config == model.config
    x = _inputs(model.config)
    for a, b in zip(model(**x), loaded(**x), strict=True):
        assert torch.equal(a, b)


def test_load_rejects_bad_checkpoints(tmp_path):
    path = save_denoiser(EntityDenoiser(TINY), tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match="is not an ecrl denoiser checkpoint"):
        load_denoiser(tmp_path / "nowhere")
    config = json.loads((path / "denoiser.json").read_text())
    (path / "denoiser.json").write_text(json.dumps({**config, "format": "ecrl.policy"}))
    with pytest.raises(CheckpointError, match="format"):
        load_denoiser(path)
    (path / "denoiser.json").write_text(json.dumps({**config, "kwargs": {**config["kwargs"], "width": 64}}))
    with pytest.raises(CheckpointError, match="does not fit"):
        load_denoiser(path)
    (path / "denoiser.json").write_text(json.dumps(config))
    (path / "denoiser.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_denoiser(path)
    (path / "denoiser.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_denoiser(path)


def test_bad_shapes_raise_value_errors_naming_both_shapes():
    model = EntityDenoiser(TINY)
    x = _inputs(TINY, batch=2, n_objects=3)
    with pytest.raises(ValueError, match=r"states: expected shape \(B, 7, N, 4\), got \(2, 6, 4, 4\)"):
        model(**dict(x, states=x["states"][:, :6]))
    with pytest.raises(ValueError, match=r"static: expected shape \(B, N, 12\) with B=2, N=4, got \(2, 3, 12\)"):
        model(**dict(x, static=x["static"][:, :3]))
    with pytest.raises(ValueError, match="mask: expected a bool tensor"):
        model(**dict(x, mask=x["mask"].float()))
    batch = _straight_lines(2, TINY.horizon)
    with pytest.raises(ValueError, match=r"action: expected shape \(B, 6, 2\) with B=2, got \(2, 5, 2\)"):
        loss(model, dict(batch, action=batch["action"][:, :5]))
    with pytest.raises(
        ValueError, match=rf"desired_goal: expected shape \(B, M, {GOAL_DIM}\) with B=2, got \(2, 2, 5\)"
    ):
        sample(model, batch["observation"][:, 0], batch["desired_goal"][..., :5])
    with pytest.raises(
        ValueError, match=rf"observation: expected shape \(B, T, N, {ENTITY_DIM}\), got \(2, 3, {ENTITY_DIM}\)"
    ):
        split_rows(batch["observation"][:, 0])
    with pytest.raises(ValueError, match="divisible by heads"):
        DenoiserConfig(width=30, heads=4)


def test_noise_schedules_reach_pure_noise_and_trailing_steps():
    for kind in ("cosine", "linear"):
        schedule = NoiseSchedule(100, kind)
        a = schedule.alphas_cumprod
        assert (a[1:] < a[:-1]).all() and a[0] > 0.99 and a[-1] < 1e-3
    assert NoiseSchedule(100).sampling_steps(5) == [99, 79, 59, 39, 19]
    with pytest.raises(ValueError, match="sampling steps"):
        NoiseSchedule(100).sampling_steps(0)


def test_ema_tracks_weights_and_round_trips_through_safetensors(tmp_path):
    model = EntityDenoiser(TINY)
    ema = EMA(model, decay=0.9)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    for _ in range(50):
        ema.update(model)
    first, avg = next(model.parameters()), next(ema.model.parameters())
    assert torch.allclose(avg, first, atol=1e-2) and not avg.requires_grad
    save_file(ema.state_dict(), str(tmp_path / "ema.safetensors"))
    restored = EMA(EntityDenoiser(TINY), decay=0.9)
    restored.load_state_dict(load_file(str(tmp_path / "ema.safetensors")))
    assert restored.updates == 50 and torch.equal(next(restored.model.parameters()), avg)


def test_goal_dropout_and_guidance():
    """A dropped goal is the null token whatever the goal rows say; guidance 1 is the conditional model."""
    model = _randomised()
    obs, goals = _rows(2, 1, 2)[:, 0], _goals(2, 2)
    states, actions = torch.randn(2, model.config.horizon + 1, 3, 4), torch.randn(2, model.config.horizon, 2)
    static = split_rows(obs[:, None])[0]
    mask, goal_mask = torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool)
    drop = torch.tensor([True, False])
    run = lambda g: model(states, actions, 5, static, goal_features(g), mask, goal_mask, None, drop)  # noqa: E731
    (_, a1), (_, a2) = run(goals), run(goals + torch.randn_like(goals))
    torch.testing.assert_close(a1[0], a2[0])  # the dropped sample ignores its goals
    assert not torch.allclose(a1[1], a2[1])  # the other one does not
    plain = sample(model, obs, goals, steps=3, generator=torch.Generator().manual_seed(0))
    guided = sample(model, obs, goals, steps=3, generator=torch.Generator().manual_seed(0), guidance=1.0)
    torch.testing.assert_close(plain.states, guided.states)
    strong = sample(model, obs, goals, steps=3, generator=torch.Generator().manual_seed(0), guidance=3.0)
    assert not torch.allclose(plain.states, strong.states)
