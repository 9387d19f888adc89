"""Decoding strategies. Each is a generator that owns its loop and yields events; nothing else."""
