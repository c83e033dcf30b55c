#!/usr/bin/env python3
"""Disk use of an upsert-heavy table before and after its log is folded.

Starts a weir node with --manual-clock in a temporary directory, creates
`kv (k INT PRIMARY KEY, v BIGINT)` with --keys rows, then rewrites every row
--rounds times (`UPDATE kv SET v = v + 1`), so the log holds about
2 x keys x rounds records while the table holds --keys rows. It reports
the data directory's size after the writes, then after moving the clock
past the table's retention (one hour) and one FLUSH, each time after a
full RocksDB compaction (`VACUUM`) so that deleted entries are gone
from the files. The table is checked after the fold: every row has
v = rounds.

Usage: python3 benches/log_size.py [--weir target/release/weir]
       [--keys 10000] [--rounds 100]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import psycopg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                pass
    return total


def compact(conn: psycopg.Connection) -> None:
    """Compact the whole store: `VACUUM` as the bootstrap superuser."""
    conn.execute("VACUUM")


def connect(port: int) -> psycopg.Connection:
    deadline = time.time() + 60
    while True:
        try:
            return psycopg.connect(host="127.0.0.1", port=port, user="weir", autocommit=True)
        except psycopg.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weir", default="target/release/weir")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-log-size-") as data:
        port, http = free_port(), free_port()
        server = subprocess.Popen(
            [args.weir, "--listen", f"127.0.0.1:{port}", "--http-listen", f"127.0.0.1:{http}",
             "--data-dir", data, "--manual-clock"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with connect(port) as conn:
                compact(conn)
                empty = dir_bytes(data)
                conn.execute("CREATE TABLE kv (k INT PRIMARY KEY, v BIGINT)")
                with conn.cursor().copy("COPY kv FROM STDIN") as copy:
                    for k in range(args.keys):
                        copy.write_row((k, 0))
                started = time.time()
                for _ in range(args.rounds):
                    conn.execute("UPDATE kv SET v = v + 1")
                written = time.time() - started
                conn.execute("FLUSH")
                compact(conn)
                before = dir_bytes(data)
                conn.execute("ADVANCE CLOCK BY INTERVAL '2' HOUR")
                conn.execute("FLUSH")
                compact(conn)
                after = dir_bytes(data)
                rows, wrong = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE v <> %s) FROM kv",
                    (args.rounds,)).fetchone()
                assert (rows, wrong) == (args.keys, 0), (rows, wrong)
        finally:
            server.terminate()
            server.wait(timeout=60)
    records = args.keys * (1 + 2 * args.rounds)
    mib = lambda n: f"{n / 2**20:.1f} MiB"
    print("| keys | updates | log records written | empty node | after the writes | after the fold |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.keys:,} | {args.keys * args.rounds:,} | {records:,} | "
          f"{mib(empty)} | {mib(before)} | {mib(after)} |")
    print(f"(updates took {written:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
