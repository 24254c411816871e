"""Push demonstrations on a smaller table (denser scenes): ``ecrl-collect`` with ``table_size=$TABLE`` (m) in its env."""

import os
import sys

import ecrl.collect_batches as collect_batches
from ecrl.scripts.collect import main

TABLE = float(os.environ["TABLE"])
_env_spec = collect_batches.env_spec


def env_spec(config, n, part):
    env_id, kwargs = _env_spec(config, n, part)
    return env_id, {**kwargs, "table_size": TABLE}


if __name__ == "__main__":
    collect_batches.env_spec = env_spec
    main(sys.argv[1:])
