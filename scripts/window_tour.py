"""Every tab of the real window after an Auto run, shot from the X screen (issue 78's look after
the window became a model and controllers):

    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/window_tour.py /tmp/shots
    xvfb-run -a -s "-screen 0 2560x1440x24" .venv/bin/python scripts/window_tour.py /tmp/shots

An Auto chat turn on the default model, then each tab of the centre (Stream, Race, Batch), the right
panel (Live, Inspect, Tune, Profile) and the left panel (Run, Chats), then presentation mode.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import open_window, start  # noqa: E402

MESSAGE = ("Here is a function:\n\ndef total(items):\n    result = 0\n    for item in items:\n"
           "        result += item.price * item.quantity\n    return result\n\n"
           "Rewrite it to skip items whose quantity is zero, and show the whole function.")


def main() -> None:
    _, shots, scratch = start(sys.argv[1])
    from specdec_studio.engine.models import catalog

    window = open_window(str(catalog.resolve("default")), scratch, chat=True)
    shots.wait(lambda: window.model.models.loaded and not window.model.machine.busy, 300)
    window.controls.set_values({"mode": "auto", "max_tokens": 160})
    window.input.set_text(MESSAGE)
    window.input.run.click()
    shots.wait(lambda: window.model.machine.busy)
    shots.wait(lambda: not window.model.machine.busy, 300)
    shots.settle(1.0)
    for index in range(window.centre_tabs.count()):
        window.centre_tabs.setCurrentIndex(index)
        for right in range(window.right_tabs.count()):
            if index and right:  # the other centre tabs beside the Live tab only
                break
            window.right_tabs.setCurrentIndex(right)
            name = f"{window.centre_tabs.tabText(index)}-{window.right_tabs.tabText(right)}".lower()
            shots.shoot(name)
    window.centre_tabs.setCurrentIndex(0)
    window.right_tabs.setCurrentIndex(0)
    window.left_tabs.setCurrentIndex(1)
    shots.shoot("chats")
    window.left_tabs.setCurrentIndex(0)
    window.presentation.set_on(True)
    shots.shoot("presentation", 1.0)
    window.presentation.set_on(False)
    shots.shoot("after-presentation", 1.0)
    window.close()


if __name__ == "__main__":
    main()
