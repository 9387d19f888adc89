"""What past runs generated, as n-gram follower counts that last: across a chat's turns, across
runs and sessions (llama-lookup's dynamic cache, ``common/ngram-cache.cpp``).

One memory per model vocabulary, a file in the data folder named by the model file's hash. It
learns only what runs *generated* (a prompt's text is the user's; the context cache of each run
counts it anyway) and drafts only strictly confident followers, since its counts come from other
texts than the one being written. Bounded: past ``MAX_NGRAMS`` n-grams the least recently seen go
first. A file that cannot be read as a memory of this model (damaged, cut short, written by
another format or for another model) is set aside as ``<name>.damaged`` and the memory starts
empty; it is never the reason a run fails.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specdec_studio.engine.jsonfile import locked, made_beside

log = logging.getLogger(__name__)

FORMAT = 1
NGRAM_MIN, NGRAM_MAX = 2, 4  # a single token's followers across texts say too little
MAX_NGRAMS = 200_000  # about 30 MB in memory, 4 MB on disk
# llama-lookup's strict thresholds for its dynamic cache, by n-gram size (2, 3, 4): how often the
# n-gram was followed at all, and the share (percent) its most frequent follower must hold
MIN_SAMPLES = (4, 3, 2)
MIN_PERCENT = (75, 66, 66)


class NgramMemory:
    """n-gram -> {follower: count} over past runs' generated text, least recently seen first."""

    def __init__(self, path: Path | None, model_key: str, max_ngrams: int = MAX_NGRAMS) -> None:
        self.path, self.model_key, self.max_ngrams = path, model_key, max_ngrams
        self.followers: dict[tuple[int, ...], dict[int, int]] = {}
        self.problem: str | None = None  # why a file on disk was set aside, for the run's warning
        # the runs learnt since the file was last read or written, counted again onto what another
        # process saved meanwhile (one run's tokens: the memory is saved after every run)
        self._unsaved: list[tuple[tuple[int, ...], int]] = []
        self._seen: tuple | None = None  # the file's identity when this process last read or wrote it
        if path is not None and path.exists():
            self._load(path)  # a damaged or foreign file is set aside
            self._seen = _identity(path) if path.exists() else None

    def __len__(self) -> int:
        return len(self.followers)

    def learn(self, tokens: Sequence[int], start: int) -> None:
        """Count every n-gram of ``tokens`` whose follower is at ``start`` or later (the generated
        part; the n-gram itself may reach back into the prompt)."""
        if self.path is not None:
            self._unsaved.append((tuple(tokens), start))
        self._count(tokens, start)

    def _count(self, tokens: Sequence[int], start: int) -> None:
        followers = self.followers
        for i in range(max(start, NGRAM_MIN), len(tokens)):
            follower = tokens[i]
            for size in range(NGRAM_MIN, min(NGRAM_MAX, i) + 1):
                key = tuple(tokens[i - size:i])
                counts = followers.pop(key, None)  # re-inserted: the newest go last
                if counts is None:
                    counts = {}
                counts[follower] = counts.get(follower, 0) + 1
                followers[key] = counts
        excess = len(followers) - self.max_ngrams
        if excess > 0:  # the least recently seen are first in the dict's order
            for key in list(itertools.islice(followers, excess)):
                del followers[key]

    def confident(self, seq: Sequence[int]) -> tuple[int, int, float, int] | None:
        """For the longest n-gram ending ``seq`` with a strictly confident follower:
        (its size, the follower, its share, how often the n-gram was followed); else None."""
        for size in range(min(NGRAM_MAX, len(seq)), NGRAM_MIN - 1, -1):
            counts = self.followers.get(tuple(seq[len(seq) - size:]))
            if not counts:
                continue
            total = sum(counts.values())
            best = max(counts, key=counts.__getitem__)
            level = size - NGRAM_MIN
            if total >= MIN_SAMPLES[level] and 100 * counts[best] >= MIN_PERCENT[level] * total:
                return size, best, counts[best] / total, total
        return None

    def propose(self, context: Sequence[int], k: int) -> tuple[list[int], list[tuple[int, float, int]]]:
        """Up to ``k`` tokens, each the confident follower of the n-gram before it, with each one's
        evidence: (n-gram size, the follower's share, how often the n-gram was followed)."""
        seq = list(context[max(0, len(context) - NGRAM_MAX):])
        tokens: list[int] = []
        evidence: list[tuple[int, float, int]] = []
        while len(tokens) < k:
            found = self.confident(seq)
            if found is None:
                break
            size, token, share, total = found
            tokens.append(token)
            evidence.append((size, share, total))
            seq.append(token)
        return tokens, evidence

    # ---------------------------------------------------------------------------- on disk
    def save(self) -> None:
        """Write the memory atomically (a crash leaves the previous file whole), under a lock: where
        another process saved since this one read the file, this one's new runs are counted onto
        what it saved, so neither loses the other's."""
        if self.path is None:
            return
        with locked(self.path):
            if self.path.exists() and _identity(self.path) != self._seen:
                other = NgramMemory(self.path, self.model_key, self.max_ngrams)
                if other.problem is None:
                    self.followers = other.followers
                    for tokens, start in self._unsaved:
                        self._count(tokens, start)
            self._write()
            self._unsaved.clear()
            self._seen = _identity(self.path)

    def _write(self) -> None:
        keys = np.full((len(self.followers), NGRAM_MAX), -1, dtype=np.int32)
        offsets = np.zeros(len(self.followers) + 1, dtype=np.int64)
        tokens: list[int] = []
        counts: list[int] = []
        for row, (key, found) in enumerate(self.followers.items()):
            keys[row, :len(key)] = key
            tokens.extend(found)
            counts.extend(found.values())
            offsets[row + 1] = len(tokens)
        meta = json.dumps({"format": FORMAT, "model": self.model_key})
        with made_beside(self.path) as partial:
            with open(partial, "wb") as f:
                np.savez(f, meta=np.frombuffer(meta.encode(), dtype=np.uint8), keys=keys, offsets=offsets,
                         tokens=np.asarray(tokens, dtype=np.int32), counts=np.asarray(counts, dtype=np.int32))

    def _load(self, path: Path) -> None:
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                if meta.get("format") != FORMAT or meta.get("model") != self.model_key:
                    raise ValueError("written for another model or by another format")
                keys, offsets = data["keys"], data["offsets"]
                tokens, counts = data["tokens"], data["counts"]
                if (keys.ndim != 2 or keys.shape[1] != NGRAM_MAX or offsets.shape != (len(keys) + 1,)
                        or tokens.shape != counts.shape or offsets[-1] != len(tokens)
                        or np.any(np.diff(offsets) < 1) or np.any(counts < 1)):
                    raise ValueError("its tables do not agree")
            followers: dict[tuple[int, ...], dict[int, int]] = {}
            for row, start, end in zip(keys.tolist(), offsets[:-1].tolist(), offsets[1:].tolist()):
                key = tuple(t for t in row if t >= 0)
                if not NGRAM_MIN <= len(key) <= NGRAM_MAX:
                    raise ValueError("an n-gram of the wrong size")
                followers[key] = dict(zip(tokens[start:end].tolist(), counts[start:end].tolist()))
        except Exception as exc:  # noqa: BLE001 - whatever a damaged file raises, the memory starts empty
            aside = path.with_name(path.name + ".damaged")
            try:
                path.replace(aside)
            except OSError:
                pass
            self.problem = (f"The n-gram memory {path.name} could not be read ({exc}); it was set aside as "
                            f"{aside.name} and a new one started.")
            log.warning(self.problem)
            return
        self.followers = followers


def for_model(model_path: str | Path) -> NgramMemory:
    """The n-gram memory of a model's past runs, in the data folder, keyed by the model file's hash."""
    from specdec_studio.engine.models.identity import model_sha256
    from specdec_studio.engine.paths import data_root

    sha = model_sha256(model_path)
    return NgramMemory(data_root() / "ngram-memory" / f"{sha[:16]}.npz", sha)


def _identity(path: Path) -> tuple:
    """What tells a file written since: its inode, size and modification time."""
    found = path.stat()
    return found.st_ino, found.st_size, found.st_mtime_ns
