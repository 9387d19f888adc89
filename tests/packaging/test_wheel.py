"""The app's own wheel and sdist (``python -m build``), installed into a new virtual environment.

The new environment gets the wheel and nothing of the checkout: the tests run its commands from
an empty folder, so ``app``, ``engine`` and the resources can only come from the wheel. Its
dependencies (Qt, numpy, llama-cpp-python) are the test set-up's own, made visible through a
``.pth`` line; `make package` installs the same wheel with its dependencies resolved from the
index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import CODE_PROMPT

pytestmark = pytest.mark.packaging  # built and installed by `make package` (pytest -m packaging)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DATA = sorted(
    str(path.relative_to(ROOT))
    for sub in ("prompts", "traces", "icons")
    for path in (ROOT / "resources" / sub).iterdir()
    if path.suffix in (".jsonl", ".png", ".svg")
)


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "-o", str(out), str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


@pytest.fixture(scope="session")
def fresh_venv(built, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(built["wheel"])], check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the dependencies only: a plain path line, so the test venv's editable install (a .pth in that
    # folder) is not processed and the checkout stays invisible
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _run(venv: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_wheel_holds_the_packages_the_resources_and_both_commands(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    # one import name at the top of site-packages, beside the wheel's own metadata
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == {"specdec_studio"}
    assert {"specdec_studio/" + path for path in SHIPPED_DATA} <= names
    assert {
        "specdec_studio/resources/icons/specdec-studio.svg",
        "specdec_studio/resources/icons/specdec-studio.png",
    } <= names
    assert {"specdec_studio/app/main.py", "specdec_studio/engine/cli/main.py", "specdec_studio/engine/models/frozen.py",
            "specdec_studio/engine/strategies/lookahead.py"} <= names
    assert "specdec = specdec_studio.engine.cli:main" in entry_points
    assert "specdec-studio = specdec_studio.app.main:main" in entry_points


def test_sdist_holds_the_sources_and_the_resources(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "app/main.py", "engine/cli/main.py"} <= names
    assert set(SHIPPED_DATA) <= names


# Another project's packages with the common names ours had before they moved under specdec_studio:
# importing them fails loudly, so anything of ours that still reached for them would break.
FOREIGN = 'raise ImportError("this is another project\'s {name} package")\n'


@pytest.fixture(scope="session")
def crowded_venv(fresh_venv) -> Path:
    site = Path(subprocess.run([str(fresh_venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name in ("app", "engine", "resources"):
        (site / name).mkdir(exist_ok=True)
        (site / name / "__init__.py").write_text(FOREIGN.format(name=name))
    return fresh_venv


def test_installed_wheel_finds_its_resources_outside_the_checkout(crowded_venv, tmp_path):
    probe = (
        "import json\n"
        "from specdec_studio import app, engine\n"
        "from specdec_studio.engine.records import demo_traces\n"
        "from specdec_studio.engine.tuning import prompts\n"
        "from specdec_studio.app.main import app_icon_path\n"
        "print(json.dumps({'app': app.__file__, 'engine': engine.__file__,\n"
        "    'prompts': len(prompts.shipped()), 'traces': [p.name for p in demo_traces.shipped()],\n"
        "    'icon': str(app_icon_path()), 'icon_exists': app_icon_path().is_file()}))\n"
    )
    done = _run(crowded_venv, tmp_path, str(crowded_venv / "bin" / "python"), "-c", probe)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for key in ("app", "engine", "icon"):
        assert found[key].startswith(str(crowded_venv)), (key, found[key])
    assert found["prompts"] >= 10
    assert len(found["traces"]) == len(list((ROOT / "resources" / "traces").glob("*.jsonl")))
    assert found["icon_exists"]
    # and the other project's packages still import as theirs
    done = _run(crowded_venv, tmp_path, str(crowded_venv / "bin" / "python"), "-c", "import engine")
    assert "another project's engine package" in done.stderr


def test_installed_specdec_decodes_in_lookahead_mode_like_plain(crowded_venv, tmp_path, smollm_path):
    specdec = str(crowded_venv / "bin" / "specdec")
    runs = {}
    for mode, extra in (("plain", []), ("lookahead", ["-W", "4", "-N", "3", "-G", "4", "--verify-kv"])):
        done = _run(crowded_venv, tmp_path, specdec, "run", "-m", str(smollm_path), "--mode", mode, *extra,
                    "-n", "16", "-t", "2", "-p", CODE_PROMPT, "--json")
        assert done.returncode == 0, done.stderr
        runs[mode] = json.loads(done.stdout)
    assert runs["lookahead"]["stats"]["n_predict"] == 16
    assert runs["lookahead"]["token_ids"] == runs["plain"]["token_ids"]


def test_installed_specdec_studio_loads_the_model_and_streams_a_run(crowded_venv, tmp_path, smollm_path):
    """The real window from the installed wheel: it loads the model, decodes 8 tokens, shows them
    in the stream, and exits (``--self-test``); a window that merely has not crashed proves little."""
    done = _run(crowded_venv, tmp_path, str(crowded_venv / "bin" / "specdec-studio"), "--self-test", str(smollm_path),
                timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["model"] == str(smollm_path) and result["n_tokens"] == 8
    assert result["text"].strip() and result["shown"] == result["text"]
