"""The window (Qt): MainWindow composing one controller per job, its layout, menus and settings."""
