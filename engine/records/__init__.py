"""Recorded runs: traces written and replayed, the demo's shipped traces, and a run's report as
documents and HTML pages."""
