#!/usr/bin/env python3
"""Recovery benchmark: how soon a killed node serves queries again.

1. A release weir node loads --rows rows `(id, grp, pad)` with --pad-bytes of
   padding into a keyed table, and a view keeps, per id, a count and the
   largest pad (over a table that can change, so each group keeps its values:
   large operator state). FLUSH; the data directory's size is recorded.
2. The node restarts with epochs only on demand (--barrier-interval-ms of an
   hour), and for --replay-seconds a loader keeps writing new rows (COPY, no
   FLUSH): that log is committed but no view has read it.
3. SIGKILL. The node starts again with its defaults, and the script measures
   the time from starting the process to (a) accepting a connection, (b) a
   point read of the view answering, and (c) FLUSH returning, i.e. the view
   having replayed the whole un-checkpointed log. The view is then checked
   against the batch query.

Requirements: Python 3.9+, psycopg 3, a release build of weir. Linux only.

Examples:
  python3 benches/recovery.py                              # ~1 GiB, 10 s of log
  python3 benches/recovery.py --rows 200000 --replay-seconds 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402
from windows import DEFAULT_WEIR_BIN, metric  # noqa: E402

psycopg = ingest.psycopg

TABLE = "CREATE TABLE items (id BIGINT PRIMARY KEY, grp BIGINT, pad VARCHAR)"
VIEW = """CREATE MATERIALIZED VIEW per_item AS
SELECT id, count(*) AS n, max(pad) AS pad FROM items GROUP BY id"""
CHECK_VIEW = "SELECT count(*), sum(n) FROM per_item"
CHECK_BATCH = "SELECT count(DISTINCT id), count(*) FROM items"


def log(msg: str) -> None:
    print(f"[recovery] {msg}", file=sys.stderr, flush=True)


def rows_csv(start: int, end: int, pad: str) -> bytes:
    return "".join(f"{i},{i % 1000},{pad}{i}\n" for i in range(start, end)).encode()


def copy(conn, start: int, end: int, pad: str) -> None:
    with conn.cursor().copy("COPY items FROM STDIN WITH (FORMAT csv)") as cp:
        cp.write(rows_csv(start, end, pad))


class Node:
    """A weir process on a data directory that outlives it."""

    def __init__(self, args, data_dir: str, extra: list[str]):
        self.port, self.http_port = ingest.free_ports(2)
        cmd = [args.weir_bin, "serve", "--listen", f"127.0.0.1:{self.port}",
               "--http-listen", f"127.0.0.1:{self.http_port}", "--data-dir", data_dir, *extra]
        self.log = open(os.path.join(os.path.dirname(data_dir), "weir.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("weir exited at start")
                time.sleep(0.005)
        raise RuntimeError("weir did not start within 120 s")

    def connect(self):
        return psycopg.connect(f"host=127.0.0.1 port={self.port} user=bench dbname=bench",
                               autocommit=True, prepare_threshold=None)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.log.close()


def du(path: str) -> int:
    out = subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--pad-bytes", type=int, default=240)
    p.add_argument("--replay-seconds", type=float, default=10.0)
    p.add_argument("--chunk", type=int, default=20_000)
    p.add_argument("--tmp-dir", default=None)
    args = p.parse_args(argv)
    pad = "x" * args.pad_bytes

    workdir = tempfile.mkdtemp(prefix="weir-bench-recovery-", dir=args.tmp_dir)
    data_dir = os.path.join(workdir, "data")
    try:
        first = Node(args, data_dir, [])
        with first.connect() as conn:
            conn.execute(TABLE)
            conn.execute(VIEW)
            t0 = time.monotonic()
            for start in range(0, args.rows, args.chunk):
                copy(conn, start, min(start + args.chunk, args.rows), pad)
            conn.execute("FLUSH")
            log(f"loaded {args.rows:,} rows and the view in {time.monotonic() - t0:.1f}s")
        state_entries = metric(first, 'weir_view_state_entries{view="per_item"}', "/state")
        first.stop()
        size = du(data_dir)
        log(f"data directory {size / 2**30:.2f} GiB, view state entries {state_entries}")

        # Epochs only on demand: what the loader writes now stays unread by the view.
        second = Node(args, data_dir, ["--barrier-interval-ms=3600000"])
        replayed = 0
        with second.connect() as conn:
            t0 = time.monotonic()
            next_id = args.rows
            while time.monotonic() - t0 < args.replay_seconds:
                copy(conn, next_id, next_id + args.chunk, pad)
                next_id += args.chunk
                replayed += args.chunk
        log(f"wrote {replayed:,} rows in {args.replay_seconds:.0f}s that no view has read; SIGKILL")
        second.kill()

        started = time.monotonic()
        third = Node(args, data_dir, [])
        accepting = time.monotonic() - started
        with third.connect() as conn:
            conn.execute("SELECT n FROM per_item WHERE id = 1").fetchall()
            serving = time.monotonic() - started
            conn.execute("FLUSH")
            caught_up = time.monotonic() - started
            view = tuple(conn.execute(CHECK_VIEW).fetchone())
            batch = tuple(conn.execute(CHECK_BATCH).fetchone())
        third.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if view != batch:
        raise RuntimeError(f"view differs after recovery: {view} vs {batch}")
    print(f"""### Recovery after SIGKILL

`python3 benches/recovery.py --rows {args.rows} --pad-bytes {args.pad_bytes} --replay-seconds {args.replay_seconds:.0f}`

| Measure | Value | Goal |
|---|---:|---|
| Data directory at the kill (GiB) | {size / 2**30:.2f} | ~1 |
| View state entries | {state_entries:,} | |
| Rows written but not read by the view (log to replay) | {replayed:,} ({args.replay_seconds:.0f} s of writes) | |
| Start to accepting connections (s) | {accepting:.2f} | |
| Start to a view's point read answering (s) | {serving:.2f} | < 5 s {"met" if serving < 5 else "**missed**"} |
| Start to FLUSH returning: the log replayed into the view (s) | {caught_up:.2f} | |

After recovery the view equalled the batch query ({view[0]:,} groups, {view[1]:,} rows).
""")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
