"""The conversation: chat templates, the messages and the exact token ids the model saw, turns
decoded on a session, their store on disk and their transcripts."""
