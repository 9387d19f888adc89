"""Run controls: mode, W/N/G, k and its adaptation, sampling, max tokens.

Values apply to the next run. A control whose value differs from the one the current (or last)
run used is marked pending (bold, with a dot) until the next run starts. An invalid combination
is explained under the controls and disables Run.
"""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtWidgets, Signal
from specdec_studio.app.widgets.slider_spin import SliderSpin
from specdec_studio.engine.config import (
    DEFAULT_K,
    DEFAULT_MAX_TOKENS_APP,
    DEFAULT_MODE,
    DEFAULT_N_BATCH,
    LOOKAHEAD_APP_DEFAULTS,
)
from specdec_studio.engine.strategies import registry



class ControlsPanel(QtWidgets.QWidget):
    changed = Signal()

    def __init__(self, n_batch: int = DEFAULT_N_BATCH, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.n_batch = n_batch
        self.draft_loaded = False
        self.refused_modes: dict[str, str] = {}  # mode -> why the loaded model cannot run it
        self.error: str | None = None  # why the current values cannot run, refreshed on every change
        self._applied: dict | None = None
        layout = QtWidgets.QVBoxLayout(self)

        self.mode = QtWidgets.QComboBox()
        for entry in registry.TABLE:
            self.mode.addItem(entry.label, entry.name)
        self.mode.setCurrentIndex(self.mode.findData(DEFAULT_MODE))
        mode_row = QtWidgets.QHBoxLayout()
        self.mode_label = QtWidgets.QLabel("Mode")
        mode_row.addWidget(self.mode_label)
        mode_row.addWidget(self.mode, 1)
        layout.addLayout(mode_row)

        self.lookahead_box = QtWidgets.QGroupBox("Lookahead")
        la = QtWidgets.QVBoxLayout(self.lookahead_box)
        w, n, g = LOOKAHEAD_APP_DEFAULTS
        self.W = SliderSpin("W", 1, 64, w, tooltip="Jacobi window: lookahead branches decoded each step")
        self.N = SliderSpin("N", 2, 10, n, tooltip="n-gram size: levels of the window and length of pooled n-grams")
        self.G = SliderSpin("G", 0, 64, g, tooltip="verification n-grams per step (0 = Jacobi only)")
        self.seed_pool = QtWidgets.QCheckBox("Seed n-gram pool from the prompt")
        self.seed_pool.setChecked(True)
        self.ordered_kv = QtWidgets.QCheckBox("Keep KV cells in position order (exact)")
        self.ordered_kv.setChecked(True)
        self.ordered_kv.setToolTip("Off: llama-lookahead's layout, which fragments the cache")
        for w in (self.W, self.N, self.G, self.seed_pool, self.ordered_kv):
            la.addWidget(w)
        self.batch_label = QtWidgets.QLabel()
        self.batch_label.setWordWrap(True)  # a narrow panel wraps it, never cuts it
        la.addWidget(self.batch_label)
        layout.addWidget(self.lookahead_box)

        self.auto_box = QtWidgets.QGroupBox("Auto")
        ab = QtWidgets.QVBoxLayout(self.auto_box)
        self.ngram_memory = QtWidgets.QCheckBox("remember past runs' n-grams")
        self.ngram_memory.setChecked(True)
        self.ngram_memory.setToolTip("Auto also drafts from what this model generated in past runs and turns "
                                     "(kept per model in the data folder), and learns each run's output. "
                                     "Verification keeps every run lossless either way.")
        ab.addWidget(self.ngram_memory)
        layout.addWidget(self.auto_box)

        self.spec_box = QtWidgets.QGroupBox("Speculative")
        sp = QtWidgets.QVBoxLayout(self.spec_box)
        self.k = SliderSpin("k", 1, 64, DEFAULT_K, tooltip="tokens drafted per step")
        self.adaptive = QtWidgets.QComboBox()
        for key, label in (("off", "fixed k"), ("tutorial", "adaptive: last-10 acceptance"),
                           ("heuristic", "adaptive: transformers heuristic")):
            self.adaptive.addItem(label, key)
        self.p_min = SliderSpin("p_min", 0.0, 0.99, 0.0, step=0.05, decimals=2,
                                tooltip="stop drafting when the draft's top probability falls below this")
        self.ngram = SliderSpin("n-gram", 1, 8, 3, tooltip="prompt lookup: longest n-gram matched")
        self.lookup = QtWidgets.QComboBox()
        for key, label in (("cache", "confident n-gram counts (llama-lookup)"),
                           ("latest", "latest match, always k (transformers)"),
                           ("simple", "llama.cpp ngram-simple: 12-token match"),
                           ("map-k", "llama.cpp ngram-map-k: 12-token key map"),
                           ("map-k4v", "llama.cpp ngram-map-k4v: dominant of 4 copies"),
                           ("mod", "llama.cpp ngram-mod: 24-token hash chain")):
            self.lookup.addItem(label, key)
        # the labels are long: the closed combo takes the panel's width, its list as wide as they need
        self.lookup.setSizeAdjustPolicy(QtWidgets.QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.lookup.setMinimumContentsLength(12)
        self.lookup.view().setMinimumWidth(self.lookup.view().sizeHintForColumn(0) + 24)
        self.lookup.setToolTip("Where prompt lookup drafts from: the most frequent continuation of the last "
                               "1-3 tokens, drafted only while it is confident; whatever followed their latest "
                               "match; or one of llama.cpp's draftless spec types, which match 12 or 24 tokens "
                               "and then copy up to 48 or 64 (set k high for them: k caps every draft)")
        self.draft_hint = QtWidgets.QLabel()
        self.draft_hint.setWordWrap(True)
        for w in (self.k, self.adaptive, self.p_min, self.ngram, self.lookup, self.draft_hint):
            sp.addWidget(w)
        layout.addWidget(self.spec_box)

        sampling = QtWidgets.QGroupBox("Sampling")
        sa = QtWidgets.QVBoxLayout(sampling)
        self.temperature = SliderSpin("temp", 0.0, 2.0, 0.0, step=0.05, decimals=2, tooltip="0 = greedy")
        self.top_p = SliderSpin("top-p", 0.05, 1.0, 1.0, step=0.05, decimals=2)
        self.seed = SliderSpin("seed", -1, 100000, -1, tooltip="-1 = a new random seed each run")
        self.max_tokens = SliderSpin("max", 1, 4096, DEFAULT_MAX_TOKENS_APP, tooltip="maximum tokens to generate")
        for w in (self.temperature, self.top_p, self.seed, self.max_tokens):
            sa.addWidget(w)
        layout.addWidget(sampling)

        self.pending_label = QtWidgets.QLabel("")
        self.pending_label.setStyleSheet("color: #b9770e;")
        self.error_label = QtWidgets.QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        layout.addWidget(self.pending_label)
        layout.addWidget(self.error_label)
        layout.addStretch(1)

        for combo in self._combos().values():
            combo.currentIndexChanged.connect(self._on_change)
        for w in self._value_widgets().values():
            if isinstance(w, SliderSpin):
                w.valueChanged.connect(self._on_change)
            elif isinstance(w, QtWidgets.QCheckBox):
                w.toggled.connect(self._on_change)
        self._on_change()

    # ------------------------------------------------------------------ values
    def _value_widgets(self) -> dict:
        return {"W": self.W, "N": self.N, "G": self.G, "seed_pool": self.seed_pool, "ordered_kv": self.ordered_kv,
                "k": self.k, "p_min": self.p_min, "ngram": self.ngram, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "max_tokens": self.max_tokens,
                "ngram_memory": self.ngram_memory}

    def _combos(self) -> dict[str, QtWidgets.QComboBox]:
        return {"mode": self.mode, "adaptive": self.adaptive, "lookup": self.lookup}

    def values(self) -> dict:
        out = {name: combo.currentData() for name, combo in self._combos().items()}
        for name, w in self._value_widgets().items():
            out[name] = w.isChecked() if isinstance(w, QtWidgets.QCheckBox) else w.value()
        return out

    def set_values(self, values: dict) -> None:
        for name, value in values.items():
            if name in self._combos():
                combo = self._combos()[name]
                i = combo.findData(value)
                if i >= 0:
                    combo.setCurrentIndex(i)
            elif name in self._value_widgets():
                w = self._value_widgets()[name]
                if isinstance(w, QtWidgets.QCheckBox):
                    w.setChecked(bool(value) if not isinstance(value, str) else value == "true")
                else:
                    w.setValue(type(w.value())(value))

    def config(self):
        from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
        from specdec_studio.engine.sampling import SamplingParams

        v = self.values()
        return RunConfig(
            mode=v["mode"],
            max_tokens=int(v["max_tokens"]),
            sampling=SamplingParams(temperature=float(v["temperature"]), top_p=float(v["top_p"]),
                                    seed=None if v["seed"] < 0 else int(v["seed"])),
            lookahead=LookaheadParams(int(v["W"]), int(v["N"]), int(v["G"]), v["seed_pool"], False, v["ordered_kv"]),
            speculative=SpeculativeParams(k=int(v["k"]), adaptive=v["adaptive"], k_max=max(16, int(v["k"])),
                                          p_min=float(v["p_min"]), ngram_max=int(v["ngram"]), lookup=v["lookup"],
                                          ngram_memory=bool(v["ngram_memory"])),
        )

    def validation_error(self) -> str | None:
        from specdec_studio.engine.errors import ConfigError

        try:
            self.config().validate(self.n_batch)
        except ConfigError as exc:
            return str(exc)
        if registry.mode(self.mode.currentData()).needs == "draft" and not self.draft_loaded:
            return "Speculative mode needs a draft model: choose one in the model bar."
        refused = self.refused_modes.get(self.mode.currentData())
        return _as_sentence(refused) if refused else None

    # ------------------------------------------------------------------ pending state
    def mark_applied(self, values: dict | None = None) -> None:
        """``values`` (default: the current ones) are what the run now starting uses."""
        self._applied = dict(values) if values is not None else self.values()
        self._refresh_pending()

    def _refresh_pending(self) -> None:
        pending = self.pending()
        for name, w in self._value_widgets().items():
            if isinstance(w, SliderSpin):
                w.set_pending(name in pending)
            else:
                font = w.font()
                font.setBold(name in pending)
                w.setFont(font)
        for name, combo in self._combos().items():
            font = combo.font()
            font.setBold(name in pending)
            combo.setFont(font)
        font = self.mode_label.font()
        font.setBold("mode" in pending)
        self.mode_label.setFont(font)
        self.pending_label.setText("Pending: changes apply to the next run" if pending else "")

    def pending(self) -> list[str]:
        current = self.values()
        return [] if self._applied is None else [k for k in current if current[k] != self._applied.get(k)]

    def _on_change(self, *_args) -> None:
        mode = registry.mode(self.mode.currentData())
        self.lookahead_box.setVisible(mode.settings == "lookahead")
        self.spec_box.setVisible(mode.draft_then_verify)
        self.auto_box.setVisible(mode.plans)
        self.p_min.setVisible(mode.needs != "")  # a model's drafts stop below p_min; an n-gram has no p
        lookup = mode.name == "lookup"  # prompt lookup's own choice of sources
        # llama.cpp's draftless types match n-grams of their own sizes
        self.ngram.setVisible(lookup and self.lookup.currentData() in ("cache", "latest"))
        self.lookup.setVisible(lookup)
        self.draft_hint.setVisible(mode.needs == "draft")
        self.draft_hint.setText("" if self.draft_loaded else "Choose a draft model in the model bar.")
        la = self.config().lookahead
        self.batch_label.setText(
            f"{la.n_sequences} sequences · up to {la.batch_size} tokens a step (batch {self.n_batch})"
        )
        self.error = self.validation_error()
        self.error_label.setText(self.error or "")
        self._refresh_pending()
        self.changed.emit()

    def set_draft_loaded(self, loaded: bool) -> None:
        self.draft_loaded = loaded
        self._on_change()

    def set_refused_modes(self, refused: dict[str, str]) -> None:
        """The modes the loaded model cannot run, disabled in the mode menu with the reason as
        their tooltip (a restored setting that names one says so instead of running)."""
        self.refused_modes = dict(refused)
        items = self.mode.model()
        for i in range(self.mode.count()):
            why = self.refused_modes.get(self.mode.itemData(i))
            items.item(i).setEnabled(why is None)
            self.mode.setItemData(i, _as_sentence(why) if why else None, QtCore.Qt.ToolTipRole)
        self._on_change()


def _as_sentence(clause: str) -> str:
    """The engine's refusal (a clause, as its errors read after "specdec: ") as a sentence on its own."""
    return clause[0].upper() + clause[1:] + "."
