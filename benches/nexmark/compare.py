#!/usr/bin/env python3
"""Two or more weir binaries side by side on the same Nexmark events.

Each run starts one binary on the data directory that `run.py --workdir DIR`
left behind (`DIR/weir-data`), times one query exactly as `run.py` does
(compaction first, CPU counted until the node is idle again), and stops it;
the binaries take turns run after run, so that the machine's drift falls on
all of them alike. Prints every run and the median CPU-seconds per binary.

    python3 benches/nexmark/run.py --events 10000000 --repeat 1 --engines weir \\
        --queries q0 --workdir /tmp/nx10
    python3 benches/nexmark/compare.py --data-dir /tmp/nx10/weir-data \\
        --queries q0,q5 --repeat 3 OLD_BINARY NEW_BINARY

The binaries must read each other's data: compare builds that share the
storage format. A binary given as `BINARY@DATA_DIR` runs on a data directory
of its own instead, for changes to how data is stored, which compaction
applies as it rewrites files: generate the events once with each binary
(`run.py --weir-bin BINARY --workdir DIR`), then compare.
"""

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--data-dir", help="a weir data directory holding the Nexmark sources")
    ap.add_argument("--queries", default="q0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "weir-compare.log"),
                    help="where the nodes' output goes")
    args = ap.parse_args()
    results: dict = {}
    for query in args.queries.split(","):
        for n in range(args.repeat):
            for binary in args.binaries:
                path, _, data_dir = binary.partition("@")
                if not (data_dir or args.data_dir):
                    ap.error(f"{binary}: no data directory; give --data-dir or BINARY@DATA_DIR")
                weir = run.Weir(path, data_dir or args.data_dir, args.log)
                weir.start()
                try:
                    out = run.run_weir(weir, query)
                finally:
                    weir.stop()
                results.setdefault((query, binary), []).append(out)
                print(f"{query} run {n + 1} {binary}: {out['seconds']:.2f} s, {out['cpu_seconds']:.2f} CPU-s, "
                      f"peak {out['peak_kib']} KiB, checksum {out['checksum']}", flush=True)
    for (query, binary), outs in results.items():
        cpu = statistics.median(o["cpu_seconds"] for o in outs)
        print(f"median {query} {binary}: {cpu:.2f} CPU-s")


if __name__ == "__main__":
    main()
