"""The backend contract: what the core asks of a device plugin.

A `Backend` is stateless and cheap to construct; it says whether it is usable here, which
architectures it claims, compiles IR for them with its own toolchain (CPU work, may run in a
process with no device; the one compile path, `mneme.core.build`, calls it), and opens a
`Device`. A `Device` owns one device context in this process: memory at fixed
virtual addresses, loaded kernels, launches and timing. Both follow llvmlite's handle
style: a `Device` and a `LoadedKernel` own one handle, close it once, work as context
managers, and raise `MnemeError` (never crash) when used after close.
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from mneme.core import envvars, plugins, targets
from mneme.core.availability import Availability  # noqa: F401 - part of the backend contract
from mneme.core.errors import MnemeError, PluginError, UsageError
from mneme.core.launching import LaunchAttributes

if TYPE_CHECKING:  # imported for annotations only; the core must not need llvmlite at import
    from mneme.core.envvars import EnvVar
    from mneme.core.types import ExperimentConfiguration, dim3


# The state each timed run starts from, after the reset of the regions the kernel writes.
CACHE_STATES = {
    "flushed": "the last-level cache evicted before each timed run (the default: no run profits from the last)",
    "warm": "the cache as the reset between runs left it",
    "primed": "the kernel run once more, untimed, after the reset: the cache and the written regions as the "
    "kernel's own previous run left them, as in an application that launches it again and again",
}


def check_cache_state(cache: str) -> None:
    if cache not in CACHE_STATES:
        raise UsageError(f"unknown cache state {cache!r}; use one of {', '.join(CACHE_STATES)}")


#: The timers of a backend that times on the host clock (the default of `Backend` and `Device`).
HOST_TIMERS = ("auto", "host-clock")


def check_timer(timer: str, timers: tuple[str, ...], backend: str) -> None:
    """`timer` is one of `timers`, the `backend` backend's; else a UsageError naming them."""
    if timer not in timers:
        raise UsageError(f"the {backend} backend has no timer {timer!r}; use one of {', '.join(timers)}")


@attrs.frozen
class DeviceInfo:
    backend: str
    index: int
    name: str
    arch: str
    driver: str = ""
    memory_bytes: int = 0


@attrs.frozen
class Resources:
    """Resource usage of one compiled kernel; -1 where the backend cannot tell.

    `assembler` names the tool and version that produced the binary the numbers describe
    (e.g. "assembler 13.0.88"), as the backend says it; "" where the backend has none.
    """

    registers: int = -1
    local_mem: int = -1
    const_mem: int = -1
    shared_mem: int = -1
    spill_stores: int = -1
    spill_loads: int = -1
    max_threads_per_block: int = -1
    assembler: str = ""


def compare_policy(policy: Any) -> tuple[str, float, bool, str] | None:
    """(dtype, threshold, relative, norm) that a device compare reads from a region's policy (any object with
    those fields: the snapshot's RegionPolicy); None where the region has none and its bytes are compared."""
    if policy is None:
        return None
    return (
        str(getattr(policy, "dtype", "u8")),
        float(getattr(policy, "threshold", 0.0)),
        bool(getattr(policy, "relative", False)),
        str(getattr(policy, "norm", "none") or "none"),
    )


@attrs.frozen
class RegionDiff:
    """How one region differs, as a device compare reports it (`Device.compare_regions`). Offsets are
    bytes from the region's start; -1 when nothing differs. `l2_*`: the norms a tolerant compare used."""

    actual: int
    size: int
    dtype: str
    differing_bytes: int
    first_offset: int
    max_abs: float = 0.0
    max_rel: float = 0.0
    nan_mismatch: int = 0
    l2_abs: float = 0.0
    l2_rel: float = 0.0
    ok: bool = True


#: The u64 words a GPU backend's tolerant compare kernel writes per region: differing elements, the first
#: one's index (all ones: none), then as f64 the largest absolute and relative errors, (u64) NaNs facing
#: numbers, the sums of squared errors and of squared expected values, the sums of absolute errors and of
#: absolute expected values, and the largest absolute expected value.
COMPARE_WORDS = 10


