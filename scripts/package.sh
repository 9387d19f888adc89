#!/usr/bin/env bash
# Builds what SpecDec Studio ships (`make package`):
#
#   dist/specdec_studio-VERSION-py3-none-any.whl, dist/specdec_studio-VERSION.tar.gz   (python -m build)
#   dist/specdec-studio/                     the frozen Linux bundle: ./specdec-studio (GUI), ./specdec (CLI)
#   dist/specdec-studio-VERSION-linux-x86_64.tar.gz   the bundle as one download
#
# The bundle is frozen with PyInstaller (packaging/pyinstaller/) from a fresh virtual environment
# that holds only the app's wheel, its runtime dependencies and the cached llama-cpp-python wheel,
# so it contains what an installed app imports and nothing from the test set-up. It embeds the
# default model. Then packaging/smoke.sh checks it.
set -euo pipefail

cd "$(dirname "$0")/.."
readonly PYINSTALLER_VERSION=6.22.3
started=$(date +%s)

scripts/setup.sh  # .venv, the llama-cpp-python wheel in the cache, the default model
version=$(.venv/bin/python -c 'from importlib.metadata import version; print(version("specdec-studio"))')
llama_wheel=$(cat .venv/llama-cpp-python-wheel)  # written by set-up
model=$(.venv/bin/python -c 'from specdec_studio.engine.models import catalog; print(catalog.fetch("default", log=lambda _m: None))')

echo "== wheel and sdist"
rm -rf dist build/package
.venv/bin/python -m build -q -o dist . >/dev/null  # build is pinned in the test extras set-up installs

echo "== packaging environment (the app's wheel and its runtime dependencies only)"
python_bin=$(.venv/bin/python -c 'import sys; print(sys._base_executable)')
"$python_bin" -m venv build/package/venv
build/package/venv/bin/python -m pip install -q --upgrade pip
build/package/venv/bin/python -m pip install -q "$llama_wheel" "dist/specdec_studio-$version-py3-none-any.whl" \
    "pyinstaller==$PYINSTALLER_VERSION"

echo "== the installed wheel's commands, run outside the checkout"
(cd build/package && QT_QPA_PLATFORM=offscreen venv/bin/specdec run -m default --mode lookahead -n 8 -p "def fib(n):" \
    --json > wheel-run.json && venv/bin/specdec-studio --help > /dev/null) \
    || { echo "the wheel's specdec or specdec-studio command failed" >&2; exit 1; }
echo "specdec and specdec-studio from the wheel work"

echo "== frozen bundle (PyInstaller $PYINSTALLER_VERSION)"
frozen_started=$(date +%s)
(cd build/package && SPECDEC_BUNDLE_MODEL="$model" venv/bin/pyinstaller --noconfirm --log-level WARN \
    --distpath ../../dist --workpath work ../../packaging/pyinstaller/specdec-studio.spec)
frozen_s=$(( $(date +%s) - frozen_started ))
cp packaging/specdec-studio.desktop packaging/io.github.specdec_studio.SpecDecStudio.metainfo.xml \
   packaging/specdec-studio-gguf.xml packaging/install-desktop-entry.sh resources/icons/specdec-studio.png \
   resources/icons/specdec-studio.svg dist/specdec-studio/

archive="dist/specdec-studio-$version-linux-$(uname -m).tar.gz"
tar -C dist -czf "$archive" specdec-studio

echo "== smoke test"
packaging/smoke.sh dist/specdec-studio

echo "== the wheel and the sdist, installed outside the checkout (pytest -m packaging)"
QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest -q -m packaging tests/packaging

total_s=$(( $(date +%s) - started ))
echo
echo "bundle:  dist/specdec-studio/  $(du -sh dist/specdec-studio | cut -f1) on disk ($(du -sh dist/specdec-studio/_internal/models | cut -f1) of it the default model)"
echo "archive: $archive  $(du -h "$archive" | cut -f1)"
echo "wheel:   $(ls dist/*.whl)  $(du -h dist/*.whl | cut -f1)"
echo "time:    ${total_s} s in all, ${frozen_s} s of it PyInstaller"
