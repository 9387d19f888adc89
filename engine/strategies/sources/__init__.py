"""Draft sources behind one interface (llama.cpp's ``common_speculative_impl`` in miniature): each
proposes a continuation of the context with its signals (``base.Source``, ``base.Proposal``), and
Auto's planner walks a list of them without naming one (``strategies.auto.sources.Sources``).
Adding a source is one module here (its class declares the kinds of proposal it makes: name,
family, label, prior) and one entry in ``strategies.auto.sources.SOURCE_TYPES``."""
