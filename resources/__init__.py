"""Data files shipped with SpecDec Studio (prompt sets, demo traces, the icon), found with importlib.resources."""
