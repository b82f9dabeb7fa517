"""The command line, the composition root, and the demo."""
