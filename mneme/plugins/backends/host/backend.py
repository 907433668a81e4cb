"""The host backend: kernels compiled for the CPU and run in a sandbox process, device memory at fixed addresses."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import re
import time
from collections.abc import Callable
from typing import Any

import attrs
import llvmlite

from mneme.core import envvars, ir, pipeline
from mneme.core.backend import (
    Availability,
    Backend,
    Device,
    DeviceBinary,
    DeviceInfo,
    LoadedKernel,
    Resources,
    backend_for_arch,
)
from mneme.core.errors import ExperimentError, IRError, MissingGlobalError, MnemeError, UnsupportedError, UsageError
from mneme.core.types import dim3
from mneme.plugins.backends.host import (
    allowlist,
    block_loop,
    block_steps,
    boundscheck,
    deferred_atomics,
    grid_stride,
    lanes,
    limits,
    machine,
    memory,
    redzones,
    retarget,
    runtime,
    sandbox,
    steps,
    support,
)
from mneme.plugins.backends.host import image as host_image
from mneme.plugins.backends.host.availability import availability as host_availability
from mneme.plugins.backends.host.machine import target_machine

log = logging.getLogger(__name__)

MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_BYTES = 64 << 20


def prune_to_kernel(module: Any, kernel_name: str, tm: Any) -> Any:
    """A copy of `module` holding only the kernel and what it reaches (other kernels may use what
    the host cannot run), with always-inline functions inlined."""
    llvm = machine.binding()
    # The host's passes must not see the GPU's target-cpu/features (LLVM aborts on "sm_90").
    text = retarget.inline_synchronizing_functions(retarget.strip_target_attributes(str(module)))
    work = llvm.parse_assembly(text)
    for fn in work.functions:
        if not fn.is_declaration and fn.name != kernel_name:
            fn.linkage = llvm.Linkage.internal
    pb = llvm.create_pass_builder(tm, llvm.PipelineTuningOptions())
    try:
        pm = llvm.create_new_module_pass_manager()
        pm.add_always_inliner_pass()  # CUDA's threadIdx/blockIdx helpers: the kernel then reads them itself
        pm.add_global_dead_code_eliminate_pass()
        pm.add_strip_dead_prototype_pass()
        pm.run(work, pb)
    finally:
        pb.close()
    return work


def remove_dead_code(module: Any, tm: Any) -> Any:
    """Scalar replacement, then dead-code elimination: what the kernel computes but never uses goes.

    Only for a module the support check refused, or one that reads the grid workspace (`%envreg`):
    cooperative groups' `this_thread_block()` and `this_grid()` leave inline-asm calls
    (`%reserved_smem_offset_1`, `%envreg1`) whose result reaches nothing but a local struct, and
    LLVM keeps such calls (not `willreturn`), so they are dropped from the text. Returns the module.
    """
    llvm = machine.binding()

    def run(mod: Any, scalar: bool) -> None:
        pb = llvm.create_pass_builder(tm, llvm.PipelineTuningOptions())
        try:
            pm = llvm.create_new_module_pass_manager()
            if scalar:
                pm.add_sroa_pass()
            pm.add_dead_code_elimination_pass()
            pm.add_global_dead_code_eliminate_pass()
            pm.add_strip_dead_prototype_pass()
            pm.run(mod, pb)
        finally:
            pb.close()

    run(module, True)
    text = str(module)
    lean = support.drop_unused_asm(text)
    if lean == text:
        return module
    module.close()
    module = llvm.parse_assembly(lean)
    run(module, False)
    return module


def pruned_and_checked(module: Any, kernel_name: str, tm: Any) -> tuple[Any, list[str]]:
    """The pruned module (`prune_to_kernel`) and what of it the host cannot run, after dead-code elimination."""
    pruned = prune_to_kernel(module, kernel_name, tm)
    text = str(pruned)
    found = support.unsupported(pruned, kernel_name, text)
    if found or "%envreg" in text:  # an unused cg::this_grid() must not make it a grid launch
        pruned = remove_dead_code(pruned, tm)
        found = support.unsupported(pruned, kernel_name)
    return pruned, found


def _check_externals(module: Any, kernel_name: str) -> None:
    """Every function the code calls must be an LLVM intrinsic the CPU has or a symbol of this process."""
    llvm = machine.binding()
    missing = []
    for fn in module.functions:
        if not fn.is_declaration:
            continue
        name = fn.name
        if name.startswith("llvm."):
            if re.match(r"llvm\.(nvvm|amdgcn|r600|spv|dx)\.", name):
                missing.append(name)
            continue
        if llvm.address_of_symbol(allowlist.symbol(name)) is None:
            missing.append(f"external function {name}")
    if missing:
        raise UnsupportedError(
            f"not supported on the host backend: {', '.join(sorted(missing))} (used by kernel {kernel_name!r})"
        )


def _verified_form(kernel_name: str, form: str, build: Callable[[], str | None]) -> str | None:
    """`build()`'s text of a faster form of the kernel, verified; None where the form declines it or fails to
    build (logged: the kernel keeps a more general form)."""
    try:
        text = build()
        if text is not None:
            machine.binding().parse_assembly(text).verify()
        return text
    except Exception as exc:  # noqa: BLE001 - any surprise keeps the more general form
        log.info("kernel %r: the %s did not apply (%s)", kernel_name, form, exc)
        return None


def _step_form(host: retarget.HostModule, kernel_name: str) -> str | None:
    """The kernel as a step function (see `steps`), or None to keep fibers."""
    return _verified_form(
        kernel_name, "step form", lambda: steps.to_steps(host.text, kernel_name, host.params, host.static_shared)
    )


def _block_step_form(host: retarget.HostModule, kernel_name: str) -> str | None:
    """The step form run a block per call, its passes in IR (see `block_steps`), or None."""
    if not block_steps.enabled():
        return None
    return _verified_form(
        kernel_name,
        "block step form",
        lambda: block_steps.to_block_steps(host.text, kernel_name, host.params, host.static_shared),
    )


def _flat_form(host: retarget.HostModule, kernel_name: str) -> str | None:
    """The block loop with its grid-stride loop run as a plain loop (see `grid_stride`), or None."""
    if not grid_stride.enabled():
        return None
    runs = bool(host.flags & retarget.FLAG_BLOCK_RUNS)
    return _verified_form(
        kernel_name, "flat grid-stride form", lambda: grid_stride.to_flat(host.text, kernel_name, host.params, runs)
    )


def _lane_form(host: retarget.HostModule, kernel_name: str) -> str | None:
    """The block loop with its threads in lockstep groups (see `lanes`), or None to keep thread after thread."""
    runs = bool(host.flags & retarget.FLAG_BLOCK_RUNS)
    return _verified_form(
        kernel_name, "lockstep form", lambda: lanes.to_lanes(host.text, kernel_name, host.params, lanes.width(), runs)
    )


class HostBackend(Backend):
    """Runs NVPTX (CUDA) and AMDGPU (HIP) kernel IR on this machine's CPU through llvmlite's JIT."""

    name = "host"
    priority = 0
    # It runs GPU IR on the CPU, so it knows those targets even where their backends are not installed.
    ir_targets = {"nvptx": ("nvptx",), "amdgpu": ("amdgcn",)}
    emits = ("object",)

    def availability(self) -> Availability:
        return host_availability()

    def device_count(self) -> int:
        return host_device_count() if self.availability().usable else 0

    def arch(self, index: int = 0) -> str:
        return platform.machine()

    def claims(self, arch: str) -> bool:
        return arch in ("host", "native", platform.machine())

    def target_machine(self, arch: str, opt: int = 3) -> Any:
        return machine.pipeline_machine(opt)

    def toolchain(self, arch: str) -> dict[str, str]:
        # builds without the checked copy (MNEME_HOST_BOUNDS=0), or with older checks, are other build products
        checks = {
            "bounds-checks": boundscheck.VERSION if boundscheck.enabled() else "off",
            "lanes": f"{lanes.VERSION}x{lanes.width()}",
            "grid-stride": grid_stride.key(),
            "block-steps": block_steps.key(),
            "block-loop": block_loop.key(),
            "deferred-atomics": deferred_atomics.VERSION if deferred_atomics.enabled() else "off",
        }
        return {**super().toolchain(arch), "cpu": machine.cpu(), **checks}

    def optimize(self, module: Any, config: Any, arch: str) -> float:
        """Optimize host IR for this CPU; GPU IR (a replay's `--output-ll`) for the GPU it was written for."""
        if pipeline.module_target(module) == "host":
            return super().optimize(module, config, arch)
        found = re.search(r'"target-cpu"="([\w.-]+)"', str(module))
        if found is None:
            raise UnsupportedError(f"module {module.name!r} ({module.triple}) names no target-cpu to optimize it for")
        device_arch = found.group(1)
        try:
            return backend_for_arch(device_arch).optimize(module, config, device_arch)
        except UsageError:  # its backend is not installed: LLVM's target of the module's own triple will do
            return pipeline.optimize(
                module, config, ir.target_machine(module.triple, device_arch, "", config.codegen_opt)
            )

    def fingerprint(self) -> dict[str, str]:
        llvm = machine.binding()
        return {
            "backend": self.name,
            "arch": self.arch(),
            "cpu": llvm.get_host_cpu_name(),
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "threads": str(os.cpu_count() or 1),
        }

    def compile(
        self, module: Any, kernel_name: str, config: Any, arch: str, *, emit: str | None = None
    ) -> DeviceBinary:
        """Retarget a preprocessed NVPTX or AMDGPU module to the CPU, optimize it, and emit an object file."""
        self.check_emit(emit, arch)
        llvm = machine.binding()
        runtime.load()  # its symbols must be known to check the kernel's externals
        if isinstance(module, (str, bytes)):
            module = ir.load(module)
        start = time.perf_counter()
        tm = target_machine(getattr(config, "codegen_opt", 3))
        if not (module.triple or "").startswith(("nvptx", "amdgcn")):
            raise UnsupportedError(
                f"not supported on the host backend: kernel {kernel_name!r} is IR for {module.triple or 'no target'}; "
                "the host backend runs CUDA (nvptx) and HIP (amdgcn) kernel IR"
            )
        try:
            module.get_function(kernel_name)
        except NameError as exc:
            raise IRError(f"kernel {kernel_name!r} is not defined in the module; check the kernel name") from exc
        module, found = pruned_and_checked(module, kernel_name, tm)
        if found:
            raise UnsupportedError(
                f"not supported on the host backend: {', '.join(found)} (used by kernel "
                f"{kernel_name!r}); run this kernel on a GPU backend"
            )
        host = retarget.retarget(module, kernel_name, llvm.get_process_triple(), str(tm.target_data))
        host = attrs.evolve(host, text=deferred_atomics.mark(host.text, kernel_name))
        text = host.text
        if host.flags & retarget.FLAG_BLOCK_LOOP:
            text = _flat_form(host, kernel_name) or _lane_form(host, kernel_name) or text
        # a grid launch keeps every block's threads as fibers (the step form runs one block at a time)
        if (
            host.flags & retarget.FLAG_FIBERS
            and not host.flags & retarget.FLAG_GRID
            and envvars.get("MNEME_HOST_FIBERS") != "1"
        ):
            text = _block_step_form(host, kernel_name) or _step_form(host, kernel_name) or text
        try:
            host_module = llvm.parse_assembly(text)
            host_module.verify()
        except RuntimeError as exc:
            raise IRError(f"kernel {kernel_name!r}: the retargeted host IR is invalid: {exc}") from exc
        allowlist.check(host_module, kernel_name)  # first: it reads names as LLVM links them
        _check_externals(host_module, kernel_name)
        if host.flags & retarget.FLAG_BLOCK_LOOP or text is not host.text:  # inlined into the entry
            host_module.get_function(kernel_name).linkage = llvm.Linkage.internal
        retarget_seconds = time.perf_counter() - start
        optimize_seconds = self.optimize(host_module, config, arch)
        start = time.perf_counter()
        if boundscheck.enabled():  # after optimization: a check must not keep a local in memory
            checked, count = boundscheck.with_checked_copy(str(host_module))
            if count:
                host_module = llvm.parse_assembly(checked)
        if deferred_atomics.SCOPE in host.text:  # after the checks: a marked update is checked before its call
            host_module = llvm.parse_assembly(deferred_atomics.lowered(str(host_module)))
        data = tm.emit_object(host_module)
        codegen_seconds = time.perf_counter() - start
        return DeviceBinary(
            backend=self.name,
            arch=arch,
            kind="host-object",
            kernel_name=kernel_name,
            data=bytes(data),
            resources=Resources(shared_mem=host.static_shared),
            stage_times={"retarget": retarget_seconds, "optimize": optimize_seconds, "codegen": codegen_seconds},
        )

    def check(self, module: Any, kernel_name: str, arch: str | None = None) -> list[str]:
        """What of the kernel the host cannot run (after pruning and dead-code elimination); runs nothing."""
        if not (module.triple or "").startswith(("nvptx", "amdgcn")):
            return [
                f"IR for {module.triple or 'no target'}; the host backend runs CUDA (nvptx) and HIP (amdgcn) kernel IR"
            ]
        try:
            module.get_function(kernel_name)
        except NameError as exc:
            raise IRError(f"kernel {kernel_name!r} is not defined in the module; check the kernel name") from exc
        runtime.load()  # its symbols decide which external functions resolve
        pruned, found = pruned_and_checked(module, kernel_name, target_machine(3))
        pruned.close()
        return found

    def open_device(self, index: int = 0) -> HostDevice:
        count = host_device_count()
        if not 0 <= index < count:
            raise MnemeError(
                f"the host backend has {count} device(s) (indices 0..{count - 1}), not {index}; "
                f"set {HOST_DEVICES_ENV}=N to expose N"
            )
        availability = self.availability()
        if not availability.usable:
            raise MnemeError(f"the host backend is not usable here: {availability.reason}")
        runtime.load()
        return HostDevice(
            DeviceInfo(
                backend=self.name,
                index=index,
                name=_cpu_name(),
                arch=self.arch(),
                driver=f"LLVM {'.'.join(map(str, machine.binding().llvm_version_info))}",
                memory_bytes=_memory_bytes(),
            )
        )


HOST_DEVICES_ENV = "MNEME_HOST_DEVICES"


def host_device_count() -> int:
    """Devices the host backend exposes: 1, or MNEME_HOST_DEVICES.

    Each is this CPU, opened in its own process, so a worker pool can serve several devices
    (and be tested doing so) on a machine without a GPU; their timings share the CPU.
    """
    text = envvars.get(HOST_DEVICES_ENV)
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise MnemeError(f"{HOST_DEVICES_ENV}={text!r} must be a whole number >= 1 (devices the host backend exposes)")
    return count


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


class HostKernel(LoadedKernel):
    """A host kernel: linked into its own sandbox process (`sandbox`), or, with ``MNEME_HOST_SANDBOX=0``
    (unsafe), into this process by MCJIT."""

    def __init__(self, binary: DeviceBinary, memory: Any, sandboxed: bool):
        super().__init__(binary)
        #: whether the first launch (the one a replay verifies, reads checked) has run
        self.launched = False
        self.sandbox: sandbox.Sandbox | None = None
        self.image: host_image.LoadedImage | None = None
        if sandboxed:
            self.sandbox = sandbox.Sandbox(binary.data, binary.kernel_name, memory)
            info = self.sandbox.info
        else:
            self.image = host_image.LoadedImage(binary.data, binary.kernel_name)
            info = self.image.info
        assert info is not None
        self.info: host_image.KernelInfo = info

    @property
    def mode(self) -> int:
        """How the runtime runs it (`image.KernelInfo.mode`)."""
        return self.info.mode

    def _release(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        if self.image is not None:
            self.image.close()


class HostDevice(Device):
    """The CPU as a device: memory at the recorded addresses, shared with each kernel's sandbox process,
    blocks on every core."""

    # A cooperative launch promises every block resident at once; the host runs a kernel that waits
    # at a grid-wide barrier with all its blocks alive (its support check finds the barrier), and any
    # other kernel block after block, which is the same result. Clusters it does not have.
    launch_attributes_supported = frozenset({"cooperative"})

    def __init__(self, info: DeviceInfo):
        super().__init__(info)
        #: whether kernels run in sandbox processes (docs/security.md); off only with MNEME_HOST_SANDBOX=0
        self.sandboxed = sandbox.enabled()
        if self.sandboxed:
            sandbox.check_supported()
        else:
            _warn_unsandboxed()
        self.memory = memory.AddressSpace()
        self.redzones = redzones.RedZones()
        self._kernels: list[HostKernel] = []
        self._runtime = runtime.load()
        #: seconds the last launch spent in the runtime, as its sandbox said (None: not known)
        self._kernel_seconds: float | None = None

    def _release(self) -> None:
        for kernel in self._kernels:
            kernel.close()
        self._kernels.clear()
        self.memory.close()

    def reserve(self, va_addr: int, va_size: int) -> None:
        self._check_open()
        self.memory.reserve(va_addr, va_size)

    def map(self, addr: int, size: int) -> None:
        self._check_open()
        self.memory.map(addr, size)
        self.redzones.add(addr, size)

    def write(self, addr: int, data) -> None:
        self._check_open()
        self.memory.write(addr, data)

    def read(self, addr: int, size: int) -> bytes:
        self._check_open()
        return self.memory.read(addr, size)

    def copy(self, dst: int, src: int, size: int) -> None:
        self._check_open()
        self.memory.copy(dst, src, size)

    def load(self, binary: DeviceBinary) -> HostKernel:
        self._check_open()
        if binary.backend != "host" or binary.kind != "host-object":
            raise ExperimentError(
                f"kernel {binary.kernel_name!r}: a {binary.backend} {binary.kind} binary cannot load on the host "
                "backend; compile it with the host backend",
                kind="load",
            )
        kernel = HostKernel(binary, self.memory, self.sandboxed)
        self._kernels = [k for k in self._kernels if not k._closed]  # tuning loads many variants
        self._kernels.append(kernel)
        return kernel

    def launch(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes) -> None:
        self._check_open()
        kernel.check_open()
        if not isinstance(kernel, HostKernel):
            raise ExperimentError(
                f"kernel {kernel.binary.kernel_name!r} was not loaded by the host backend", kind="launch"
            )
        grid, block = dim3.of(grid), dim3.of(block)
        name, info = kernel.binary.kernel_name, kernel.info
        limits.check_launch(name, grid, block)
        if block.size > MAX_THREADS_PER_BLOCK:
            raise ExperimentError(
                f"kernel {name!r}: block {block} has {block.size} threads, more than {MAX_THREADS_PER_BLOCK}",
                kind="launch",
            )
        shared_bytes = info.static_shared + (shared_mem + retarget.DYNAMIC_SHARED_ALIGN if shared_mem else 0)
        if shared_mem < 0 or shared_bytes > MAX_SHARED_BYTES:
            raise ExperimentError(
                f"kernel {name!r}: {shared_mem} bytes of dynamic shared memory is out of range", kind="launch"
            )
        if info.mode == host_image.MODE_GRID:
            self._check_resident(name, grid, block)
        if len(args) < info.param_bytes:
            raise ExperimentError(
                f"kernel {name!r} takes {info.param_bytes} bytes of parameters; the argument buffer has {len(args)}",
                kind="launch",
            )
        mode = info.mode | (info.warp << 8 if info.warp != 32 else 0)
        first = not kernel.launched  # the launch a replay verifies: check its accesses
        self._kernel_seconds = None
        if kernel.sandbox is not None:
            if first:
                self.redzones.arm()
                kernel.sandbox.set_bounds(self.redzones.slacks())
            try:
                rc, text, self._kernel_seconds = kernel.sandbox.launch(
                    grid.as_tuple(),
                    block.as_tuple(),
                    shared_bytes,
                    mode,
                    info.frame_bytes,
                    first and info.checked,
                    bytes(args),
                )
            finally:
                if first:
                    kernel.sandbox.set_bounds([])
        else:
            rc, text = self._launch_here(kernel, grid, block, shared_bytes, mode, first, bytes(args))
        if rc != 0:
            text = redzones.with_argument(text, bytes(args))
            raise ExperimentError(
                f"kernel {name!r} failed on the host: {text}",
                kind="timeout" if text.startswith("timed out") else "fault",
            )
        if first:
            kernel.launched = True
            self.redzones.check(name, bytes(args))

    def _launch_here(
        self, kernel: HostKernel, grid: dim3, block: dim3, shared_bytes: int, mode: int, first: bool, args: bytes
    ) -> tuple[int, str]:
        """MNEME_HOST_SANDBOX=0: run the kernel on this process's threads (unsafe; docs/security.md)."""
        image = kernel.image
        assert image is not None
        limits.arm(self._runtime)
        arg_buffer = ctypes.create_string_buffer(args, max(len(args), 1) + 16)
        message = ctypes.create_string_buffer(1024)
        u32x3 = ctypes.c_uint32 * 3
        if first:
            self.redzones.arm(self._runtime)
        entry = image.entry_checked if first and image.entry_checked else image.entry  # reads checked on the first
        try:
            rc = self._runtime.mneme_launch(
                entry,
                ctypes.addressof(arg_buffer),
                u32x3(*grid.as_tuple()),
                u32x3(*block.as_tuple()),
                shared_bytes,
                mode,
                kernel.info.frame_bytes,
                0,
                message,
                len(message),
            )
        finally:
            if first:
                self.redzones.disarm(self._runtime)
        return rc, message.value.decode(errors="replace")

    def timed_launch(self, kernel: LoadedKernel, grid, block, shared_mem: int, args: bytes) -> float:
        """With the sandbox, the time the runtime measured around the launch (the round trip to the sandbox
        left out), never more than the wall time seen here."""
        wall = super().timed_launch(kernel, grid, block, shared_mem, args)
        inside = self._kernel_seconds
        return min(wall, inside) if inside is not None and inside > 0 else wall

    def _check_resident(self, name: str, grid: dim3, block: dim3) -> None:
        """Refuse a grid-barrier launch larger than the host keeps resident, as a GPU refuses a cooperative
        launch larger than its SMs hold."""
        why = ctypes.create_string_buffer(512)
        most = self._runtime.mneme_grid_capacity(why, len(why))
        threads = grid.size * block.size
        if threads > most:
            raise ExperimentError(
                f"kernel {name!r} synchronizes its whole grid (cooperative groups' grid.sync()), so all {threads} "
                f"threads of grid {grid} x block {block} must be resident at once; the host backend keeps at most "
                f"{most} ({why.value.decode()}). Launch at most {most // block.size} blocks of {block.size} threads, "
                "as a GPU refuses a cooperative launch larger than it holds at once",
                kind="invalid",  # this geometry cannot launch so; a smaller one may (as on the GPU)
            )

    def _kernel(self, kernel: LoadedKernel) -> HostKernel:
        self._check_open()
        kernel.check_open()
        if not isinstance(kernel, HostKernel):
            raise MnemeError(f"kernel {kernel.binary.kernel_name!r} was not loaded by the host backend")
        return kernel

    def _global(self, kernel: HostKernel, name: str) -> tuple[int, int]:
        assert kernel.image is not None
        table = kernel.image.globals
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise MissingGlobalError(
                f"kernel {kernel.binary.kernel_name!r} has no device global {name!r}; known: {known}"
            )
        return table[name]

    def write_global(self, kernel: LoadedKernel, name: str, data: bytes) -> None:
        kernel = self._kernel(kernel)
        size = kernel.info.globals.get(name, 0)
        if name in kernel.info.globals and len(data) > size:
            raise MnemeError(f"device global {name!r} holds {size} bytes; got {len(data)}")
        if kernel.sandbox is not None:
            kernel.sandbox.write_global(name, bytes(data))
            return
        addr, size = self._global(kernel, name)
        if data and not host_image.writable(addr, len(data)):  # a write there would kill the process (SIGSEGV)
            raise MnemeError(
                f"device global {name!r} of kernel {kernel.binary.kernel_name!r} lies in read-only "
                f"memory at {addr:#x}; its recorded value cannot be restored on the host backend"
            )
        ctypes.memmove(addr, bytes(data), len(data))

    def read_global(self, kernel: LoadedKernel, name: str, size: int) -> bytes:
        kernel = self._kernel(kernel)
        held = kernel.info.globals.get(name, 0)
        if name in kernel.info.globals and size > held:
            raise MnemeError(f"device global {name!r} holds {held} bytes; asked for {size}")
        if kernel.sandbox is not None:
            return kernel.sandbox.read_global(name, size)
        addr, _ = self._global(kernel, name)
        return memory.read_bytes(addr, size)  # any size: string_at takes a C int


_warned = False


def _warn_unsandboxed() -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "%s=0: host kernels run in this process without the sandbox; a recorded kernel can do anything "
            "this process can (docs/security.md)",
            sandbox.ENV,
        )
