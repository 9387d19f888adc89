"""``specdec``: the headless command line, one module per subcommand (``main`` parses and
dispatches, ``common`` holds what the subcommands that run a model share). Every figure is also
available as JSON."""

from specdec_studio.engine.cli.main import main

__all__ = ["main"]
