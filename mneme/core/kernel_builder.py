"""The CPU half of an experiment: pick the backend, link the recording's IR once, build variants.

`KernelBuilder` builds the device binary of each configuration through `mneme.core.build.compile`
with a build cache in process memory (or loads the application's own image in ptx/cubin mode).
It needs no device: `BaseExecutor` (`mneme.core.executor`) holds one, and compile-ahead worker
processes use it alone.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from mneme.core import backend as backend_mod
from mneme.core import build, ir, kernel_clock, pipeline
from mneme.core.backend import Backend, DeviceBinary
from mneme.core.errors import UsageError
from mneme.core.ir_override import IROverride, link_override
from mneme.core.ircache import BuildCache
from mneme.core.types import ExperimentConfiguration

log = logging.getLogger(__name__)

MODES = ("ir", "ptx", "cubin")


# -- recordings and backends -------------------------------------------------------------------


def resolve_backend(rec, backend: str | Backend | None = None) -> Backend:
    """The backend to replay `rec` on: `backend` if given, else the one it was recorded on.

    A recording made on a backend that is not usable here falls back to the host backend
    when the recording carries IR (the host backend runs GPU kernels' IR).
    """
    if isinstance(backend, Backend):
        return backend
    if backend:
        chosen = backend_mod.get_backend(backend)
        availability = chosen.availability()
        if not availability.usable:
            raise UsageError(f"backend {backend!r} is not usable here: {availability.reason}")
        return chosen
    recorded = getattr(rec, "backend", "") or ""
    table = backend_mod.backends()
    if recorded in table:
        chosen = table[recorded]()
        availability = chosen.availability()
        if availability.usable:
            return chosen
        reason = availability.reason
    else:
        reason = f"the {recorded or 'recorded'} backend is not installed"
    if rec.llvm_files and "host" in table:
        log.warning("%s: %s; replaying the kernel's IR on the host backend", rec.path, reason)
        return table["host"]()
    raise UsageError(
        f"{rec.path}: recorded on backend {recorded!r}, which is not usable here ({reason}), "
        "and the recording has no IR to replay elsewhere; pass --backend or install the backend"
    )


def backend_target(backend: Backend) -> str | None:
    """The IR target a backend preprocesses in; None: the IR's own target (GPU IR on every backend)."""
    return getattr(backend, "preprocess_target", None)


# -- the CPU half: link once, preprocess, compile --------------------------------------------


def link_ir(rec, prune: bool = True, internalize: bool = True):
    """The recording's IR linked into one module for its kernel; cached per recording. Clone before mutating."""
    if not rec.llvm_files:
        raise UsageError(f"{rec.path}: the recording has no LLVM IR; replay it with --mode ptx or --mode cubin")
    return rec.link_llvm_modules(prune=prune, internalize=internalize)


class KernelBuilder:
    """Builds device binaries of one recorded kernel through `mneme.core.build.compile`, cached in memory."""

    def __init__(self, rec, args: bytes, backend: Backend, arch: str, mode: str = "ir", cache_size: int = 32):
        if mode not in MODES:
            raise UsageError(f"unknown replay mode {mode!r}; use one of {', '.join(MODES)}")
        self.rec = rec
        self.args = bytes(args)
        self.backend = backend
        self.arch = arch
        self.mode = mode
        # the one build cache mechanism, in process memory only: a replay's variants are its own. A
        # variant takes up to three entries (request alias, binary, a two-step build's intermediate)
        self._cache = BuildCache(memory_entries=6 * cache_size, disk=False)
        self._base_hashes: dict[tuple[str, bool, bool], str] = {}
        self.override: IROverride | None = None  # replacement IR compiled instead of the recording's
        self._override_linked: dict[tuple[bool, bool], object] = {}

    def set_ir(self, override: IROverride | None) -> None:
        """Compile `override` instead of the recording's IR from now on (None: the recording's again).

        Parsed on first use (`link_ir`): a malformed module fails the builds that need it, naming its
        label. Its hash starts every variant hash, so cached builds of either IR never stand for the other.
        """
        if override == self.override:
            return
        for module in self._override_linked.values():
            module.close()
        self._override_linked = {}
        self.override = override

    def build_failure(self, exc: Exception) -> str:
        """The message of a failed build, naming the replacement IR it started from (when the error does not)."""
        label = self.override.label if self.override is not None else ""
        source = f" from {label}" if label and label not in str(exc) else ""
        return f"building kernel {self.rec.kernel_name!r}{source} failed: {exc}"

    def link_ir(self, config: ExperimentConfiguration | None = None):
        prune = True if config is None else config.prune
        internalize = True if config is None else config.internalize
        if self.override is None:
            return link_ir(self.rec, prune=prune, internalize=internalize)
        key = (prune, internalize)
        if key not in self._override_linked:
            recorded = link_ir(self.rec, prune=prune, internalize=internalize) if self.rec.llvm_files else None
            self._override_linked[key] = link_override(
                self.override, self.rec.kernel_name, prune, internalize, recorded=recorded
            )
        return self._override_linked[key]

    def preprocess(self, config: ExperimentConfiguration):
        return pipeline.preprocess(
            self.link_ir(config),
            self.rec.kernel_name,
            config,
            args=self.args,
            arg_layout=self.rec.args,
            target=backend_target(self.backend),
        )

    def build(self, config: ExperimentConfiguration) -> DeviceBinary:
        """The device binary of `config` (from the cache when this variant was built before)."""
        if self.mode != "ir":
            return self.recorded_binary(self.mode)
        with kernel_clock.compiling():  # killed from outside past compile_seconds (a supervisor keeps it)
            module = self.link_ir(config)
            linked = (self.override.sha256 if self.override else "", config.prune, config.internalize)
            if linked not in self._base_hashes:  # hashed once per linked module: the request key starts from it
                self._base_hashes[linked] = ir.module_hash(module)
            return build.compile(
                module,
                self.rec.kernel_name,
                config,
                self.arch,
                self.args,
                self.rec.args,
                backend=self.backend,
                target=backend_target(self.backend),
                base_hash=self._base_hashes[linked],
                cache=self._cache,
            )

    def optimized_ir(self, config: ExperimentConfiguration) -> str:
        """The variant's IR after preprocessing and optimization, as text (for --output-ll)."""
        with kernel_clock.compiling():
            pre = self.preprocess(config)
            try:
                self.backend.optimize(pre.module, config, self.arch)
                return str(pre.module)
            finally:
                pre.module.close()

    def recorded_binary(self, mode: str, required: bool = True) -> DeviceBinary | None:
        """The application's own image of the kernel ("ptx" or "cubin" mode); None when absent and not required."""
        if not self.backend.image_kinds:
            if not required:
                return None
            raise UsageError(
                f"--mode {mode} needs a backend that loads the application's own images; the "
                f"{self.backend.name} backend replays IR only (--mode ir)"
            )
        wanted = {"ptx": ("ptx",), "cubin": ("cubin", "hsaco", "elf", "fatbin")}[mode]
        for image in getattr(self.rec, "binary_blobs", ()) or ():
            if image.kind in wanted and image.kind in self.backend.image_kinds:
                path = Path(image.path)
                if not path.is_absolute():
                    path = Path(self.rec.folder) / path
                data = path.read_bytes()
                return DeviceBinary(
                    self.backend.name,
                    self.arch,
                    image.kind,
                    self.rec.kernel_name,
                    data,
                    variant_hash=hashlib.sha256(data).hexdigest(),
                )
        if not required:
            return None
        raise UsageError(
            f"{self.rec.path}: the recording has no {mode} image of kernel {self.rec.kernel_name!r}; use --mode ir"
        )
