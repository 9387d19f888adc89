"""The set-up builds llama.cpp for the GPU a machine's tools call for (scripts/build_flags.sh), asked
with fake tools on PATH: no GPU is needed to check the choice, the override and the fallback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU = "-DGGML_NATIVE=OFF -DGGML_RPC=ON"
# the tools the choice reads besides the fakes (no nvcc, glslc or uname of the machine's own)
BASIC_TOOLS = ("bash", "sha256sum", "cut", "printf", "mkdir", "dirname", "cat", "grep")
NVCC = "Cuda compilation tools"
NVIDIA_SMI = "GPU 0: NVIDIA H100 80GB HBM3"


def fake_bin(tmp_path: Path, tools: dict[str, str]) -> Path:
    """A PATH folder with the basic tools and ``tools`` (name -> what the fake prints)."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True)
    for name in BASIC_TOOLS:
        real = subprocess.run(["bash", "-c", f"command -v {name}"], capture_output=True, text=True).stdout.strip()
        if real.startswith("/"):
            (folder / name).symlink_to(real)
    tools = {"uname": "Linux", **tools}
    for name, output in tools.items():
        script = folder / name
        script.write_text(f"#!/bin/sh\necho {output}\n")
        script.chmod(0o755)
    return folder


def choose(tmp_path: Path, tools: dict[str, str], **env: str) -> tuple[str, str]:
    """BUILD_FLAGS and BUILD_REASON as scripts/build_flags.sh chooses them on a machine with ``tools``."""
    folder = fake_bin(tmp_path, tools)
    script = 'source scripts/build_flags.sh; choose_build_flags; printf "%s\\n%s\\n" "$BUILD_FLAGS" "$BUILD_REASON"'
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                          env={"PATH": str(folder), "CACHE_ROOT": str(tmp_path / "cache"),
                               "CUDA_HOME": str(tmp_path / "no-cuda"), **env})
    flags, reason = done.stdout.splitlines()
    return flags, reason


@pytest.mark.parametrize("tools, env, flags, words", [
    ({}, {}, CPU, "CPU build"),
    ({"nvcc": NVCC, "nvidia-smi": NVIDIA_SMI}, {}, CPU + " -DGGML_CUDA=ON", "NVIDIA GPU: CUDA"),
    ({"nvcc": NVCC}, {}, CPU, "no NVIDIA GPU"),  # a toolkit without the driver: a wheel that could not load
    ({"uname": "Darwin"}, {}, CPU + " -DGGML_METAL=ON", "Metal"),
    ({"glslc": "shaderc"}, {"VULKAN_SDK": "HEADERS"}, CPU + " -DGGML_VULKAN=ON", "Vulkan"),
    ({"glslc": "shaderc"}, {}, CPU, "CPU build"),  # glslc without the headers cannot build Vulkan
    ({"nvcc": NVCC, "nvidia-smi": NVIDIA_SMI}, {"SPECDEC_CMAKE_ARGS": "-DGGML_NATIVE=OFF"}, "-DGGML_NATIVE=OFF",
     "SPECDEC_CMAKE_ARGS"),
])
def test_the_flags_follow_the_machines_tools(tmp_path, tools, env, flags, words):
    if env.get("VULKAN_SDK") == "HEADERS":
        headers = tmp_path / "sdk" / "include" / "vulkan"
        headers.mkdir(parents=True)
        (headers / "vulkan.h").write_text("/* a fake SDK */\n")
        env = {**env, "VULKAN_SDK": str(tmp_path / "sdk")}
    chosen, reason = choose(tmp_path, tools, **env)
    assert chosen == flags and words in reason
    assert "GGML_NATIVE=ON" not in chosen  # AMX kernels die with SIGILL on these CPUs


def test_a_failed_gpu_build_falls_back_to_the_cpu_once_and_is_remembered(tmp_path):
    """The GPU build fails: the CPU build follows with one sentence, and the next set-up chooses the
    CPU build at once, saying why and how to try the GPU again."""
    folder = fake_bin(tmp_path, {"nvcc": NVCC, "nvidia-smi": NVIDIA_SMI})
    builds = tmp_path / "builds.txt"
    script = f"""
        source scripts/build_flags.sh
        fake_build() {{ echo "$1" >> {builds}; [[ "$1" != *CUDA* ]]; }}
        choose_build_flags
        build_with_fallback fake_build
        echo "built: $BUILD_FLAGS"
    """
    env = {"PATH": str(folder), "CACHE_ROOT": str(tmp_path / "cache"), "CUDA_HOME": str(tmp_path / "no-cuda")}
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert builds.read_text().splitlines() == [CPU + " -DGGML_CUDA=ON", CPU]
    assert done.stdout.strip().endswith(f"built: {CPU}")
    assert done.stderr.count("\n") == 1 and "GPU build" in done.stderr and "CPU instead" in done.stderr
    again, reason = choose(tmp_path / "again", {"nvcc": NVCC, "nvidia-smi": NVIDIA_SMI},
                           CACHE_ROOT=str(tmp_path / "cache"))
    assert again == CPU and "failed on an earlier set-up" in reason and "gpu-build-failed-" in reason


def test_a_failed_build_of_the_users_own_flags_is_an_error(tmp_path):
    folder = fake_bin(tmp_path, {})
    script = "source scripts/build_flags.sh; choose_build_flags; build_with_fallback false"
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": str(folder), "CACHE_ROOT": str(tmp_path / "cache"),
                               "SPECDEC_CMAKE_ARGS": "-DGGML_CUDA=ON"})
    assert done.returncode != 0


def test_setup_reads_its_flags_from_the_choice():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "source scripts/build_flags.sh" in setup and "build_with_fallback build_wheel" in setup
    assert 'echo "llama.cpp build: $BUILD_REASON' in setup
    assert os.access(REPO / "scripts" / "setup.sh", os.X_OK)
