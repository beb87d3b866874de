"""``python -m minitransformer.tools.bench``: the ``bench`` command on its own (the same flags as
``minitransformer bench``), and the two worker modes the benchmark spawns:

    python -m minitransformer.tools.bench --worker IMPL PRESET DEVICE        (see worker.py)
    python -m minitransformer.tools.bench --dp-worker PRESET BATCH SECONDS THREADS PARALLEL
                                                                       (see data_parallel.py)

Like the CLI, each owns its process and tunes it (``host.tune_host()``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from ...backend import host
from ...errors import MiniTransformerError, Terminated, raise_terminated
from .command import main
from .data_parallel import data_parallel_worker
from .options import add_arguments
from .worker import worker_main


def _run(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        return worker_main(*argv[1:4])  # tunes the host itself (ours only)
    host.tune_host()
    if argv[:1] == ["--dp-worker"]:
        preset, batch, seconds, threads, parallel = argv[1:6]
        found = data_parallel_worker(preset, int(batch), float(seconds), int(threads),
                                     parallel == "1")  # fmt: skip
        if found is not None:
            print(json.dumps(found), flush=True)
        return 0
    parser = argparse.ArgumentParser(prog="python -m minitransformer.tools.bench")
    args = add_arguments(parser).parse_args(argv)
    signal.signal(signal.SIGTERM, raise_terminated)  # unwinds, so the workers are killed
    try:
        return main(args)
    except KeyboardInterrupt:
        print("bench: interrupted (Ctrl-C)", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated:
        print("bench: stopped by SIGTERM", file=sys.stderr)
        return 128 + signal.SIGTERM
    except (MiniTransformerError, OSError, ValueError) as err:
        print(f"bench: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1:]))