def _ratio(num: float, den: float) -> float:
    if den > 0:
        return num / den
    return 0.0 if num == 0 else math.inf


def compare_verdict(
    actual: int,
    size: int,
    dtype: str,
    itemsize: int,
    threshold: float,
    relative: bool,
    norm: str,
    words: Any,
    tail: tuple[int, int] = (0, -1),
) -> RegionDiff:
    """One region's verdict from its compare kernel's words (`COMPARE_WORDS`; dtype "bytes": the first two).

    `itemsize`: the bytes of one `dtype` element. `tail`: (differing bytes, first offset or -1) of the
    bytes after the last whole element, which must match exactly, as on the host. With norm "none" every
    element must be within the threshold; with a norm (L1, L2, Linf), the norm of the errors (relative:
    over the expected values' norm) must be, and no NaN may face a number.
    """
    import numpy as np

    count, first = int(words[0]), int(words[1])
    differing = count * itemsize + tail[0]
    first_offset = first * itemsize if count else (tail[1] if tail[0] else -1)
    if dtype == "bytes":
        return RegionDiff(actual, size, "u8", differing, first_offset, ok=differing == 0)
    f = np.asarray(words, dtype=np.uint64).view(np.float64)
    max_abs, max_rel, nan_mismatch = float(f[2]), float(f[3]), int(words[4])
    l2_abs, l2_ref = math.sqrt(float(f[5])), math.sqrt(float(f[6]))
    l1_abs, l1_ref, max_ref = float(f[7]), float(f[8]), float(f[9])
    errors = {"L2": (l2_abs, l2_ref), "L1": (l1_abs, l1_ref), "LINF": (max_abs, max_ref)}.get(norm.upper())
    if errors is None:  # "none": every element within the threshold
        ok = count == 0
    else:
        error = _ratio(*errors) if relative else errors[0]
        ok = error <= threshold and nan_mismatch == 0
    return RegionDiff(
        actual,
        size,
        dtype,
        differing,
        first_offset,
        max_abs,
        max_rel,
        nan_mismatch,
        l2_abs,
        _ratio(l2_abs, l2_ref),
        ok and tail[0] == 0,
    )


@attrs.frozen
class DeviceBinary:
    """A kernel compiled for one backend and architecture, ready to load.

    `kind` names the payload, one of the backend's `emits` (the host backend's "llvm-ir": it JITs IR).
    `stage_times` holds seconds per compile stage ("preprocess", "optimize", "codegen", ...).
    """

    backend: str
    arch: str
    kind: str
    kernel_name: str
    data: bytes
    resources: Resources = Resources()
    stage_times: dict[str, float] = attrs.field(factory=dict)
    variant_hash: str = ""


