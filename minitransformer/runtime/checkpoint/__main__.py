"""``python -m minitransformer.runtime.checkpoint upgrade OLD.npz [--out NEW.safetensors]``:
convert a checkpoint of an earlier version (``.npz``, format 1 or 2) to the current format, written
next to it (``checkpoint.npz`` -> ``checkpoint.safetensors``, which a run directory then
uses). A format-1 file's metadata is not covered by its checksum: upgrade only files you
trust. Never overwrites a file (of two upgrades to one target started together, one writes
it and the other is refused); the old one is left as it is. A mistake (a missing file, a FIFO
or a device, a target that exists, a folder that cannot be written) is one line on stderr
and exit status 2, as for the ``minitransformer`` command.
"""

from __future__ import annotations

import argparse
import sys

from ...errors import MiniTransformerError
from .upgrade import upgrade_checkpoint


def main(argv: list[str] | None = None) -> int:
    """Run the command; 0 on success, else 2 (argparse's status for a usage error) with a
    one-line message on stderr, or 130 for Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m minitransformer.runtime.checkpoint",
        description="Convert an older .npz checkpoint to the current .safetensors format.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    upgrade = commands.add_parser("upgrade", help="write OLD.npz as OLD.safetensors")
    upgrade.add_argument("file", help="the .npz checkpoint (or a run directory holding one)")
    upgrade.add_argument("--out", help="where to write (default: FILE with .safetensors)")
    args = parser.parse_args(argv)
    try:
        written = upgrade_checkpoint(args.file, args.out)
    except (MiniTransformerError, OSError) as err:  # OSError: none is expected; still one line
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nerror: interrupted (Ctrl-C); nothing was written", file=sys.stderr)
        return 130
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
