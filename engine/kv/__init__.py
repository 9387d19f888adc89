"""The KV-cache mirror: which cell holds which position for which sequences, and its check against
llama.cpp's own dump."""
