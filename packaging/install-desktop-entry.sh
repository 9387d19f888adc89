#!/usr/bin/env bash
# Adds the frozen bundle this script sits in to the desktop's application menu, for this user:
# the launcher (pointing at this folder), the icon, the AppStream metadata and the .gguf file type.
#
#   ./install-desktop-entry.sh            install
#   ./install-desktop-entry.sh --remove   remove again
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}"
desktop="$data/applications/specdec-studio.desktop"
icon="$data/icons/hicolor/256x256/apps/specdec-studio.png"
metainfo="$data/metainfo/io.github.specdec_studio.SpecDecStudio.metainfo.xml"

if [[ "${1:-}" == "--remove" ]]; then
    rm -f "$desktop" "$icon" "$metainfo"
    command -v xdg-mime >/dev/null && xdg-mime uninstall "$here/specdec-studio-gguf.xml" || true
    echo "removed SpecDec Studio's desktop entry"
    exit 0
fi

mkdir -p "$(dirname "$desktop")" "$(dirname "$icon")" "$(dirname "$metainfo")"
sed "s|^Exec=specdec-studio|Exec=\"$here/specdec-studio\"|" "$here/specdec-studio.desktop" > "$desktop"
cp "$here/specdec-studio.png" "$icon"
cp "$here/io.github.specdec_studio.SpecDecStudio.metainfo.xml" "$metainfo"
command -v xdg-mime >/dev/null && xdg-mime install --novendor "$here/specdec-studio-gguf.xml" || true
command -v update-desktop-database >/dev/null && update-desktop-database -q "$data/applications" || true
echo "installed $desktop"
