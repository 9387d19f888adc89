"""Exceptions the engine raises for things a user can fix.

Every message is one sentence that names the problem and what to do about it; callers (CLI, app)
show ``str(error)`` as it is and never a traceback.
"""


class SpecDecError(Exception):
    """Base class of every user-facing engine error."""


class ModelFileError(SpecDecError):
    """A model path is missing, not a GGUF file, truncated or otherwise unloadable."""


class VocabMismatchError(SpecDecError):
    """A draft model's vocabulary differs from the target's."""


class ConfigError(SpecDecError):
    """A run parameter is out of range or the combination is invalid."""


class PromptError(SpecDecError):
    """The prompt is empty or does not fit in the context."""


class ContextAllocationError(SpecDecError):
    """The requested context (KV cache) does not fit in memory."""


class DecodeError(SpecDecError):
    """llama_decode failed for a reason other than a full context or a cancel."""


class ModelFetchError(SpecDecError):
    """A model could not be downloaded or failed its checksum."""


def not_utf8(name: str, exc: UnicodeDecodeError) -> str:
    """The sentence for a file that is not UTF-8 text: its name, the first bad byte and where."""
    return (f"{name} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8")
