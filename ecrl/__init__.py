"""ecrl: embodied, multi-object, compositional reinforcement learning.

Kept light on import: ``import ecrl.envs`` must not pull in torch.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``ecrl.load`` without importing torch at ``import ecrl`` time.
    if name == "load":
        from ecrl.policy import load

        return load
    raise AttributeError(f"module 'ecrl' has no attribute {name!r}")
