"""Starting worker processes from a user's script as the original's forked workers started."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    # Spawned workers re-import the parent's main script unless it is hidden; the original's
    # forked workers never did, so its scripts have no `if __name__ == "__main__"` guard.
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
    try:
        for key in saved:
            setattr(main, key, None) if key == "__spec__" else delattr(main, key)
        yield
    finally:
        for key, value in saved.items():
            setattr(main, key, value)
