"""IR source `triton`: the `.llir` Triton keeps in its compile cache beside the binary it loaded.

Triton writes each compiled kernel to ``<cache>/<hash>/<name>.{json,ttir,ttgir,llir,ptx,cubin}``
(``.hsaco`` on AMD). The cache is ``$TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``,
else ``~/.triton/cache``.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from mneme.core.irsource import ArchitectureMismatch, IRModule, IRSource, runs_on
from mneme.instrument.symbols import module_symbols

log = logging.getLogger(__name__)


def triton_cache_dir() -> Path:
    if os.environ.get("TRITON_CACHE_DIR"):
        return Path(os.environ["TRITON_CACHE_DIR"])
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    return Path(home, ".triton", "cache")


def _arch_of(meta: dict) -> str:
    target = meta.get("target") or {}
    arch = target.get("arch")
    if isinstance(arch, int) or (isinstance(arch, str) and arch.isdigit()):
        return f"sm_{arch}"
    return str(arch or "")


class TritonCacheIRSource(IRSource):
    """Finds a Triton kernel's `.llir` in Triton's compile cache."""

    name = "triton"

    def __init__(self, cache_dir: str | os.PathLike | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None

    def find(self, kernel_name, *, arch=None, elf_files=(), image=None):
        root = self.cache_dir or triton_cache_dir()
        if not root.is_dir():
            return None
        candidates = []
        for llir in root.glob(f"*/{kernel_name}.llir"):
            meta_path = llir.with_suffix(".json")
            try:
                meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            except ValueError:
                log.debug("unreadable Triton metadata %s", meta_path)
                meta = {}
            if meta.get("name", kernel_name) != kernel_name:
                continue
            if image is not None:
                binary = next((p for p in (llir.with_suffix(".cubin"), llir.with_suffix(".hsaco")) if p.exists()), None)
                if binary is None or binary.read_bytes() != bytes(image):
                    continue
            candidates.append((llir, _arch_of(meta)))
        if not candidates:
            log.debug(
                "no Triton cache entry in %s for %s%s",
                root,
                kernel_name,
                " matching the loaded image" if image is not None else "",
            )
            return None
        usable = [(p, a) for p, a in candidates if arch is None or not a or runs_on(a, arch)]
        if not usable:
            built = ", ".join(sorted({a for _, a in candidates}))
            raise ArchitectureMismatch(
                f"Triton kernel {kernel_name} is cached in {root} for {built} only, and the device is {arch}; "
                "run the program once on this device so Triton compiles it for it"
            )
        usable.sort(key=lambda c: c[0].stat().st_mtime, reverse=True)
        if len(usable) > 1:
            log.warning(
                "Triton kernel %s has %d cached builds in %s; using the newest (%s); give the loaded "
                "image to pick the exact one",
                kernel_name,
                len(usable),
                root,
                usable[0][0].parent.name,
            )
        llir, found_arch = usable[0]
        data = llir.read_bytes()
        if kernel_name not in module_symbols(data, str(llir)).kernels:
            log.debug("%s does not define kernel %s", llir, kernel_name)
            return None
        return [
            IRModule(
                kernel_name=kernel_name,
                arch=found_arch or (arch or ""),
                data=data,
                kind="text",
                source=str(llir),
                origin=str(llir),
                ir_source=self.name,
                producer="triton",
            )
        ]
