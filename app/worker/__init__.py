"""The engine's side of the window, Qt-free: the thread (or child process) that owns the session,
the jobs it runs, their Stop flags and step gate, and the messages that cross to the window."""
