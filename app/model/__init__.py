"""What the window shows, Qt-free: the activity machine, the window's model of typed slices that
notify their views, and the record of the run on show."""
