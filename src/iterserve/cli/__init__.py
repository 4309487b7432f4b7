"""Command-line interface: I/O and argument parsing only."""
