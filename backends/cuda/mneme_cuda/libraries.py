"""Where the CUDA backend's prebuilt native libraries may lie, besides the build cache.

`scripts/gpu-suite --prepare` builds the recorder, the snapshot reader and the kernel timer's
helper into the checkout's `.gpu/lib` (and copies libcupti into `.gpu/lib/cupti`) for a GPU
machine without a compiler or headers; importing this module declares that folder to
`mneme.core.native`, which looks there after the build cache.
"""

from __future__ import annotations

from pathlib import Path

from mneme.core.native import add_search_folder

#: The checkout's prebuilt native libraries (absent in an installed wheel: nothing is found there).
CHECKOUT_LIB = Path(__file__).resolve().parents[3] / ".gpu" / "lib"

add_search_folder(CHECKOUT_LIB)