class Backend(abc.ABC):
    """A device plugin. Subclasses set `name` and implement the abstract methods."""

    name: ClassVar[str]
    #: The timers its devices' `time(timer=...)` takes (their `Device.timers`), known without a device.
    timers: ClassVar[tuple[str, ...]] = HOST_TIMERS
    #: Rank among usable backends when none is named: the highest usable one is the default.
    priority: ClassVar[int] = 0
    #: What `compile(emit=...)` can produce; the first is what a device of this backend loads.
    emits: ClassVar[tuple[str, ...]] = ()
    #: Kinds of the application's own recorded images its devices load (replay modes other than "ir").
    image_kinds: ClassVar[tuple[str, ...]] = ()
    #: LLVM's name of the target its IR is for, as `mneme.core.pipeline.module_target` says it; "" for none.
    target: ClassVar[str] = ""
    #: The LLVM targets of the IR it reads, each with how the architecture part of its triples
    #: ("arch-vendor-os") starts: its own `target`, and any other it runs (the host backend runs
    #: GPU IR on the CPU). IR of a triple no backend declares is host IR (`pipeline.module_target`).
    ir_targets: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: The triple a module of its IR that names none is given (IR some compilers write without one),
    #: when the module's text holds one of `kernel_marks` (a kernel calling convention, an intrinsic prefix).
    default_triple: ClassVar[str] = ""
    kernel_marks: ClassVar[tuple[str, ...]] = ()
    #: Function attributes of its IR whose value "min,max" bounds a block's threads (a kernel's launch
    #: bounds as its compiler writes them): launch contracts (`mneme.core.tuning.contracts`) read them.
    thread_range_attributes: ClassVar[tuple[str, ...]] = ()
    #: ELF `e_machine` values of the code images its devices load (docs/design/interfaces.md).
    elf_machines: ClassVar[tuple[int, ...]] = ()
    #: The MNEME_* environment variables it reads (`mneme.core.envvars.EnvVar`), for `mneme config`.
    environment: ClassVar[tuple[EnvVar, ...]] = ()

    @abc.abstractmethod
    def availability(self) -> Availability:
        """Whether this backend can run here; when not, a reason a user can act on."""

    @abc.abstractmethod
    def device_count(self) -> int:
        """Number of devices this backend can open (0 when unavailable)."""

    @abc.abstractmethod
    def arch(self, index: int = 0) -> str:
        """Architecture string of a device (e.g. "sm_90", "gfx942", "x86_64"), as `claims` takes it."""

    @abc.abstractmethod
    def claims(self, arch: str) -> bool:
        """Whether this backend generates code for architecture `arch` (no device needed)."""

    @abc.abstractmethod
    def target_machine(self, arch: str, opt: int = 3) -> Any:
        """The llvmlite TargetMachine its optimization pipelines run with for `arch` at codegen level `opt`."""

    @abc.abstractmethod
    def compile(
        self, module: Any, kernel_name: str, config: ExperimentConfiguration, arch: str, *, emit: str | None = None
    ) -> DeviceBinary:
        """Optimize and generate code for a preprocessed (specialized) llvmlite ModuleRef. CPU work only.

        `emit` is one of `emits` (default: the first). The module may be changed in place.
        """

    def intermediate(self, config: ExperimentConfiguration) -> str | None:
        """The output `assemble` finishes into a binary, when this configuration builds in two steps.

        The intermediate depends on none of the configuration's `assemble`-stage fields, so the
        build cache keeps one for every configuration that differs from another only in those
        (assembly text, whatever its assembler is then told). None, the default: `compile` builds
        in one step.
        """
        return None

    def assemble(self, binary: DeviceBinary, config: ExperimentConfiguration, arch: str, *, emit: str) -> DeviceBinary:
        """Finish an intermediate `binary` (of the kind `intermediate(config)` names) into `emit`.

        The result is the binary `compile(..., emit=emit)` makes in one step, with this step's time in
        its `stage_times`. Backends whose `intermediate` names one implement it.
        """
        raise NotImplementedError(f"the {self.name} backend builds in one step (its intermediate() is None)")

    @abc.abstractmethod
    def open_device(self, index: int = 0) -> Device:
        """Open device `index` in this process."""

    def check(self, module: Any, kernel_name: str, arch: str | None = None) -> list[str]:
        """What of `kernel_name` in `module` this backend cannot run, by name; [] when it can. Runs nothing.

        The default: all supported, when the module is IR of this backend's `target` (if it declares one).
        """
        from mneme.core import pipeline  # lazily: the pipelines import llvmlite

        target = self.target
        found = pipeline.module_target(module)
        if target and found != target:
            return [f"IR for {module.triple or 'no target'} ({found}); the {self.name} backend compiles {target} IR"]
        return []

    def runs_on(self, target: str, device_arch: str) -> bool:
        """Whether code built for architecture `target` loads and runs on a device of `device_arch`.

        IR sources ask it to pick, among the recorded images and IR of a kernel, one the device
        can run. The default: the same architecture, target features (after ":") aside.
        Backends whose loaders run older or portable code on newer devices override it.
        """
        return targets.same_architecture(target, device_arch)

    def default_emit(self, arch: str) -> str:
        return self.emits[0]

    def check_emit(self, emit: str | None, arch: str) -> str:
        """`emit`, or the default one; a UsageError naming the choices for one it cannot make."""
        emit = emit or self.default_emit(arch)
        if emit not in self.emits:
            raise UsageError(
                f"the {self.name} backend cannot emit {emit!r} for {arch}; choose one of {', '.join(self.emits)}"
            )
        return emit

    def toolchain(self, arch: str) -> dict[str, str]:
        """Name and versions of everything that shapes its builds for `arch` (part of the build cache key)."""
        import llvmlite  # lazily: the core must not need llvmlite at import
        import llvmlite.binding as llvm

        return {
            "backend": self.name,
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)),
        }

    def optimize(self, module: Any, config: ExperimentConfiguration, arch: str) -> float:
        """Run the configuration's pipeline on `module` in place for `arch`; returns its seconds."""
        from mneme.core import pipeline  # lazily: the pipelines import llvmlite

        return pipeline.optimize(module, config, self.target_machine(arch, config.codegen_opt))

    def fingerprint(self) -> dict[str, str]:
        """Versions that make results comparable (driver, toolchain); stored with every result."""
        return {"backend": self.name}


