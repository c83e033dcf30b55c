#!/usr/bin/env python3
"""Change-stream benchmark: what subscribers cost the dataflow, and how soon
a committed write reaches them.

Starts a release weir node (`WeirServer` from benches/ingest.py: its own
temporary data directory and free ports) for every run, with a stream

    CREATE TABLE s (k BIGINT, v BIGINT) APPEND ONLY
    CREATE MATERIALIZED VIEW busy AS
        SELECT k % GROUPS AS g, count(*) AS n, sum(v) AS total FROM s GROUP BY g

so that every epoch retracts and re-inserts thousands of groups.

  throughput  with 0, 1 and --subscribers subscribers attached (each on its
              own connection, `COPY (SUBSCRIBE busy WITH (snapshot = false))
              TO STDOUT`, counting the lines it receives), --rows rows are
              inserted by psql in statements of --chunk rows
              (`INSERT ... SELECT ... FROM generate_series`), and a FLUSH
              waits for the view. Reported per
              subscriber count: view rows/s (load start to FLUSH), the
              server's CPU-seconds up to the FLUSH and up to the last change
              delivered (what the subscribers really cost), and changes
              delivered per second (all subscribers together, up to the
              last change arriving). The counts alternate run by run (--repeat runs each; medians).
              Each subscriber's changes are checked to consolidate to the
              view's final contents.

  latency     with the default 100 ms barriers, a loader writes --load-rate
              rows/s into s while a probe inserts a marker row (a group of
              its own, negative k) every 50 ms; each subscriber notes when
              the marker's change arrives. The subscribers of this phase
              share one event loop in a child process, away from the
              loader's and the probe's interpreter lock. Reported: p50 / p99 / max of
              (arrival - the marker INSERT returning), over every subscriber,
              with 1 and with --subscribers subscribers.

The result is a Markdown section on stdout; progress goes to stderr.

Requirements: Python 3.9+, psql, psycopg 3 (`pip install "psycopg[binary]"`) and a
release build of weir. Linux only (reads /proc).

Examples:
  python3 benches/subscribe.py --weir-bin $HOME/.cache/weir-target-rel/release/weir
  python3 benches/subscribe.py --rows 100000 --repeat 1 --samples 40   # smoke run
  python3 benches/subscribe.py --server-cpus 0 --client-cpus 1   # server and clients apart
  python3 benches/subscribe.py --phases latency --cpu-hog 2      # every core busy beside the node
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psycopg  # noqa: E402
import ingest  # noqa: E402  (benches/ingest.py: WeirServer, machine info)
from ingest import percentile  # noqa: E402

DEFAULT_WEIR_BIN = os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target-rel")),
    "release", "weir")
PSQL = shutil.which("psql") or "psql"
TABLE = "CREATE TABLE s (k BIGINT, v BIGINT) APPEND ONLY"
VIEW = ("CREATE MATERIALIZED VIEW busy AS SELECT k % {groups} AS g, count(*) AS n, "
        "sum(v) AS total FROM s GROUP BY g")


def log(msg: str) -> None:
    print(f"[subscribe] {msg}", file=sys.stderr, flush=True)


def server_args(args) -> argparse.Namespace:
    return argparse.Namespace(
        weir_bin=args.weir_bin, tmp_dir=args.tmp_dir, weir_arg=[], startup_timeout=60,
        no_prepare=True, mem_interval=0.5, keep=False,
    )


class Subscriber(threading.Thread):
    """Reads one COPY (SUBSCRIBE ...) stream until stopped, consolidating it."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.conn = server.connect()
        self.lines = 0
        self.last_arrival = 0.0
        self.rows: dict[bytes, int] = {}
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with self.conn.cursor().copy(
                    "COPY (SUBSCRIBE busy WITH (snapshot = false)) TO STDOUT") as copy:
                self.ready.set()
                for data in copy:
                    self.consume(bytes(data))
        except Exception as e:  # the connection is closed to stop the stream
            self.error = e
            self.ready.set()

    def consume(self, data: bytes) -> None:
        now = time.monotonic()
        with self.lock:
            for line in data.splitlines():
                _, diff, row = line.split(b"\t", 2)
                self.rows[row] = self.rows.get(row, 0) + int(diff)
        self.lines += data.count(b"\n")
        self.last_arrival = now

    def contents(self) -> dict[bytes, int]:
        with self.lock:
            return {r: n for r, n in self.rows.items() if n != 0}

    def stop(self) -> None:
        try:
            self.conn.cancel()
        except Exception:
            pass


