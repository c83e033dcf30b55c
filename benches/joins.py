#!/usr/bin/env python3
"""Join benchmark (Nexmark q3-like and q8-like).

A Nexmark-shaped stream of --events events has one person in every 50 events
and three auctions; the 46 bids are not needed by either query and are not
loaded. Persons and auctions go into append-only tables with watermarks
(date_time - 4 s), in COPY statements of one --chunk of events each, so the
watermarks advance as in a stream; event time advances --rate events per
second. Auctions are sold by one of the ten latest persons.

  q3  a regular join, filtered (incremental hash join, state kept in full):
        SELECT p.name, p.city, p.state, a.id FROM auction a JOIN person p
        ON a.seller = p.id WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')
  q8  a window join: persons and auctions of the same 10-second tumbling
      window, joined on the seller and the window.

Each query is measured on a fresh node:

  throughput  everything is loaded, then, alternating run by run, DataFusion
              computes the query as a batch (a summary of it, in the server)
              and weir maintains it as a view (CREATE MATERIALIZED VIEW returns
              once the view has read every row). The view is checked against
              the batch. Reported: events per second (of the whole stream,
              bids included) and per server CPU-second, and the ratio.
  memory      (q8) the view is created on empty tables and the stream goes in
              chunk by chunk (FLUSH after each); after every quarter the
              resident set and the exact number of the view's state entries
              (GET /state) are read. The window join deletes each window's
              rows once the watermark passes its end, so both should stay flat.

Requirements: Python 3.9+, psycopg 3 and a release build of weir.

Examples:
  python3 benches/joins.py                                # 10 M events, 3 runs
  python3 benches/joins.py --events 500000 --repeat 1     # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402
from ingest import fmt_int, fmt_mib, fmt_ratio, proc_status_kib  # noqa: E402
from windows import DEFAULT_WEIR_BIN, event_time, memory_table, metric, server_args  # noqa: E402

psycopg = ingest.psycopg

TABLES = [
    """CREATE TABLE person (id BIGINT, name VARCHAR, city VARCHAR, state VARCHAR, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY""",
    """CREATE TABLE auction (id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) APPEND ONLY""",
]

STATES = ["OR", "ID", "CA", "WA", "NY", "AZ", "TX", "MA"]

QUERIES = {
    "q3": {
        "view": """CREATE MATERIALIZED VIEW q3 AS
SELECT p.name, p.city, p.state, a.id FROM auction AS a JOIN person AS p ON a.seller = p.id
WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')""",
        "batch": """SELECT count(*), sum(a.id) FROM auction AS a JOIN person AS p ON a.seller = p.id
WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')""",
        "summary": "SELECT count(*), sum(id) FROM q3",
    },
    "q8": {
        "view": """CREATE MATERIALIZED VIEW q8 AS
SELECT p.id, p.name, p.window_start
FROM TUMBLE(person, date_time, INTERVAL '10' SECOND) AS p
JOIN TUMBLE(auction, date_time, INTERVAL '10' SECOND) AS a
  ON p.id = a.seller AND p.window_start = a.window_start AND p.window_end = a.window_end""",
        "batch": """SELECT count(*), sum(p.id) FROM person AS p JOIN auction AS a
  ON p.id = a.seller
 AND date_bin(INTERVAL '10 seconds', p.date_time) = date_bin(INTERVAL '10 seconds', a.date_time)""",
        "summary": "SELECT count(*), sum(id) FROM q8",
    },
}


def log(msg: str) -> None:
    print(f"[joins] {msg}", file=sys.stderr, flush=True)


def chunk_rows(start: int, end: int, rate: int) -> tuple[bytes, bytes]:
    """CSV rows of the persons and auctions among events [start, end)."""
    persons, auctions = [], []
    for i in range(start, end):
        slot = i % 50
        if slot > 3:
            continue
        person = i // 50
        at = event_time(i, rate)
        if slot == 0:
            state = STATES[(person * 7) % len(STATES)]
            persons.append(f"{person},person {person},city {person % 97},{state},{at}\n")
        else:
            auction = person * 3 + slot - 1
            seller = max(0, person - (auction * 13) % 10)
            category = 10 + (auction * 31) % 5
            auctions.append(f"{auction},{seller},{category},{at}\n")
    return "".join(persons).encode(), "".join(auctions).encode()


def load(conn, args, after_chunk=None) -> None:
    for n, start in enumerate(range(0, args.events, args.chunk)):
        persons, auctions = chunk_rows(start, min(start + args.chunk, args.events), args.rate)
        for table, data in (("person", persons), ("auction", auctions)):
            with conn.cursor().copy(f"COPY {table} FROM STDIN WITH (FORMAT csv)") as copy:
                copy.write(data)
        if after_chunk:
            after_chunk(n)


