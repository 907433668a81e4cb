"""How a recorded launch was made beyond its geometry: the attributes a replay repeats.

Kept apart from `mneme.core.types` (which loads cattrs) so the device contract stays cheap to import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from mneme.core.types import dim3


@attrs.frozen
class LaunchAttributes:
    """How a recorded launch was made beyond grid, block and shared memory; a replay launches the same way.

    `cooperative`: every block resident at once (a cooperative launch), which a grid-wide
    barrier needs; `cluster`: thread block cluster dimensions in blocks (None: no clusters).
    A device that cannot launch so says which attribute (`Device.launch_attributes_supported`).
    """

    cooperative: bool = False
    cluster: dim3 | None = None

    @property
    def names(self) -> frozenset[str]:
        """The attributes set: "cooperative", "cluster"."""
        return frozenset(
            name for name, on in (("cooperative", self.cooperative), ("cluster", self.cluster is not None)) if on
        )

    def describe(self) -> str:
        parts = (["cooperatively"] if self.cooperative else []) + (
            [f"with clusters of {self.cluster}"] if self.cluster is not None else []
        )
        return " and ".join(parts) or "plainly"


def cluster_misfit(grid: Sequence[int], cluster: Sequence[int]) -> str:
    """Why clusters of `cluster` blocks (x, y, z) cannot tile `grid`; "" when they divide it in every dimension."""
    if any(g % c for g, c in zip(grid, cluster)):
        return f"clusters of {tuple(cluster)} blocks do not divide the grid {tuple(grid)}"
    return ""