class Device(abc.ABC):
    """One open device in this process. Memory is addressed by the recorded virtual addresses."""

    #: The timers `time(timer=...)` takes; "auto" is the backend's best that works here.
    timers: tuple[str, ...] = HOST_TIMERS
    #: The launch attributes (`LaunchAttributes.names`: "cooperative", "cluster") this device's
    #: `launch` repeats when a loaded kernel carries them (`LoadedKernel.launch_attributes`).
    #: A recording that needs one more is refused before anything runs (`check_launch_attributes`).
    launch_attributes_supported: frozenset[str] = frozenset()

    def __init__(self, info: DeviceInfo):
        self.info = info
        self._closed = False
        #: The timer that measured the last `time()` call's runs ("" before the first).
        self.timer_used = ""

    # -- lifetime ---------------------------------------------------------------------------
    def __enter__(self) -> Device:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise MnemeError(f"{self.info.backend} device {self.info.index} is closed")

    @abc.abstractmethod
    def _release(self) -> None:
        """Free every reservation, mapping and module; called once."""

    # -- memory at fixed addresses -----------------------------------------------------------
    @abc.abstractmethod
    def reserve(self, va_addr: int, va_size: int) -> None:
        """Reserve [va_addr, va_addr + va_size) at exactly that address, or raise naming it."""

    @abc.abstractmethod
    def map(self, addr: int, size: int) -> None:
        """Back [addr, addr + size) with device memory (inside a reservation, or placed exactly)."""

    @abc.abstractmethod
    def write(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        """Copy host bytes to device address `addr`."""

    @abc.abstractmethod
    def read(self, addr: int, size: int) -> bytes:
        """Copy `size` bytes at device address `addr` to the host."""

    def copy(self, dst: int, src: int, size: int) -> None:
        """Device-to-device copy; backends override with a native copy."""
        self.write(dst, self.read(src, size))

    # -- code ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def load(self, binary: DeviceBinary) -> LoadedKernel:
        """Load a compiled kernel."""

    @abc.abstractmethod
    def launch(self, kernel: LoadedKernel, grid: dim3, block: dim3, shared_mem: int, args: bytes) -> None:
        """Run the kernel once to completion. `args` is the packed parameter buffer.

        A fault raises `ExperimentError(kind="fault")`; the device may be unusable afterwards.
        """

    def time(
        self,
        kernel: LoadedKernel,
        grid: dim3,
        block: dim3,
        shared_mem: int,
        args: bytes,
        iterations: int,
        before_each: Callable[[], None] | None = None,
        cache: str = "flushed",
        timer: str = "auto",
    ) -> list[float]:
        """Seconds per run for `iterations` runs; `before_each` restores state between runs.

        `cache` is the state each timed run starts from (`CACHE_STATES`); "primed" runs the kernel
        once, untimed, after `before_each`. `timer` is one of `self.timers`; `self.timer_used`
        then names the one that measured. Backends override this with device-side timers and a
        cache flush; the default uses the host clock and has no cache of its own to flush.
        """
        check_cache_state(cache)
        self.check_timer(timer)
        self.timer_used = "host-clock"
        times = []
        for _ in range(iterations):
            if before_each is not None:
                before_each()
            if cache == "primed":
                self.launch(kernel, grid, block, shared_mem, args)
            times.append(self.timed_launch(kernel, grid, block, shared_mem, args))
        return times

    def timed_launch(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes) -> float:
        """Seconds one launch took on the host clock (the default `time`'s measurement)."""
        start = time.perf_counter()
        self.launch(kernel, grid, block, shared_mem, args)
        return time.perf_counter() - start

    def check_timer(self, timer: str) -> None:
        check_timer(timer, self.timers, self.info.backend)

    def check_launch_attributes(self, attributes: LaunchAttributes, kernel_name: str) -> None:
        """Refuse a recording launched in a way (cooperative, clusters) this device cannot repeat."""
        missing = sorted(attributes.names - self.launch_attributes_supported)
        if missing:
            raise UsageError(
                f"kernel {kernel_name!r} was launched {attributes.describe()}; the {self.info.backend} "
                f"backend cannot launch with {' or '.join(missing)}, and without it the kernel would "
                "not run as recorded: replay it on a backend that can (mneme plugins lists them)"
            )

    def write_global(self, kernel: LoadedKernel, name: str, data: bytes) -> None:
        """Set a device global variable of the kernel's module by name."""
        raise MnemeError(f"the {self.info.backend} backend cannot set device global {name!r}")

    def read_global(self, kernel: LoadedKernel, name: str, size: int) -> bytes:
        raise MnemeError(f"the {self.info.backend} backend cannot read device global {name!r}")


class LoadedKernel(abc.ABC):
    """A kernel loaded on a device. Unloading it (or closing its device) invalidates it."""

    def __init__(self, binary: DeviceBinary):
        self.binary = binary
        self._closed = False
        #: How to launch it beyond the geometry (the recorded launch's); the executor sets it.
        self.launch_attributes: LaunchAttributes = LaunchAttributes()

    def __enter__(self) -> LoadedKernel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    def check_open(self) -> None:
        if self._closed:
            raise MnemeError(f"kernel {self.binary.kernel_name!r} was unloaded; load it again")

    @abc.abstractmethod
    def _release(self) -> None:
        """Unload; called once."""

    @property
    def resources(self) -> Resources:
        return self.binary.resources


def backends() -> dict[str, type[Backend]]:
    """Name -> backend class, from the plugins."""
    return plugins.registry("backend")


def _environment():
    # by priority, each backend imported when reached: looking up one backend's variable imports no other
    for cls in targets.backend_classes():
        yield from cls.environment


envvars.add_source(_environment)  # the installed backends' variables are registered ones


def get_backend(name: str) -> Backend:
    return plugins.lookup("backend", name)()


def _by_priority() -> list[Backend]:
    return sorted((cls() for cls in backends().values()), key=lambda b: (-b.priority, b.name))


def backend_for_arch(arch: str) -> Backend:
    """The backend for architecture `arch`: hook ``mneme_backend_for_arch`` (``firstresult``), whose core
    implementation picks the highest-priority installed backend that claims it."""
    table = plugins.LazyRegistry("backend")  # a backend is imported when the choice looks at it
    chosen = plugins.hook().mneme_backend_for_arch(arch=arch, backends=table)
    if chosen is not None:
        if not isinstance(chosen, Backend):
            raise PluginError(
                f"a plugin's mneme_backend_for_arch returned {chosen!r} for {arch!r}, not a Backend "
                "instance; `mneme --trace-plugins` shows which"
            )
        return chosen
    names = ", ".join(b.name for b in _by_priority()) or "none"
    raise UsageError(
        f"unknown architecture {arch!r}: no installed backend generates code for it (installed "
        f"backends: {names}); give an architecture one of them claims, or install its backend"
    )


def default_backend() -> Backend:
    """The usable backend of highest `priority`."""
    reasons = []
    for backend in _by_priority():
        availability = backend.availability()
        if availability.usable:
            return backend
        reasons.append(f"{backend.name}: {availability.reason}")
    raise MnemeError("no usable backend: " + "; ".join(reasons or ["none installed"]))
