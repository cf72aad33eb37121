"""``python -m benchmarks [--quick | --config NAME] [--name NAME] [--out DIR] [--no-peers]``.

``python -m benchmarks --rerender results/latest.json`` rewrites a run's report only.
``python -m benchmarks scale --help``: the separate scale runs (:mod:`benchmarks.scale`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.config import CONFIGS
from benchmarks.run import RESULTS_DIR, rerender, run


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["scale"]:  # a command of its own, not part of the default run
        from benchmarks import scale

        return scale.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Runs the dpsql benchmark suite and writes JSON, markdown and PNG plots.")
    parser.add_argument("--quick", action="store_true",
                        help="the small CI configuration (under a minute; no peers)")
    parser.add_argument("--config", choices=sorted(CONFIGS), default=None,
                        help="configuration to run (default: full, or quick with --quick)")
    parser.add_argument("--name", default=None,
                        help="base name of the output files (default: 'latest' for the full "
                             "configuration, else the configuration's name)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR,
                        help=f"output directory (default: {RESULTS_DIR})")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument("--no-peers", dest="peers", action="store_false", default=None,
                       help="skip SmartNoise SQL")
    peers.add_argument("--peers", dest="peers", action="store_true",
                       help="run SmartNoise SQL even if the configuration skips it")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--rerender", type=Path, default=None, metavar="JSON",
                        help="only rewrite the summary, markdown and plots of a finished run "
                             "from its JSON file")
    parser.epilog = ("python -m benchmarks scale --help: DuckDB at 100M rows, Spark at "
                     "TPC-H sf 3-10 (a separate command)")
    args = parser.parse_args(argv)
    if args.rerender is not None:
        results = rerender(args.rerender)
        print(f"wrote {', '.join(results['files'].values())} in {args.rerender.parent}")
        return 0
    config = args.config or ("quick" if args.quick else "full")
    name = args.name or ("latest" if config == "full" else config)
    results = run(config, args.out, progress=not args.no_progress, name=name, peers=args.peers)
    print(f"wrote {', '.join(str(args.out / f) for f in results['files'].values())} "
          f"in {results['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
