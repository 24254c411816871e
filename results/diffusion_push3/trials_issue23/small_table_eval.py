"""``ecrl-eval`` with the push env on a table of side ``$TABLE`` (m)."""

import os
import sys

import gymnasium as gym

from ecrl.scripts.eval import main

TABLE = float(os.environ["TABLE"])
_make = gym.make


def make(env_id, *args, **kwargs):
    if "Push" in str(env_id):
        kwargs["table_size"] = TABLE
    return _make(env_id, *args, **kwargs)


if __name__ == "__main__":
    gym.make = make  # ecrl.evaluation calls gym.make at run time
    main(sys.argv[1:])
