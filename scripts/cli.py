"""What the command-line entry points share: their config out of the parsed options, and clean errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ["cli_errors", "config_of"]

T = TypeVar("T")


def config_of(args: Any, cls: type[T]) -> T:
    """The ``cls`` part of ``args``: a command line's options dataclass that extends the config ``cls``
    with options of its own (``--resume``, ``--out``, ...)."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


@contextmanager
def cli_errors(prog: str, errors: tuple[type[BaseException], ...] = (ValueError,)) -> Iterator[None]:
    """Turn ``errors`` (bad input) raised inside the block into ``<prog>: error: <message>`` on stderr and exit status 2."""
    try:
        yield
    except errors as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from e
