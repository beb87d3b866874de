"""Reference solutions of the lesson exercises (see README.md)."""
