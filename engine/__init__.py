"""SpecDec Studio's Qt-free core: llama.cpp decoding strategies and what they report.

Nothing in this package imports Qt; the GUI in ``app/`` talks to it only through
:class:`engine.session.Session` and the frozen events of :mod:`engine.events`.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
