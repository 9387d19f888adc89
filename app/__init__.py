"""SpecDec Studio's window: PySide6 and pyqtgraph over the Qt-free engine, which it drives only
through the engine thread (engine_worker) and the frozen events that thread passes back."""
