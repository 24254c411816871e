"""ecrl: embodied, multi-object, compositional reinforcement learning.

Kept light on import: ``import ecrl.envs`` must not pull in torch.
"""

__version__ = "0.1.0"
