"""The ``minitransformer`` command's entry point (pyproject.toml, ``[project.scripts]``).

It lives outside the ``minitransformer`` package on purpose: importing it imports nothing
else, so it is in place before the package loads (NumPy, the model, the tools: a tenth of a
second or more). A Ctrl-C in that time ends the command with one line and status 130, as it
does later, instead of a KeyboardInterrupt traceback. Everything else is
``minitransformer.cli.main``. (``python -m minitransformer`` imports the package before its
``__main__`` runs, so there a Ctrl-C in the first moments still gives Python's traceback.)
"""

import sys


def main() -> int:
    """Import the command line, catching Ctrl-C on the way; then run it."""
    try:
        from minitransformer.cli import main as cli_main
    except KeyboardInterrupt:
        try:
            print("\nminitransformer: interrupted (Ctrl-C) while starting", file=sys.stderr)
        except (OSError, ValueError, AttributeError):  # stderr closed
            pass
        return 130
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
