"""ggml's backend devices: the few ggml calls llama-cpp-python does not bind (device lists, the
RPC backend's entry points, the abort callback), and whether this machine has a GPU."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import llama_cpp

from specdec_studio.engine import native

# ggml-backend.h's enum ggml_backend_dev_type
DEVICE_TYPE_CPU = 0
DEVICE_TYPE_GPU = 1
DEVICE_TYPE_IGPU = 2


class Ggml:
    """ggml's libraries as llama-cpp-python loaded them, with the calls the engine makes typed."""

    def __init__(self) -> None:
        # By the names libllama asks for: the wheel holds libggml.so and libggml.so.0 as two copies
        # of one file, and only the one already loaded shares ggml's globals (its abort callback).
        lib_dir = Path(llama_cpp.__file__).parent / "lib"
        self.ggml = ctypes.CDLL(str(lib_dir / "libggml.so.0"))
        self.base = ctypes.CDLL(str(lib_dir / "libggml-base.so.0"))
        p, s = ctypes.c_void_p, ctypes.c_char_p
        sig = {
            "ggml_backend_reg_by_name": (p, [s]),
            "ggml_backend_reg_get_proc_address": (p, [p, s]),
            "ggml_backend_reg_dev_count": (ctypes.c_size_t, [p]),
            "ggml_backend_reg_dev_get": (p, [p, ctypes.c_size_t]),
            "ggml_backend_dev_count": (ctypes.c_size_t, []),
            "ggml_backend_dev_get": (p, [ctypes.c_size_t]),
            "ggml_backend_dev_type": (ctypes.c_int, [p]),
            "ggml_backend_dev_memory": (None, [p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
            "ggml_backend_dev_by_type": (p, [ctypes.c_int]),
        }
        for name, (restype, argtypes) in sig.items():
            fn = getattr(self.ggml, name)
            fn.restype, fn.argtypes = restype, argtypes
        self.base.ggml_set_abort_callback.restype = p
        self.base.ggml_set_abort_callback.argtypes = [p]

    def rpc_proc(self, name: str) -> int | None:
        """The address of the RPC backend's function ``name``, or None in a build without RPC."""
        reg = self.ggml.ggml_backend_reg_by_name(b"RPC")
        if not reg:
            return None
        return self.ggml.ggml_backend_reg_get_proc_address(reg, name.encode())


_lock = threading.Lock()
_ggml: Ggml | None = None


def lib() -> Ggml:
    global _ggml
    with _lock:
        if _ggml is None:
            native.ensure_backend()
            _ggml = Ggml()
    return _ggml


def local_gpus() -> list[int]:
    """This machine's GPU devices (none on a CPU build): a model on RPC servers uses them too."""
    g = lib().ggml
    devices = (g.ggml_backend_dev_get(i) for i in range(g.ggml_backend_dev_count()))
    return [dev for dev in devices if g.ggml_backend_dev_type(dev) in (DEVICE_TYPE_GPU, DEVICE_TYPE_IGPU)]


def supports_gpu_offload() -> bool:
    """Whether this machine has a GPU llama.cpp can use (the app shows "GPU layers" only then).

    Not ``llama_supports_gpu_offload``: a build with the RPC backend says yes to it with no GPU."""
    return bool(local_gpus())


def decode_leaves_a_core(model, n_threads: int) -> bool:
    """Whether this machine has a core a decode of ``model`` (an engine.models.loading.LoadedModel)
    on ``n_threads`` threads does not use: llama.cpp's threads are fewer than the cores this process
    may run on, or every layer is on a GPU or on RPC servers (the host then waits on them). Work done
    beside a decode is free only then; where llama.cpp's threads take every core, a thread beside
    them slows the decode by what it saves (measured: ``tests/bench/explain_cost.py``)."""
    every_layer_offloaded = model.n_gpu_layers < 0 or model.n_gpu_layers >= model.info.n_layer
    if model.rpc_servers or (every_layer_offloaded and supports_gpu_offload()):
        return True
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores > n_threads
