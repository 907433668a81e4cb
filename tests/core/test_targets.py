"""The core's target-neutral code asks the backends' declarations (mneme.core.targets).

A third-party backend registered in process declares an IR target, a triple, kernel marks, a
loader rule and an environment variable; the IR toolkit, the pipelines, the IR sources and
`mneme config`'s registry answer by them, as they do for the built-in backends.
"""

from __future__ import annotations

import pytest

from mneme.core import envvars, ir, irsource, pipeline, plugins, targets
from mneme.core.backend import Availability, Backend
from mneme.core.envvars import EnvVar
from mneme.core.hookspecs import hookimpl


class ToyBackend(Backend):
    name = "toy"
    target = "toy"
    ir_targets = {"toy": ("toy",)}
    default_triple = "toy64-acme-none"
    kernel_marks = ("@toy.kernel.marker",)
    elf_machines = (0x7777,)
    environment = (EnvVar("MNEME_TOY_LEVEL", "1", "how much the toy backend does", "toy"),)

    def availability(self):
        return Availability(False, "a toy")

    def device_count(self):
        return 0

    def arch(self, index=0):
        return "toy2"

    def claims(self, arch):
        return arch.startswith("toy")

    def target_machine(self, arch, opt=3):
        raise NotImplementedError

    def compile(self, module, kernel_name, config, arch, *, emit=None):
        raise NotImplementedError

    def open_device(self, index=0):
        raise NotImplementedError

    def runs_on(self, target, device_arch):
        # toyN code runs on any toyM with M >= N
        return target.startswith("toy") and int(target[3:]) <= int(device_arch[3:])


class ToyPlugin:
    @hookimpl
    def mneme_backends(self):
        return [ToyBackend]


@pytest.fixture
def toy():
    plugins.register(ToyPlugin(), name="toy")
    yield
    plugins.reset()


def test_a_backends_loader_rule_decides_which_code_runs_on_its_devices(toy):
    assert irsource.runs_on("toy1", "toy3") and not irsource.runs_on("toy3", "toy1")
    assert irsource.arch_rank("toy1", (), "toy2") == 1 and irsource.arch_rank("toy3", (), "toy2") == 0
    # an architecture no backend claims: only the same one (features aside)
    assert targets.runs_on("zz9:feat+", "zz9") and not targets.runs_on("zz8", "zz9")


def test_the_core_knows_a_triple_and_a_module_without_one_by_the_backends_declarations(toy):
    assert pipeline.triple_target("toy64-acme-none") == "toy"
    assert pipeline.triple_target("x86_64-unknown-linux-gnu") == "host"
    text = "declare void @toy.kernel.marker()\ndefine void @k() {\n  call void @toy.kernel.marker()\n  ret void\n}\n"
    assert ir.load(text).triple == "toy64-acme-none"
    plain = "define void @k() {\n  ret void\n}\n"
    assert ir.load(plain).triple == ""


def test_without_the_backend_its_declarations_are_gone():
    assert pipeline.triple_target("toy64-acme-none") == "host"
    assert "MNEME_TOY_LEVEL" not in envvars.registry()


def test_a_backends_environment_variables_are_registered(toy):
    assert envvars.registry()["MNEME_TOY_LEVEL"].component == "toy"


def test_the_built_in_gpu_backends_declare_their_targets_and_images():
    from mneme_cuda.backend import CudaBackend
    from mneme_hip.backend import HipBackend

    assert (
        pipeline.triple_target("nvptx64-nvidia-cuda") == "nvptx"
        and pipeline.triple_target("amdgcn-amd-amdhsa") == "amdgpu"
    )
    assert CudaBackend.elf_machines == (190,) and HipBackend.elf_machines == (224,)
    # CUDA's loader rule: SASS within a major version, PTX forward, arch-specific code exactly
    assert targets.runs_on("sm_80", "sm_86") and not targets.runs_on("sm_80", "sm_90")
    assert targets.runs_on("compute_80", "sm_90") and not targets.runs_on("sm_90a", "sm_90")
    assert {"MNEME_CUDA_RECORDER", "MNEME_LLD"} <= set(envvars.registry())
