"""The window's widgets, one per view or control group: the token stream, the KV map, the
figures, the controls, the model bar, the chat list and the tuning and demo views."""
