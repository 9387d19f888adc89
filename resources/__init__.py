"""Data files shipped with SpecDec Studio (prompt sets, screenshots), found with importlib.resources."""
