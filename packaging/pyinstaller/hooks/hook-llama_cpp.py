"""PyInstaller hook for llama-cpp-python (upstream has none).

llama_cpp loads ``llama_cpp/lib/libllama.so`` with ctypes by path, so PyInstaller's import analysis
never sees it: without this hook a frozen app fails with "Shared library with base name 'llama'
not found". libllama finds its ggml libraries by SONAME through its RUNPATH ($ORIGIN), so exactly
those names go next to it. The wheel stores every library three times (libX.so, .so.0, .so.0.x.y:
zip files have no symlinks); only the name that is looked up is kept. libmtmd (images and audio)
is left out: the app never loads it.
"""

from pathlib import Path

from PyInstaller.utils.hooks import get_package_paths

_, package_dir = get_package_paths("llama_cpp")
lib_dir = Path(package_dir) / "lib"

# ctypes opens libllama.so by path; the loader finds the ggml libraries (the CPU backend, and a GPU
# backend when llama.cpp was built with one) by their SONAME, libggml*.so.0
NEEDED = ["libllama.so", *sorted(path.name for path in lib_dir.glob("libggml*.so.0"))]
if not (lib_dir / "libllama.so").exists() or len(NEEDED) < 3:
    raise SystemExit(f"hook-llama_cpp: {lib_dir} lacks libllama.so or its ggml libraries")

binaries = [(str(lib_dir / name), "llama_cpp/lib") for name in NEEDED]