def start_subscribers(server, count: int) -> list[Subscriber]:
    subs = [Subscriber(server) for _ in range(count)]
    for sub in subs:
        sub.start()
    for sub in subs:
        sub.ready.wait(30)
    # The stream starts when the server has read its snapshot; give it a beat.
    time.sleep(0.5)
    return subs


def stop_all(subs: list[Subscriber]) -> None:
    for sub in subs:
        sub.stop()
    for sub in subs:
        sub.join(10)
        try:
            sub.conn.close()
        except Exception:
            pass


def view_contents(conn) -> dict[bytes, int]:
    out: dict[bytes, int] = {}
    for g, n, total in conn.execute("SELECT g, n, total FROM busy").fetchall():
        key = f"{g}\t{n}\t{total}".encode()
        out[key] = out.get(key, 0) + 1
    return out


def wait_delivered(subs: list[Subscriber], expected: dict[bytes, int], limit: float) -> None:
    deadline = time.monotonic() + limit
    for sub in subs:
        while sub.contents() != expected:
            if time.monotonic() > deadline:
                raise RuntimeError("a subscriber did not receive every change")
            time.sleep(0.05)


def load(server, rows: int, chunk: int, cpus) -> None:
    """Insert `rows` rows in statements of `chunk`, the rows made by the server,
    from a psql process of its own: this script's threads share one
    interpreter lock, and 100 busy subscribers would hold back a loader
    thread far more than the server does. For the same reason psql runs on
    `cpus` (the server's, when it is pinned), not beside the subscribers:
    it stands for the node's writers, whose pace is what is measured."""
    statements = "".join(
        f"INSERT INTO s SELECT value, value % 97 FROM generate_series({base}, "
        f"{min(base + chunk, rows) - 1});\n"
        for base in range(0, rows, chunk))
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    subprocess.run([PSQL, server.conninfo(), "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"],
                   input=statements.encode(), check=True, stdout=subprocess.DEVNULL,
                   preexec_fn=pin)


@contextlib.contextmanager
def busy_node(args):
    """A fresh node with the stream and the busy view; stopped afterwards."""
    server = ingest.WeirServer(server_args(args))
    if args.server_cpus:
        # The child inherits this thread's CPUs at fork; the client's threads,
        # all started later, inherit the ones set after.
        os.sched_setaffinity(0, args.server_cpus)
    server.start()
    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)
    try:
        with server.connect() as conn:
            conn.execute(TABLE)
            conn.execute(VIEW.format(groups=args.groups))
            yield server, conn
    finally:
        server.stop()
        server.cleanup_dir()


def run_throughput(args, count: int, rep: int) -> dict:
    with busy_node(args) as (server, conn):
        subs = start_subscribers(server, count)
        cpu0, t0 = server.cpu_seconds(), time.monotonic()
        load(server, args.rows, args.chunk, args.server_cpus)
        conn.execute("FLUSH")
        seconds, cpu_s = time.monotonic() - t0, server.cpu_seconds() - cpu0
        expected = view_contents(conn)
        wait_delivered(subs, expected, 300)
        delivered_cpu_s = server.cpu_seconds() - cpu0
        delivered = sum(sub.lines for sub in subs)
        last = max((sub.last_arrival for sub in subs), default=t0)
        stop_all(subs)
        run = {"subscribers": count, "rep": rep, "seconds": seconds, "cpu_seconds": cpu_s,
               "delivered_cpu_seconds": delivered_cpu_s,
               "rows_per_s": args.rows / seconds, "changes": delivered,
               "changes_per_s": delivered / (last - t0) if delivered else None}
        log(f"{count} subscribers, run {rep}: {run['rows_per_s']:,.0f} rows/s, "
            f"{cpu_s:.1f} CPU-s, {delivered:,} changes delivered")
        return run


