#!/usr/bin/env python3
"""Windowed aggregate benchmark (Nexmark q7-like): tumbling windows of 10 s,
count / sum / max of the price per auction, EMIT ON WINDOW CLOSE.

Starts a release weir node (`WeirServer` from benches/ingest.py: its own
temporary data directory, free ports) and measures, each on a fresh node:

  throughput  --events bids go into an append-only table with a watermark
              (date_time - 4 s), by COPY statements of --chunk rows each, so
              the watermark advances as in a stream: auction = i % --keys,
              price = (i * 7919) % 1000, event time advancing --rate events
              per second of event time from 2024-01-01. Then, alternating run
              by run:
                batch        DataFusion computes the windows as a batch query
                             (date_bin, no weir operator involved):
                               SELECT auction, date_bin(INTERVAL '10 seconds', date_time),
                                      count(*), sum(price), max(price) ... GROUP BY 1, 2
                incremental  CREATE MATERIALIZED VIEW q7 AS SELECT auction,
                               window_start, window_end, count(*), sum(price), max(price)
                             FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
                             GROUP BY auction, window_start, window_end
                             EMIT ON WINDOW CLOSE
                             which returns once the view has read every bid.
              Both are summarised inside the server (the client fetches one
              row) and checked against each other over the windows the
              watermark has closed. Reported: events per second, events per
              server CPU-second (utime + stime from /proc), the ratio.

  checkpoints the cost of exactly-once: the view is created on an empty table
              and the bids stream in (COPY chunks, one FLUSH at the end), on
              a fresh node started with --barrier-interval-ms 100 (the
              default: an epoch checkpoint every 100 ms) and on one with
              10000; alternating, --repeat times each. Reported: events per
              server CPU-second and per second for both, and their ratio.

  memory      the view is created on an empty table and the bids are streamed
              in (COPY, FLUSH every --chunk rows); the resident set (VmRSS)
              of the weir process and the rows of the view are read after
              each quarter of the stream. State lives in RocksDB and windows
              are deleted once final, so memory should not grow with the
              stream.

The result is a Markdown section on stdout, ready for docs/benchmarks/log.md;
progress goes to stderr; --json writes every run as well.

Requirements: Python 3.9+, psycopg 3 (`pip install "psycopg[binary]"`) and a
release build of weir (`cargo build --release`). Linux only (reads /proc).

Examples:
  python3 benches/windows.py                                   # 10 M events, 3 runs
  python3 benches/windows.py --events 200000 --repeat 1        # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (benches/ingest.py: WeirServer, /proc helpers)
from ingest import fmt_int, fmt_mib, fmt_ratio, proc_status_kib  # noqa: E402

psycopg = ingest.psycopg

DEFAULT_TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/weir-target-rel")
DEFAULT_WEIR_BIN = os.path.join(DEFAULT_TARGET_DIR, "release", "weir")

TABLE = """CREATE TABLE bids (auction BIGINT, price BIGINT, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY"""

VIEW = """CREATE MATERIALIZED VIEW q7 AS
SELECT auction, window_start, window_end, count(*) AS n, sum(price) AS total, max(price) AS hi
FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
GROUP BY auction, window_start, window_end
EMIT ON WINDOW CLOSE"""

# The same windows as a batch, summarised in the server; `closed` limits it
# to the windows the watermark has closed.
BATCH = """SELECT count(*), sum(n), sum(total), max(hi) FROM (
  SELECT auction, date_bin(INTERVAL '10 seconds', date_time) AS window_start,
         count(*) AS n, sum(price) AS total, max(price) AS hi
  FROM bids GROUP BY 1, 2) w WHERE window_start + INTERVAL '10 seconds' <= TIMESTAMP '{closed}'"""

VIEW_SUMMARY = "SELECT count(*), sum(n), sum(total), max(hi) FROM q7"


def log(msg: str) -> None:
    print(f"[windows] {msg}", file=sys.stderr, flush=True)


def event_time(i: int, rate: int) -> str:
    micros = i * 1_000_000 // rate
    seconds, us = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"2024-01-01 {hours:02d}:{minutes:02d}:{secs:02d}.{us:06d}"


def chunks(args):
    """CSV chunks of --chunk bids each."""
    for start in range(0, args.events, args.chunk):
        end = min(start + args.chunk, args.events)
        lines = [
            f"{i % args.keys},{(i * 7919) % 1000},{event_time(i, args.rate)}\n"
            for i in range(start, end)
        ]
        yield "".join(lines).encode()


def closed_until(args) -> str:
    """The end of the last window the final watermark has closed."""
    last = (args.events - 1) * 1_000_000 // args.rate
    watermark = last - 4_000_000
    end = watermark - watermark % 10_000_000
    seconds = end // 1_000_000
    return f"2024-01-01 {seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def load(conn, args, after_chunk=None) -> None:
    for n, data in enumerate(chunks(args)):
        with conn.cursor().copy("COPY bids FROM STDIN WITH (FORMAT csv)") as copy:
            copy.write(data)
        if after_chunk:
            after_chunk(n)


def server_args(args, extra: list[str] | None = None) -> argparse.Namespace:
    return argparse.Namespace(
        weir_bin=args.weir_bin, tmp_dir=args.tmp_dir, weir_arg=extra or [], startup_timeout=60,
        no_prepare=True, mem_interval=0.5, keep=False,
    )


def cpu(server) -> float:
    return server.cpu_seconds()


def run_throughput(args) -> list[dict]:
    server = ingest.WeirServer(server_args(args))
    server.start()
    runs = []
    try:
        with server.connect() as conn:
            conn.execute(TABLE)
            started = time.monotonic()
            load(conn, args)
            log(f"loaded {args.events} bids in {time.monotonic() - started:.1f}s")
            batch_sql = BATCH.format(closed=closed_until(args))
            for rep in range(args.repeat):
                order = ("batch", "incremental") if rep % 2 == 0 else ("incremental", "batch")
                summaries = {}
                for kind in order:
                    cpu0, t0 = cpu(server), time.monotonic()
                    if kind == "batch":
                        summaries[kind] = tuple(conn.execute(batch_sql).fetchone())
                    else:
                        conn.execute(VIEW)
                    seconds, cpu_s = time.monotonic() - t0, cpu(server) - cpu0
                    if kind == "incremental":
                        summaries[kind] = tuple(conn.execute(VIEW_SUMMARY).fetchone())
                        conn.execute("DROP MATERIALIZED VIEW q7")
                    run = {"kind": kind, "rep": rep, "seconds": seconds, "cpu_seconds": cpu_s,
                           "events_per_s": args.events / seconds,
                           "events_per_cpu_s": args.events / cpu_s if cpu_s > 0 else None}
                    runs.append(run)
                    log(f"{kind} run {rep}: {seconds:.2f}s, {cpu_s:.2f} CPU-s, "
                        f"{run['events_per_s']:,.0f} events/s")
                if summaries["batch"] != summaries["incremental"]:
                    raise RuntimeError(f"view differs from batch: {summaries}")
                log(f"view equals batch: {summaries['batch']}")
    finally:
        server.stop()
        server.cleanup_dir()
    return runs


def run_memory(args) -> list[dict]:
    server = ingest.WeirServer(server_args(args))
    server.start()
    points = []
    try:
        with server.connect() as conn:
            conn.execute(TABLE)
            conn.execute(VIEW)
            chunks_total = (args.events + args.chunk - 1) // args.chunk
            marks = {max(0, chunks_total * q // 4 - 1) for q in (1, 2, 3, 4)}

            def after_chunk(n: int) -> None:
                conn.execute("FLUSH")
                if n in marks:
                    status = proc_status_kib(server.pid())
                    state_keys = metric(server, 'weir_view_state_entries{view="q7"}', "/state")
                    rows = conn.execute("SELECT count(*) FROM q7").fetchone()[0]
                    point = {"events": min((n + 1) * args.chunk, args.events),
                             "rss_kib": status.get("VmRSS"), "hwm_kib": status.get("VmHWM"),
                             "view_rows": rows, "state_keys": state_keys}
                    points.append(point)
                    log(f"after {point['events']:,} events: RSS {fmt_mib(point['rss_kib'])} MiB, "
                        f"view rows {rows}, state entries {state_keys}")

            load(conn, args, after_chunk)
    finally:
        server.stop()
        server.cleanup_dir()
    return points


def run_checkpoints(args) -> list[dict]:
    runs = []
    for rep in range(args.repeat):
        intervals = (100, 10_000) if rep % 2 == 0 else (10_000, 100)
        for interval in intervals:
            server = ingest.WeirServer(server_args(args, [f"--barrier-interval-ms={interval}"]))
            server.start()
            try:
                with server.connect() as conn:
                    conn.execute(TABLE)
                    conn.execute(VIEW)
                    cpu0, t0 = cpu(server), time.monotonic()
                    load(conn, args)
                    conn.execute("FLUSH")
                    seconds, cpu_s = time.monotonic() - t0, cpu(server) - cpu0
                    view = tuple(conn.execute(VIEW_SUMMARY).fetchone())
                    batch = tuple(conn.execute(BATCH.format(closed=closed_until(args))).fetchone())
                    if view != batch:
                        raise RuntimeError(f"view differs from batch: {view} {batch}")
            finally:
                server.stop()
                server.cleanup_dir()
            run = {"interval_ms": interval, "rep": rep, "seconds": seconds, "cpu_seconds": cpu_s,
                   "events_per_s": args.events / seconds, "events_per_cpu_s": args.events / cpu_s}
            runs.append(run)
            log(f"checkpoints every {interval} ms, run {rep}: {seconds:.2f}s, {cpu_s:.2f} CPU-s")
    return runs


def metric(server, name: str, path: str = "/metrics") -> int | None:
    try:
        url = f"http://127.0.0.1:{server.http_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " "):
                    return int(float(line.split()[1]))
    except OSError:
        return None
    return None


def median(runs: list[dict], kind: str, key: str) -> float | None:
    values = [r[key] for r in runs if r["kind"] == kind and r[key] is not None]
    return statistics.median(values) if values else None


def memory_table(points: list[dict], state: str) -> list[str]:
    """Resident set, state entries and view rows after each quarter of a stream."""
    out = [f"| events streamed | resident set (MiB) | {state} | view rows |", "|---|---:|---:|---:|"]
    for p in points:
        out.append(f"| {p['events']:,} | {fmt_mib(p['rss_kib'])} | {fmt_int(p.get('state_keys'))} "
                   f"| {p['view_rows']:,} |")
    out.append("")
    return out


def checkpoint_table(checkpoints: list[dict]) -> list[str]:
    def med(interval: int, key: str) -> float:
        return statistics.median(r[key] for r in checkpoints if r["interval_ms"] == interval)
    out = ["Streaming the bids into the view (load included), checkpoints every 100 ms vs every 10 s:\n",
           "| | every 100 ms | every 10 s | 100 ms / 10 s |", "|---|---|---|---|"]
    for key, label in (("events_per_s", "events/s"), ("events_per_cpu_s", "events per CPU-second")):
        fast, slow = med(100, key), med(10_000, key)
        out.append(f"| {label} | {fmt_int(fast)} | {fmt_int(slow)} | {fmt_ratio(fast, slow)} |")
    out.append("")
    return out


def markdown(args, runs: list[dict], memory: list[dict], checkpoints: list[dict] | None = None) -> str:
    out = [f"### Windowed aggregate (Nexmark q7-like), {args.events:,} events, {args.keys:,} keys\n"]
    out.append(f"`python3 benches/windows.py --events {args.events} --keys {args.keys} "
               f"--repeat {args.repeat}`; medians of {args.repeat} runs, batch and incremental "
               "alternating in one server.\n")
    if runs:
        b_rate, i_rate = median(runs, "batch", "events_per_s"), median(runs, "incremental", "events_per_s")
        b_cpu = median(runs, "batch", "events_per_cpu_s")
        i_cpu = median(runs, "incremental", "events_per_cpu_s")
        out.append("| | DataFusion batch | weir incremental (EMIT ON WINDOW CLOSE) | ratio |")
        out.append("|---|---|---|---|")
        out.append(f"| events/s | {fmt_int(b_rate)} | {fmt_int(i_rate)} | {fmt_ratio(i_rate, b_rate)} |")
        out.append(f"| events per CPU-second | {fmt_int(b_cpu)} | {fmt_int(i_cpu)} | {fmt_ratio(i_cpu, b_cpu)} |")
        out.append("")
    if checkpoints:
        out.extend(checkpoint_table(checkpoints))
    if memory:
        out.extend(memory_table(memory, "operator state entries"))
    return "\n".join(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--rate", type=int, default=100_000, help="events per second of event time")
    p.add_argument("--chunk", type=int, default=100_000, help="bids per COPY statement")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--phases", default="throughput,memory", help="any of throughput,memory,checkpoints")
    p.add_argument("--tmp-dir", default=None)
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if psycopg is None:
        print("psycopg 3 is needed: pip install 'psycopg[binary]'", file=sys.stderr)
        return 2
    phases = args.phases.split(",")
    runs = run_throughput(args) if "throughput" in phases else []
    memory = run_memory(args) if "memory" in phases else []
    checkpoints = run_checkpoints(args) if "checkpoints" in phases else []
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "memory": memory, "checkpoints": checkpoints}, f, indent=2)
    print(markdown(args, runs, memory, checkpoints))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
