"""The push expert without memory, and ``ecrl-collect`` with it (session 15: issue 23's probes).

The library's push expert keeps its object until it is placed and sets a stalled object aside, so its
action depends on its own state as well as on the observation. :class:`MarkovExpert` forgets that state
before every action: each step it chooses the unplaced object nearest the pusher anew, and its action is
a function of the observation alone.

Run as a script, it is ``ecrl-collect`` (same arguments) with this expert in place of the pusher's::

    python results/rl_push3/markov_expert.py --out data/push3-cs-markov --n-objects 3 --split colour_shape --episodes 2000
"""

from __future__ import annotations

import sys

import numpy as np

import ecrl.rollout
from ecrl.envs.expert import ScriptedExpert


class MarkovExpert(ScriptedExpert):
    """The push expert without memory: every step it chooses the unplaced object nearest the pusher anew."""

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        self.reset()
        return super().act(obs)


def use_markov_expert() -> None:
    """From now on, :class:`ecrl.rollout.ExpertPolicy` drives the pusher with :class:`MarkovExpert`."""
    ecrl.rollout.EXPERTS["pusher"] = MarkovExpert


if __name__ == "__main__":
    from ecrl.scripts.collect import main

    use_markov_expert()
    main(sys.argv[1:])
