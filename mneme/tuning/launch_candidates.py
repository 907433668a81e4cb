"""The original Mneme API's `mneme.tuning.launch_candidates` (see `mneme.compat`)."""

from mneme.compat.builtin_spaces import (
    MAX_BLOCK_DIMS,
    MAX_GRID_DIMS,
    MAX_THREADS_PER_BLOCK,
    launch_layout_key,
    normalize_launch_candidates,
)

__all__ = [
    "MAX_BLOCK_DIMS",
    "MAX_GRID_DIMS",
    "MAX_THREADS_PER_BLOCK",
    "launch_layout_key",
    "normalize_launch_candidates",
]
