"""The desktop entry, the AppStream metadata and the icon, checked with the freedesktop tools
(Debian's desktop-file-utils and appstream; the test set-up installs them)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from configparser import ConfigParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
ICONS = ROOT / "resources" / "icons"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (scripts/setup.sh --all installs it on Debian)")
    return path


def test_desktop_entry_validates_and_starts_the_gui_script():
    done = subprocess.run([_tool("desktop-file-validate"), str(PACKAGING / "specdec-studio.desktop")],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "error" not in done.stdout.lower(), done.stdout + done.stderr
    entry = ConfigParser(interpolation=None)
    entry.read(PACKAGING / "specdec-studio.desktop")
    assert entry["Desktop Entry"]["Exec"].split()[0] == "specdec-studio"
    assert entry["Desktop Entry"]["Icon"] == "specdec-studio"


def test_appstream_metainfo_validates():
    done = subprocess.run([_tool("appstreamcli"), "validate", "--no-net",
                           str(PACKAGING / "io.github.specdec_studio.SpecDecStudio.metainfo.xml")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    root = ET.parse(PACKAGING / "io.github.specdec_studio.SpecDecStudio.metainfo.xml").getroot()
    assert root.findtext("launchable") == "specdec-studio.desktop"


def test_gguf_file_type_definition_parses():
    root = ET.parse(PACKAGING / "specdec-studio-gguf.xml").getroot()
    ns = {"m": "http://www.freedesktop.org/standards/shared-mime-info"}
    assert root.find("m:mime-type", ns).get("type") == "application/x-gguf"
    assert root.find("m:mime-type/m:glob", ns).get("pattern") == "*.gguf"


def test_icon_is_an_svg_and_its_256_px_png():
    svg = ET.parse(ICONS / "specdec-studio.svg").getroot()
    assert svg.get("viewBox") == "0 0 256 256"
    header = (ICONS / "specdec-studio.png").read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (256, 256)


def test_the_file_the_desktop_entry_passes_is_the_model_and_qt_options_stay_in_order():
    from specdec_studio.app.main import split_model_file

    assert split_model_file(["/models/m.gguf"]) == ("/models/m.gguf", [])
    assert split_model_file(["-platform", "offscreen", "m.GGUF"]) == ("m.GGUF", ["-platform", "offscreen"])
    assert split_model_file(["-platform", "offscreen"]) == (None, ["-platform", "offscreen"])
    assert split_model_file(["-m", "a.gguf"]) == (None, ["-m", "a.gguf"])  # -m's value is not a bare file
