"""The dialog that starts draft training: which draft to start from (optionally only its first
layers), which prompts the target writes the training text from, how many steps, where to write
the result. The training itself runs on the engine thread (``engine/drafts/distill.py``)."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.qt import QtWidgets


class DistillDialog(QtWidgets.QDialog):
    def __init__(self, drafts: list[str], target: str, models_dir: Path,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a draft for this target")
        self.start = QtWidgets.QComboBox()
        for path in [target, *drafts]:
            self.start.addItem(Path(path).name + (" (the target itself)" if path == target else ""), path)
        if drafts:
            self.start.setCurrentIndex(1)
        self.keep_layers = QtWidgets.QSpinBox()
        self.keep_layers.setRange(0, 256)
        self.keep_layers.setSpecialValueText("all")
        self.keep_layers.setToolTip("Start from the draft's first L transformer blocks only: a cheaper draft")
        self.prompts = QtWidgets.QComboBox()
        self.prompts.addItem("shipped prompt sets (all categories)", "shipped")
        self.prompts.addItem("a JSON-lines file…", "file")
        self.prompts.activated.connect(self._prompts_chosen)
        self.prompt_file: str | None = None
        self.count = QtWidgets.QSpinBox()
        self.count.setRange(2, 500)
        self.count.setValue(12)
        self.tokens = QtWidgets.QSpinBox()
        self.tokens.setRange(16, 512)
        self.tokens.setValue(96)
        self.steps = QtWidgets.QSpinBox()
        self.steps.setRange(1, 100000)
        self.steps.setValue(40)
        self.steps.setToolTip("Optimizer steps of 64 tokens (about 1.3 s each for SmolLM2 on 2 cores)")
        self.output = QtWidgets.QLineEdit(str(models_dir / (Path(target).stem + ".distilled-Q8_0.gguf")))
        form = QtWidgets.QFormLayout(self)
        form.addRow("Start from", self.start)
        form.addRow("Keep layers", self.keep_layers)
        form.addRow("Prompts", self.prompts)
        form.addRow("How many prompts", self.count)
        form.addRow("Tokens the target writes each", self.tokens)
        form.addRow("Training steps", self.steps)
        form.addRow("Write to", self.output)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.Ok | QtWidgets.QDialogButtonBox.Cancel)
        buttons.button(QtWidgets.QDialogButtonBox.Ok).setText("Train")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def _prompts_chosen(self, index: int) -> None:
        if self.prompts.itemData(index) == "file":
            path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Training prompts", "", "JSON lines (*.jsonl)")
            if path:
                self.prompt_file = path
                self.prompts.setItemText(1, Path(path).name)
            else:
                self.prompts.setCurrentIndex(0)

    def spec(self) -> dict:
        return {"draft": self.start.currentData(), "keep_layers": self.keep_layers.value() or None,
                "prompts": self.prompt_file if self.prompts.currentData() == "file" and self.prompt_file else "shipped",
                "count": self.count.value(), "n_tokens": self.tokens.value(), "steps": self.steps.value(),
                "output": self.output.text().strip()}
