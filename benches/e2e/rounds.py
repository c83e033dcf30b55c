#!/usr/bin/env python3
"""The end-to-end CSV COPYed into one live view several times over.

A fresh node with the bid table and one view of queries.py; the harness's
CSV (run.py makes it) streamed in with COPY FROM STDIN --rounds times,
each to the end of FLUSH and a second after; prints the CPU-seconds of
each round. The first round is a COPY into an idle node; later rounds
show what a node that keeps loading spends.

  python3 benches/e2e/rounds.py --weir-bin B --query q2 --rounds 4
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import ingest  # noqa: E402
import queries as Q  # noqa: E402
from run import bid_columns, cpu_seconds  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weir-bin", required=True)
    ap.add_argument("--query", default="q2")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--csv", default=os.path.join(tempfile.gettempdir(), "weir-e2e", "events-2000000", "bid.csv"))
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="weir-rounds-")
    node = ingest.WeirNode(args.weir_bin, os.path.join(scratch, "data"), os.path.join(scratch, "weir.log"))
    node.start()
    try:
        pid = node.proc.pid
        with node.connect() as conn:
            conn.execute(f"CREATE TABLE bid ({bid_columns(args.query in Q.WINDOWED)}) APPEND ONLY")
            conn.execute(f"CREATE MATERIALIZED VIEW {args.query} AS {Q.weir_sql(args.query)}")
            time.sleep(1)
            spent = []
            for _ in range(args.rounds):
                start = cpu_seconds(pid)
                with conn.cursor() as cur, cur.copy("COPY bid FROM STDIN (FORMAT csv)") as copy, \
                        open(args.csv, "rb") as f:
                    while chunk := f.read(1 << 20):
                        copy.write(chunk)
                conn.execute("FLUSH")
                time.sleep(1)
                spent.append(round(cpu_seconds(pid) - start, 2))
            rows = conn.execute(f"SELECT count(*) FROM {args.query}").fetchone()[0]
    finally:
        node.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{os.path.basename(args.weir_bin)} {args.query}: CPU-s per round {spent}; {rows} rows in the view")
    return 0


if __name__ == "__main__":
    sys.exit(main())
