"""Finding the setting that wins on this machine: the batch-cost profile, the cost model that
predicts a setting's speed-up from it, prompt sets, and sweeps that measure settings against plain."""
