"""What the command-line entry points share: their config out of the parsed options, and clean errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ["cli_errors", "config_of", "on_command_line", "training_config_of"]

T = TypeVar("T")


def config_of(args: Any, cls: type[T]) -> T:
    """The ``cls`` part of ``args``: a command line's options dataclass that extends the config ``cls``
    with options of its own (``--resume``, ``--out``, ...)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def training_config_of(args: Any, cls: type[T], argv: Sequence[str]) -> T:
    """:func:`config_of` for a training command with ``--resume``: there, a run keeps its own ``steps``
    unless ``--steps`` is on the command line (``argv``). The parser fills an absent ``--steps`` with
    the config's default, which a resumed run would otherwise take as a request to extend it (a run
    of 80k steps resumed without ``--steps`` went on to the 120k default, with its learning-rate
    schedule stretched to match)."""
    config = config_of(args, cls)
    if getattr(args, "resume", None) is not None and not on_command_line(argv, "--steps"):
        config.steps = 1  # resume_config keeps the larger of the run's steps and this: the run's own
    return config


def on_command_line(argv: Sequence[str], flag: str) -> bool:
    """Whether the option ``flag`` (``--steps``) was given in ``argv``, as ``--steps 5`` or ``--steps=5``."""
    return any(a == flag or a.startswith(flag + "=") for a in argv)


@contextmanager
def cli_errors(prog: str, errors: tuple[type[BaseException], ...] = (ValueError,)) -> Iterator[None]:
    """Turn ``errors`` (bad input) raised inside the block into ``<prog>: error: <message>`` on stderr and exit status 2."""
    try:
        yield
    except errors as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from e
