"""``specdec serve``: an OpenAI-compatible HTTP server over the engine's batch slots, every request
decoded with its own drafting (Auto by default), its tokens' sources in the answer."""
