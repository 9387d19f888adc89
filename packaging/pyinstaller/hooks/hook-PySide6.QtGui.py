"""Replaces PyInstaller's own hook for PySide6.QtGui to keep only the Qt plugins a desktop app needs.

The stock hook collects every plugin of every type QtGui uses. Among them the GTK3 platform theme
pulls GTK, cairo, pango and ATK into the bundle, and the EGLFS, linuxfb, VNC and Vulkan display
platforms are for kiosks and embedded boards. The app draws with QPainter and exports PNG (built
into QtGui), so image-format and SVG icon plugins are not needed either.
"""

from pathlib import PurePath

from PyInstaller.utils.hooks.qt import add_qt6_dependencies

# plugin folder -> the plugin files kept (None: every file of that folder)
KEPT_PLUGINS = {
    "platforms": {"libqxcb.so", "libqwayland.so", "libqoffscreen.so", "libqminimal.so"},
    "xcbglintegrations": None,
    "wayland-decoration-client": None,
    "wayland-graphics-integration-client": None,
    "wayland-shell-integration": None,
    "platforminputcontexts": None,  # compose key and input methods (IBus)
    "platformthemes": {"libqxdgdesktopportal.so"},  # native file dialogs through the desktop portal
}


def _kept(source: str, dest: str) -> bool:
    parts = PurePath(dest).parts
    if "plugins" not in parts:
        return True
    folder = parts[parts.index("plugins") + 1] if parts.index("plugins") + 1 < len(parts) else ""
    if folder not in KEPT_PLUGINS:
        return False
    names = KEPT_PLUGINS[folder]
    return names is None or PurePath(source).name in names


hiddenimports, binaries, datas = add_qt6_dependencies(__file__)
binaries = [(source, dest) for source, dest in binaries if _kept(source, dest)]