class Loader(threading.Thread):
    def __init__(self, server, rate: int):
        super().__init__(daemon=True)
        self.conn = server.connect()
        self.rate = rate
        self.done = threading.Event()

    def run(self) -> None:
        step, at, i = 0.02, time.monotonic(), 0
        per_step = max(1, int(self.rate * step))
        while not self.done.is_set():
            data = "".join(f"{k}\t1\n" for k in range(i, i + per_step)).encode()
            with self.conn.cursor().copy("COPY s FROM STDIN") as copy:
                copy.write(data)
            i += per_step
            at += step
            time.sleep(max(0.0, at - time.monotonic()))


MARKER = re.compile(rb"^\d+\t1\t-(\d+)\t", re.M)


def watch_markers(conninfo: str, count: int, pipe) -> None:
    """A child process: `count` subscribers on one event loop, each noting
    when every marker's insertion arrives. A process of its own, because
    threads that share one interpreter lock with the loader and the probe
    would measure how long a subscriber waits for the lock (up to a switch
    interval per busy thread), not how long weir takes to deliver."""
    asyncio.run(_watch_markers(conninfo, count, pipe))


async def _watch_markers(conninfo: str, count: int, pipe) -> None:
    seen: list[dict[int, float]] = [{} for _ in range(count)]
    started = asyncio.Semaphore(0)

    async def subscribe(i: int) -> None:
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        async with conn.cursor().copy(
                "COPY (SUBSCRIBE busy WITH (snapshot = false)) TO STDOUT") as copy:
            started.release()
            async for data in copy:
                now = time.monotonic()
                for m in MARKER.finditer(data):
                    seen[i].setdefault(int(m.group(1)), now)

    # Held so that the loop keeps the tasks alive.
    tasks = [asyncio.create_task(subscribe(i)) for i in range(count)]
    for _ in range(count):
        await started.acquire()
    pipe.send("ready")
    await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
    pipe.send(seen)
    pipe.close()
    os._exit(0)  # the streams never end by themselves; the server drops them on exit


def spin(stop) -> None:
    """A CPU hog: busy until told to stop, at normal priority."""
    while not stop.is_set():
        for _ in range(100_000):
            pass


@contextlib.contextmanager
def cpu_hogs(count: int):
    """`count` processes beside the node that keep cores busy."""
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        stop.set()
        for hog in hogs:
            hog.join(5)


