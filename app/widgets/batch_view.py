"""The Batch view: many prompts decoded together, P at a time in one context (``engine/parallel.py``).

One lane per slot shows the prompt it decodes now, its tokens coloured by source as they arrive,
and the slot's figures; the KV map shows the P sequences sharing the cache; the list below keeps
every finished prompt. The mode, k and token budget are the run controls'.
"""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtWidgets, Qt
from specdec_studio.app.widgets.kv_map import KvMapView
from specdec_studio.app.widgets.stream_lane import StreamLane

MAX_PARALLEL = 8


class SlotLane(StreamLane):
    def __init__(self, slot: int, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(f"slot {slot}: idle", margin=2, parent=parent)
        self.slot = slot
        self.job_id: str | None = None
        self.n_tokens = self.n_accepted = self.n_drafted = 0
        # a served request's own Stop: its client gets what was decoded, the server goes on
        self.stop_button = QtWidgets.QPushButton("Stop this request")
        self.stop_button.setToolTip("End this request now: its client gets the answer so far; the server goes on")
        self.stop_button.hide()
        row = QtWidgets.QHBoxLayout()
        self.layout().removeWidget(self.counters)
        row.addWidget(self.counters, 1)
        row.addWidget(self.stop_button)
        self.layout().addLayout(row)

    def start(self, job_id: str, n_prompt: int, *, stoppable: bool = False) -> None:
        self.stream.clear_stream()
        self.job_id = job_id
        self.title.setText(f"slot {self.slot}: {job_id} ({n_prompt} prompt tokens)")
        self.n_tokens = self.n_accepted = self.n_drafted = 0
        self.counters.setText("")
        self.stop_button.setEnabled(True)
        self.stop_button.setVisible(stoppable)

    def add(self, event) -> None:
        self.append_step(event)
        self.n_tokens += len(event.tokens)
        self.n_drafted += event.n_drafted
        self.n_accepted += event.n_accepted
        acceptance = f" · accepted {self.n_accepted}/{self.n_drafted}" if self.n_drafted else ""
        self.counters.setText(f"{self.n_tokens} tokens · step {event.step}{acceptance}")

    def finish(self, event) -> None:
        self.title.setText(self.title.text() + f" — {event.finish_reason}")
        self.stop_button.hide()


class BatchView(QtWidgets.QWidget):
    batch_requested = QtCore.Signal(str, int, int)  # prompt source ("shipped" or a path), count, parallel
    serve_requested = QtCore.Signal(int, int)  # port, parallel
    stop_requested = QtCore.Signal(str)  # a served request's id: end it, the server goes on

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.source = QtWidgets.QComboBox()
        self.source.addItem("shipped prompt sets", "shipped")
        self.source.addItem("a JSON-lines file…", "file")
        self.source.activated.connect(self._source_chosen)
        self.count = QtWidgets.QSpinBox()
        self.count.setRange(1, 1000)
        self.count.setValue(8)
        self.count.setToolTip("How many prompts to decode (from the start of the set)")
        self.parallel = QtWidgets.QSpinBox()
        self.parallel.setRange(1, MAX_PARALLEL)
        self.parallel.setValue(4)
        self.parallel.setToolTip("Prompts decoded at once: each has its own sequence of the shared context")
        self.run_button = QtWidgets.QPushButton("Run batch")
        self.run_button.setToolTip("Decode the prompts with the run controls' mode, k and max tokens")
        self.run_button.clicked.connect(self._request)
        bar = QtWidgets.QHBoxLayout()
        for label, w in (("Prompts", self.source), ("count", self.count), ("at once (P)", self.parallel)):
            bar.addWidget(QtWidgets.QLabel(label))
            bar.addWidget(w)
        bar.addWidget(self.run_button)
        bar.addStretch(1)
        # serving on a row of its own: both rows fit the centre panel of a 1366-pixel screen
        serve_bar = QtWidgets.QHBoxLayout()
        self.port = QtWidgets.QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(8080)
        self.port.setToolTip("The port of 127.0.0.1 the OpenAI-compatible API listens on")
        self.serve_button = QtWidgets.QPushButton("Serve")
        self.serve_button.setToolTip("Answer OpenAI API requests from this machine's tools (http://127.0.0.1:PORT/v1) "
                                     "with the loaded model, P at a time, each with the run controls' mode and its own "
                                     "drafting, shown here as they decode; Stop ends the server")
        self.serve_button.clicked.connect(lambda: self.serve_requested.emit(self.port.value(), self.parallel.value()))
        serve_bar.addWidget(QtWidgets.QLabel("Or serve the OpenAI API, P at once, on 127.0.0.1 port"))
        serve_bar.addWidget(self.port)
        serve_bar.addWidget(self.serve_button)
        serve_bar.addStretch(1)
        self.summary = QtWidgets.QLabel("Many prompts share one context: one batch a step carries every slot's "
                                        "token and drafts.")
        self.summary.setWordWrap(True)
        self.lanes_box = QtWidgets.QWidget()
        self.lanes_layout = QtWidgets.QGridLayout(self.lanes_box)
        self.lanes_layout.setContentsMargins(0, 0, 0, 0)
        self.lanes: list[SlotLane] = []
        self.kv_map = KvMapView()
        self.kv_map.hover_label.hide()
        self.kv_map.plot.setMinimumHeight(150)
        self.finished = QtWidgets.QListWidget()
        self.finished.setMinimumWidth(120)
        self.finished.setWordWrap(True)  # a request's id and figures read whole in a narrow panel
        self.finished.setToolTip("Each finished prompt or request, the newest first: its tokens, tokens per second, "
                                 "tokens per step (plain decoding makes 1) and acceptance")
        finished_box = QtWidgets.QWidget()
        finished_layout = QtWidgets.QVBoxLayout(finished_box)
        finished_layout.setContentsMargins(0, 0, 0, 0)
        finished_layout.addWidget(QtWidgets.QLabel("Finished"))
        finished_layout.addWidget(self.finished, 1)
        lower = QtWidgets.QSplitter(Qt.Horizontal)
        lower.addWidget(self.kv_map)
        lower.addWidget(finished_box)
        lower.setSizes([600, 300])
        split = QtWidgets.QSplitter(Qt.Vertical)
        split.addWidget(self.lanes_box)
        split.addWidget(lower)
        split.setSizes([420, 320])
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addLayout(serve_bar)
        layout.addWidget(self.summary)
        layout.addWidget(split, 1)
        self.path: str | None = None
        self.serving = False  # the slots' requests come from the server (each may be stopped alone)
        self.n_tokens = self.n_drafted = 0  # over the whole batch
        self._set_lanes(self.parallel.value())

    def _source_chosen(self, index: int) -> None:
        if self.source.itemData(index) == "file":
            path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Prompts (one JSON object per line)", "",
                                                            "JSON lines (*.jsonl)")
            if path:
                self.path = path
                self.source.setItemText(1, path.rsplit("/", 1)[-1])
            else:
                self.source.setCurrentIndex(0)

    def _request(self) -> None:
        source = self.path if self.source.currentData() == "file" and self.path else "shipped"
        self.batch_requested.emit(source, self.count.value(), self.parallel.value())

    def _set_lanes(self, parallel: int) -> None:
        for lane in self.lanes:  # deleted, not unparented: a widget with no parent is a window of its own
            self.lanes_layout.removeWidget(lane)
            lane.deleteLater()
        self.lanes = [SlotLane(i) for i in range(parallel)]
        columns = 2 if parallel > 2 else parallel
        for i, lane in enumerate(self.lanes):
            self.lanes_layout.addWidget(lane, i // columns, i % columns)
            lane.stop_button.clicked.connect(lambda _=False, lane=lane: self._stop_lane(lane))

    def _stop_lane(self, lane: SlotLane) -> None:
        if lane.job_id is not None:
            lane.stop_button.setEnabled(False)  # once: the request ends at the engine's next step
            self.stop_requested.emit(lane.job_id)

    # ------------------------------------------------------------------ events
    def on_started(self, event) -> None:
        self.serving = False
        self._set_lanes(event.parallel)
        self.finished.clear()
        self.n_tokens = self.n_drafted = 0
        self.kv_map.begin_run(0, 0)
        self.summary.setText(f"{event.n_jobs} prompts, {event.parallel} at a time, mode "
                             f"{event.config.get('mode')}…")

    def on_job_started(self, event) -> None:
        if 0 <= event.slot < len(self.lanes):
            self.lanes[event.slot].start(event.job_id, event.n_prompt, stoppable=self.serving)

    def on_step(self, event) -> None:
        self.n_tokens += len(event.tokens)
        self.n_drafted += event.n_drafted
        if 0 <= event.slot < len(self.lanes):
            self.lanes[event.slot].add(event)

    def on_job_finished(self, event) -> None:
        if 0 <= event.slot < len(self.lanes):
            self.lanes[event.slot].finish(event)
        stats = event.stats
        detail = stats.get("error", "")
        speed = f", {stats['tokens_per_second']:.1f} tok/s" if stats.get("tokens_per_second") else ""
        drafts = f", accepted {stats.get('n_accept', 0)}/{stats['n_drafted']}" if stats.get("n_drafted") else ""
        # a slot's step costs about one plain step of the batch: tokens per step is its speed-up in steps
        per_step = f", {stats['tokens_per_step']:.2f} tokens/step (plain 1)" if stats.get("tokens_per_step") else ""
        self.finished.insertItem(0, f"{event.job_id}: {len(event.token_ids)} tokens{speed}{per_step}{drafts}, "
                                    f"{event.finish_reason}" + (f" — {detail}" if detail else ""))

    def on_serving(self, event) -> None:
        """The server listens: its requests take the slots below as they come."""
        self.serving = True
        self._set_lanes(event.parallel)
        self.finished.clear()
        self.summary.setText(f"Serving {event.model} at {event.url}: requests take the {event.parallel} slots "
                             f"below as they come ({event.slot_cells} cells each); Stop ends the server")

    def on_finished(self, event) -> None:
        for lane in self.lanes:
            lane.stop_button.hide()
        s = event.stats
        self.summary.setText(f"{s['n_jobs']} prompts, {s['parallel']} at a time: {s['n_predict']} tokens in "
                             f"{s['t_total_s']:.2f} s = {s['tokens_per_second']:.1f} tokens/s together · "
                             f"{s['steps']} steps of {s['mean_batch_tokens']:.1f} tokens on average")
        for lane in self.lanes:
            lane.stream.scroll_to_end()

    def scroll(self) -> None:
        for lane in self.lanes:
            lane.stream.scroll_to_end()
