"""`Availability`: whether a backend can run on this machine, and if not, why.

Its own module so a backend's cheap availability check (what `mneme plugins` calls) need not
import the backend contract, `mneme.core.backend`, which re-exports it (start-up, issue 27).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Availability:
    """Whether a backend can run on this machine, and if not, why (and what to do)."""

    usable: bool
    reason: str = ""