def run_latency(args, count: int) -> dict:
    with busy_node(args) as (server, conn), cpu_hogs(args.cpu_hog):
        ours, theirs = multiprocessing.Pipe()
        watcher = multiprocessing.get_context("spawn").Process(
            target=watch_markers, args=(server.conninfo(), count, theirs), daemon=True)
        watcher.start()
        if not ours.poll(60) or ours.recv() != "ready":
            raise RuntimeError("the subscribers did not start")
        # The stream starts when the server has read its snapshot; give it a beat.
        time.sleep(0.5)
        loader = Loader(server, args.load_rate)
        loader.start()
        committed: dict[int, float] = {}
        for marker in range(1, args.samples + 1):
            conn.execute(f"INSERT INTO s VALUES ({-marker}, 0)")
            committed[marker] = time.monotonic()
            time.sleep(0.05)
        time.sleep(1.0)
        loader.done.set()
        loader.join(10)
        ours.send("stop")
        seen: list[dict[int, float]] = ours.recv()
        watcher.join(10)
        lags = sorted(
            (arrived[m] - t) * 1000
            for arrived in seen for m, t in committed.items() if m in arrived)
        missing = sum(1 for arrived in seen for m in committed if m not in arrived)
        result = {"subscribers": count, "p50_ms": percentile(lags, 0.5), "p99_ms": percentile(lags, 0.99),
                  "max_ms": lags[-1] if lags else None, "samples": len(lags), "missing": missing}
        log(f"latency with {count} subscribers: p50 {result['p50_ms']:.1f} ms, "
            f"p99 {result['p99_ms']:.1f} ms, {missing} missing")
        return result


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def markdown(args, runs: list[dict], latency: list[dict]) -> str:
    machine = ingest.machine_info(args.tmp_dir)
    out = ["### Change streams (SUBSCRIBE)", "",
           f"{args.rows:,} rows into a {args.groups:,}-group view; INSERT statements of {args.chunk:,}; "
           f"medians of {args.repeat}; machine: {machine.get('cpu', '?')}, "
           f"load average {os.getloadavg()[0]:.2f}; "
           f"server CPUs {sorted(args.server_cpus) if args.server_cpus else 'all'}, "
           f"client CPUs {sorted(args.client_cpus) if args.client_cpus else 'all'}.", "",
           "| subscribers | view rows/s | ratio to 0 | server CPU-s to FLUSH | server CPU-s until delivered "
           "| changes delivered/s (all) |",
           "|---|---|---|---|---|---|"]
    base = median([r for r in runs if r["subscribers"] == 0], "rows_per_s")
    for count in sorted({r["subscribers"] for r in runs}):
        mine = [r for r in runs if r["subscribers"] == count]
        rate = median(mine, "rows_per_s")
        changes = median(mine, "changes_per_s")
        out.append(f"| {count} | {rate:,.0f} | {rate / base:.2f}x | {median(mine, 'cpu_seconds'):.1f} | "
                   f"{median(mine, 'delivered_cpu_seconds'):.1f} | "
                   f"{'-' if changes is None else f'{changes:,.0f}'} |")
    hogs = f", {args.cpu_hog} CPU-hog processes beside the node" if args.cpu_hog else ""
    out += ["", f"Latency from an INSERT returning to its change arriving, 100 ms barriers, "
            f"{args.load_rate:,} rows/s of background load{hogs}, {args.samples} markers:", "",
            "| subscribers | p50 ms | p99 ms | max ms | missing |", "|---|---|---|---|---|"]
    for r in latency:
        out.append(f"| {r['subscribers']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                   f"{r['max_ms']:.1f} | {r['missing']} |")
    return "\n".join(out) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--chunk", type=int, default=20_000, help="rows per INSERT statement")
    p.add_argument("--groups", type=int, default=10_000)
    p.add_argument("--subscribers", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--samples", type=int, default=200, help="latency markers")
    # At 50,000 rows/s each epoch re-emits some 5,000 groups to every
    # subscriber: 10 M lines/s for 100 of them, more than one Python
    # process reads, so the latency would measure the client.
    p.add_argument("--load-rate", type=int, default=10_000, help="background rows/s in the latency runs")
    p.add_argument("--phases", default="throughput,latency")
    p.add_argument("--cpu-hog", type=int, default=0,
                   help="processes that keep a core busy each, beside the node, during the latency runs")
    p.add_argument("--tmp-dir", default=tempfile.gettempdir())
    p.add_argument("--server-cpus", type=cpu_list, default=None,
                   help="CPUs for the server and the throughput runs' psql loader, "
                        "e.g. 0 (default: all)")
    p.add_argument("--client-cpus", type=cpu_list, default=None,
                   help="CPUs for this script's subscribers (and the latency runs' loader), "
                        "e.g. 1 (default: all); "
                        "apart from the server's, so that what the subscribers cost the "
                        "server is not mixed with what reading the changes costs the clients")
    return p.parse_args(argv)


def cpu_list(text: str) -> set[int]:
    return {int(c) for c in text.split(",")}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    phases = args.phases.split(",")
    runs: list[dict] = []
    latency: list[dict] = []
    if "throughput" in phases:
        for rep in range(args.repeat):
            counts = [0, 1, args.subscribers]
            for count in counts[rep % 3:] + counts[:rep % 3]:
                runs.append(run_throughput(args, count, rep))
    if "latency" in phases:
        for count in (1, args.subscribers):
            latency.append(run_latency(args, count))
    print(markdown(args, runs, latency))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
