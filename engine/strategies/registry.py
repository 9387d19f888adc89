"""Mode name → strategy generator function."""

from __future__ import annotations

from collections.abc import Callable

from engine.errors import ConfigError


def get(mode: str) -> Callable:
    if mode == "plain":
        from engine.strategies.plain import run_plain

        return run_plain
    if mode == "lookahead":
        from engine.strategies.lookahead import run_lookahead

        return run_lookahead
    raise ConfigError(f"mode {mode!r} is not available in this build")