def run_throughput(args, name: str) -> list[dict]:
    query = QUERIES[name]
    server = ingest.WeirServer(server_args(args))
    server.start()
    runs = []
    try:
        with server.connect() as conn:
            for table in TABLES:
                conn.execute(table)
            started = time.monotonic()
            load(conn, args)
            log(f"{name}: loaded {args.events:,} events in {time.monotonic() - started:.1f}s")
            for rep in range(args.repeat):
                order = ("batch", "incremental") if rep % 2 == 0 else ("incremental", "batch")
                summaries = {}
                for kind in order:
                    cpu0, t0 = server.cpu_seconds(), time.monotonic()
                    if kind == "batch":
                        summaries[kind] = tuple(conn.execute(query["batch"]).fetchone())
                    else:
                        conn.execute(query["view"])
                    seconds, cpu_s = time.monotonic() - t0, server.cpu_seconds() - cpu0
                    if kind == "incremental":
                        summaries[kind] = tuple(conn.execute(query["summary"]).fetchone())
                        conn.execute(f"DROP MATERIALIZED VIEW {name}")
                    run = {"query": name, "kind": kind, "rep": rep, "seconds": seconds,
                           "cpu_seconds": cpu_s, "events_per_s": args.events / seconds,
                           "events_per_cpu_s": args.events / cpu_s if cpu_s > 0 else None}
                    runs.append(run)
                    log(f"{name} {kind} run {rep}: {seconds:.2f}s, {cpu_s:.2f} CPU-s, "
                        f"{run['events_per_s']:,.0f} events/s")
                if summaries["batch"] != summaries["incremental"]:
                    raise RuntimeError(f"{name}: view differs from batch: {summaries}")
                log(f"{name}: view equals batch: {summaries['batch']}")
            runs.append({"query": name, "kind": "peak", "hwm_kib": proc_status_kib(server.pid()).get("VmHWM")})
    finally:
        server.stop()
        server.cleanup_dir()
    return runs


def run_memory(args) -> list[dict]:
    server = ingest.WeirServer(server_args(args))
    server.start()
    points = []
    events = args.mem_events
    try:
        with server.connect() as conn:
            for table in TABLES:
                conn.execute(table)
            conn.execute(QUERIES["q8"]["view"])
            chunks_total = (events + args.chunk - 1) // args.chunk
            marks = {max(0, chunks_total * q // 4 - 1) for q in (1, 2, 3, 4)}

            def after_chunk(n: int) -> None:
                conn.execute("FLUSH")
                if n in marks:
                    status = proc_status_kib(server.pid())
                    state = metric(server, 'weir_view_state_entries{view="q8"}', "/state")
                    rows = conn.execute("SELECT count(*) FROM q8").fetchone()[0]
                    point = {"events": min((n + 1) * args.chunk, events), "rss_kib": status.get("VmRSS"),
                             "view_rows": rows, "state_keys": state}
                    points.append(point)
                    log(f"q8 after {point['events']:,} events: RSS {fmt_mib(point['rss_kib'])} MiB, "
                        f"view rows {rows:,}, state entries {state}")

            load(conn, argparse.Namespace(events=events, chunk=args.chunk, rate=args.rate), after_chunk)
    finally:
        server.stop()
        server.cleanup_dir()
    return points


def median(runs: list[dict], name: str, kind: str, key: str) -> float | None:
    values = [r[key] for r in runs if r["query"] == name and r["kind"] == kind and r.get(key) is not None]
    return statistics.median(values) if values else None


def markdown(args, runs: list[dict], memory: list[dict]) -> str:
    out = [f"### Joins (Nexmark q3-like and q8-like), {args.events:,} events\n",
           f"`python3 benches/joins.py --events {args.events} --repeat {args.repeat}`; medians of "
           f"{args.repeat} runs, batch and incremental alternating in one server per query.\n"]
    if runs:
        out.append("| query | DataFusion batch events/s | weir view events/s | ratio | batch events/CPU-s "
                   "| view events/CPU-s | ratio | peak RSS (MiB) |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name in QUERIES:
            b = median(runs, name, "batch", "events_per_s")
            i = median(runs, name, "incremental", "events_per_s")
            if b is None or i is None:
                continue
            bc = median(runs, name, "batch", "events_per_cpu_s")
            ic = median(runs, name, "incremental", "events_per_cpu_s")
            peak = median(runs, name, "peak", "hwm_kib")
            out.append(f"| {name} | {fmt_int(b)} | {fmt_int(i)} | {fmt_ratio(i, b)} | {fmt_int(bc)} "
                       f"| {fmt_int(ic)} | {fmt_ratio(ic, bc)} | {fmt_mib(peak)} |")
        out.append("")
    if memory:
        out.append(f"q8 streamed ({args.mem_events:,} events, FLUSH after every {args.chunk:,}):\n")
        out.extend(memory_table(memory, "join and view state entries"))
    return "\n".join(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--mem-events", type=int, default=40_000_000, help="events streamed in the memory phase")
    p.add_argument("--rate", type=int, default=100_000, help="events per second of event time")
    p.add_argument("--chunk", type=int, default=500_000, help="events per COPY of each table")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--queries", default="q3,q8")
    p.add_argument("--phases", default="throughput,memory")
    p.add_argument("--tmp-dir", default=None)
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if psycopg is None:
        print("psycopg 3 is needed: pip install 'psycopg[binary]'", file=sys.stderr)
        return 2
    phases = args.phases.split(",")
    runs = []
    if "throughput" in phases:
        for name in args.queries.split(","):
            runs += run_throughput(args, name)
    memory = run_memory(args) if "memory" in phases else []
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "memory": memory}, f, indent=2)
    print(markdown(args, runs, memory))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
