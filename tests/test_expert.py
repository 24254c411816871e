"""The scripted expert solves small tasks of every goal kind (it is the data source and the ceiling)."""

import pytest
from push_helpers import expert_rollout

CASES = [("positions", 1), ("positions", 2), ("positions", 3), ("adjacent", 2), ("sort", 2), ("ordered", 2)]


@pytest.mark.parametrize(("goal", "n"), CASES, ids=[f"{g}-{n}" for g, n in CASES])
def test_expert_succeeds_before_truncation(make, goal, n):
    env = make("ecrl/Push-v0", n_objects=n, goal=goal)
    for seed in range(3):
        steps = expert_rollout(env, seed)
        *_, info = steps[-1]
        assert info["is_success"], f"seed {seed}: {info} after {len(steps) - 1} steps"
        assert info["fraction_placed"] == 1.0
        assert len(steps) - 1 < env.unwrapped.spec_.max_steps
