"""An answer's text as a client may have it while it streams: cut at the first stop string, and held
back while its end could still be the start of one (OpenAI's ``stop``: the stop string itself is
never sent). Each token goes out with the text it completes; the one a stop string cuts goes out
clipped."""

from __future__ import annotations


class StopText:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.text = ""  # every token's text so far (up to the cut, once stopped)
        self.sent = 0  # characters of it released
        self.stopped = False
        self._held: list[tuple[int, dict]] = []  # (end offset, token) of the tokens not released yet
        self.n_tokens = 0  # tokens released

    def feed(self, tokens: list[tuple[str, dict]]) -> tuple[str, list[dict]]:
        """Add ``tokens`` ((text, what to send of it)); returns the text and tokens releasable now."""
        if self.stopped:
            return "", []
        for text, token in tokens:
            self.text += text
            self._held.append((len(self.text), token))
        end = len(self.text)
        if self.stops:
            found = [i for stop in self.stops if (i := self.text.find(stop, max(0, self.sent - len(stop) + 1))) >= 0]
            if found:
                end = min(found)
                self.stopped = True
                self.text = self.text[:end]
            else:  # the longest end of the text that begins a stop string waits for the next tokens
                end -= max((n for stop in self.stops for n in range(1, len(stop))
                            if self.text.endswith(stop[:n])), default=0)
        return self._release(end)

    def flush(self) -> tuple[str, list[dict]]:
        """Everything still held (the answer ended)."""
        return self._release(len(self.text))

    def _release(self, end: int) -> tuple[str, list[dict]]:
        text = self.text[self.sent:end]
        self.sent = max(self.sent, end)
        tokens = []
        while self._held and (self._held[0][0] <= end or self.stopped):
            token_end, token = self._held.pop(0)
            if token_end > end:  # the token a stop string cut: what of it stands
                start = token_end - len(token["text"])
                if start >= end:
                    continue
                token = {**token, "text": token["text"][:end - start]}
            tokens.append(token)
        self.n_tokens += len(tokens)
        return text, tokens
