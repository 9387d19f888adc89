"""Mode name → strategy generator function."""

from __future__ import annotations

from collections.abc import Callable

from specdec_studio.engine.errors import ConfigError


def get(mode: str) -> Callable:
    if mode == "plain":
        from specdec_studio.engine.strategies.plain import run_plain

        return run_plain
    if mode == "lookahead":
        from specdec_studio.engine.strategies.lookahead import run_lookahead

        return run_lookahead
    if mode == "speculative":
        from specdec_studio.engine.strategies.speculative import run_speculative

        return run_speculative
    if mode == "lookup":
        from specdec_studio.engine.strategies.lookup import run_lookup

        return run_lookup
    if mode == "mtp":
        from specdec_studio.engine.strategies.mtp import run_mtp

        return run_mtp
    if mode == "auto":
        from specdec_studio.engine.strategies.auto import run_auto

        return run_auto
    raise ConfigError(f"mode {mode!r} is not available in this build")
