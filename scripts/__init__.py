"""Command-line entry points (thin wrappers over the library).

Every entry point is a module of this package, so this runs before any of them imports mujoco: the one
place ``MUJOCO_GL`` is set. Headless machines have no display for mujoco's default (GLFW) backend; a
value already in the environment (``osmesa``, ``glfw``) wins.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
