"""The window after issue 79's export, theme and RPC changes, shot from the X screen:

    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/reliability_look.py /tmp/shots

1. a prompt-lookup run in the dark theme, then its video exported (the offscreen film window once
   reset the whole app's theme to "system"): the window after the export, still dark, the status
   bar naming the file;
2. the export's file replaced whole: a run report written over an older file of the same name;
3. a damaged trace opened: one sentence, the window as it was;
4. the RPC field's tooltip (no ``-H 0.0.0.0`` advice; the protocol has no authentication).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import open_window, start  # noqa: E402


def main() -> None:
    _, shots, scratch = start(sys.argv[1])
    from specdec_studio.app.qt import QtCore, QtWidgets
    from specdec_studio.engine.models import catalog

    window = open_window(str(catalog.resolve("default")), scratch, chat=False)
    shots.wait(lambda: window.model.models.loaded and not window.model.machine.busy, 300)
    window.preferences.set_theme("dark")
    window.controls.set_values({"mode": "lookup", "max_tokens": 64})
    window.input.set_text("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n")
    window.input.run.click()
    shots.wait(lambda: window.model.machine.busy)
    shots.wait(lambda: not window.model.machine.busy, 300)
    video = scratch / "run.mp4"
    written = window.demo.export_video(video, (1280, 720), 4.0, 10)
    assert written == video and video.stat().st_size > 0, (written, window.error_label.text(),
                                                           window.statusBar().currentMessage())
    assert not window.input.stop.isEnabled() and window.input.run.isEnabled(), "the export left the window busy"
    shots.shoot("after-video-export-still-dark", 1.0)
    report = scratch / "run-report.html"
    report.write_text("an older report\n")
    window.demo.export_run("report", str(report))
    assert "an older report" not in report.read_text(), "the report was not replaced"
    damaged = scratch / "damaged.jsonl"
    window.demo.save_trace(str(damaged))  # the run's own trace, damaged as issue 79 found it
    lines = [json.loads(line) for line in damaged.read_text().splitlines()]
    for record in lines:
        if record.get("type") == "StepDone":
            record["data"]["extra"] = {"k": [1]}
        if record.get("type") == "RunFinished":
            record["data"]["stats"]["tokens_per_second"] = "x"
    damaged.write_text("".join(json.dumps(record) + "\n" for record in lines))
    window.demo.open_trace(str(damaged))
    shots.shoot("damaged-trace-one-sentence", 1.0)
    field = window.model_bar.rpc
    QtWidgets.QToolTip.showText(field.mapToGlobal(QtCore.QPoint(10, field.height())), field.toolTip(), field)
    shots.shoot("rpc-tooltip", 0.5)
    window.preferences.set_theme("system")
    window.close()


if __name__ == "__main__":
    main()
