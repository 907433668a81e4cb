"""Errors as the original Mneme API raises them: every one is a `RuntimeError`."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from mneme.core.errors import MnemeError


@functools.lru_cache(maxsize=None)
def _runtime_class(cls: type[MnemeError]) -> type:
    # A subclass of both, so `except RuntimeError` and `except FormatError` both catch it.
    return type(cls.__name__, (cls, RuntimeError), {"__module__": cls.__module__})


def as_runtime_error(exc: MnemeError) -> MnemeError:
    """The same error (class, message, attributes) made a `RuntimeError` too."""
    if isinstance(exc, RuntimeError):
        return exc
    new = _runtime_class(type(exc)).__new__(_runtime_class(type(exc)))
    new.__dict__.update(exc.__dict__)
    new.args = exc.args
    return new


@contextlib.contextmanager
def runtime_errors() -> Iterator[None]:
    """Re-raise the core's `MnemeError`s inside the block as `RuntimeError` subclasses."""
    try:
        yield
    except MnemeError as exc:
        if isinstance(exc, RuntimeError):
            raise
        raise as_runtime_error(exc) from exc
