"""``python -m minitransformer ...`` runs the command line (see cli/__init__.py).

The package itself was imported before this file runs; a Ctrl-C while the rest of the
command line loads still ends with one line and status 130.
"""

import sys

try:
    from .cli import main
except KeyboardInterrupt:
    print("\nminitransformer: interrupted (Ctrl-C) while starting", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
