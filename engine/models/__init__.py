"""Model files: finding them in the cache, fetching them from PyPI, checking a GGUF before llama.cpp
reads it, opening it, requantising it, and the identities caches are keyed by."""
