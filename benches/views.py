#!/usr/bin/env python3
"""Materialized view benchmark: incremental throughput, freshness, memory.

Starts a release weir node (through `WeirServer` from benches/ingest.py: its
own temporary data directory, free ports, memory read from /proc) and
measures three things, each on a fresh node:

  throughput  --rows rows are loaded into a stream with `COPY s FROM STDIN`
              (g = i % --groups, v a deterministic pseudo-random integer).
              Then, alternating run by run, the same aggregate
                  SELECT g, count(*), sum(v), min(v), max(v) FROM s GROUP BY g
              is computed (1) as a batch query, run by DataFusion inside weir,
              and (2) incrementally, by timing
                  CREATE MATERIALIZED VIEW mv AS <same query>
              which returns once the view has backfilled every row already in
              the stream. The view is compared row by row with the batch
              result (and both with totals computed by this script), then
              dropped (--keep-views keeps it instead). Reported: rows/s of
              both, the ratio incremental / batch, server CPU per row. With
              --source table the rows go into a table with a primary key
              instead, where min and max must keep every value of a group.

  freshness   with the default 100 ms barrier interval, a loader thread on its
              own connection writes --load-rate rows/s into a stream that
              feeds a GROUP BY view (one COPY of rate x 20 ms rows every
              20 ms). Meanwhile a probe inserts a marker row into a group of
              its own (g = 1000000 + k) and polls the view with a point read
              (`SELECT n FROM mv WHERE g = ...`) on another connection every
              --poll-ms until the marker shows up. Reported: p50 / p99 / max
              of the time from the INSERT returning to the marker being read,
              and the load rate actually achieved. Afterwards the view is
              checked against the batch query over the stream.

  memory      a GROUP BY view with --mem-groups distinct groups over
              --mem-rows rows (g = i % --mem-groups). Two variants, each on a
              fresh node: `backfill` loads the rows first and then creates the
              view; `streaming` creates the view first and then loads the rows
              (COPY, then FLUSH). Reported: peak resident set (VmHWM) of the
              weir process, before and after the view, and the times.

The result is a Markdown section on stdout, ready for docs/benchmarks/log.md;
progress goes to stderr; --json writes every individual run as well.

Requirements: Python 3.9+, psycopg 3 (`pip install "psycopg[binary]"`) and a
release build of weir (`cargo build --release`). Linux only (reads /proc).

Examples:
  python3 benches/views.py                                     # full run
  python3 benches/views.py --rows 20000 --repeat 1 --fresh-samples 20 \\
      --mem-rows 20000 --mem-groups 10000                      # smoke test
  python3 benches/views.py --phases freshness --load-rate 100000
  python3 benches/views.py --json target/views.json > target/views.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (benches/ingest.py: WeirServer, /proc helpers, machine info)
from ingest import fmt_int, fmt_mib, fmt_ratio, percentile, proc_status_kib  # noqa: E402

psycopg = ingest.psycopg
if psycopg is not None:
    from psycopg.types.numeric import Int8

DEFAULT_TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/weir-target-rel")
DEFAULT_WEIR_BIN = os.path.join(DEFAULT_TARGET_DIR, "release", "weir")

PHASES = ("throughput", "freshness", "memory")
MEM_MODES = ("backfill", "streaming")

AGG_COLUMNS = "g, count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi"
BATCH_SQL = "SELECT g, count(*), sum(v), min(v), max(v) FROM {src} GROUP BY g"
VIEW_SQL = "CREATE MATERIALIZED VIEW {view} AS SELECT " + AGG_COLUMNS + " FROM {src} GROUP BY g"
MARKER_BASE = 1_000_000


def log(msg: str) -> None:
    print(f"[views] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------


def value_of(i: int) -> int:
    """Deterministic pseudo-random value in [-1_000_000, 1_000_000] for row i."""
    return (i * 2654435761) % 4294967291 % 2_000_001 - 1_000_000


def copy_chunks(start: int, rows: int, groups: int, chunk_rows: int, expected: dict | None = None,
                with_id: bool = False):
    """Rows start .. start+rows-1 as COPY text, `g<TAB>v` per line, chunk_rows per chunk.

    With with_id each line starts with the row number i as a key: `i<TAB>g<TAB>v`.
    When `expected` is a dict it is filled with g -> [count, sum, min, max].
    """
    end = start + rows
    for lo in range(start, end, chunk_rows):
        hi = min(end, lo + chunk_rows)
        gs = [i % groups for i in range(lo, hi)]
        vs = [value_of(i) for i in range(lo, hi)]
        if expected is not None:
            for g, v in zip(gs, vs):
                e = expected.get(g)
                if e is None:
                    expected[g] = [1, v, v, v]
                else:
                    e[0] += 1
                    e[1] += v
                    if v < e[2]:
                        e[2] = v
                    if v > e[3]:
                        e[3] = v
        if with_id:
            yield "".join(f"{i}\t{g}\t{v}\n" for i, g, v in zip(range(lo, hi), gs, vs)).encode()
        else:
            yield "".join(f"{g}\t{v}\n" for g, v in zip(gs, vs)).encode()


def copy_rows(conn, table: str, chunks, with_id: bool = False) -> None:
    cols = "id, g, v" if with_id else "g, v"
    with conn.cursor() as cur:
        with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
            for chunk in chunks:
                cp.write(chunk)


def normalize(rows) -> list[tuple]:
    return sorted(tuple(None if x is None else int(x) for x in r) for r in rows)


def first_difference(a: list[tuple], b: list[tuple]) -> str:
    if len(a) != len(b):
        return f"{len(a)} rows vs {len(b)} rows"
    for x, y in zip(a, b):
        if x != y:
            return f"first difference: {x} vs {y}"
    return "equal"


# --------------------------------------------------------------------------
# Server handling
# --------------------------------------------------------------------------


class Node:
    """A fresh weir node for one phase; stopped and removed on exit."""

    def __init__(self, args, phase: str, registry: list):
        self.server = ingest.WeirServer(args)
        self.phase = phase
        registry.append(self.server)

    def __enter__(self):
        self.server.start()
        self.server.start_sampler()
        self.server.set_phase(self.phase)
        return self.server

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            note = exit_note(self.server)
            if note:
                log(f"{self.phase}: {note}")
        stop_server(self.server)
        return False


def stop_server(s) -> None:
    if getattr(s, "_views_stopped", False):
        return
    s._views_stopped = True
    try:
        if s.sampler:
            s.sampler.stop()
        s.stop()
    except Exception as e:
        log(f"warning: stopping weir failed: {e}")
    if s.proc is not None and s.proc.returncode not in (None, 0):
        log(f"warning: weir exited with code {s.proc.returncode}; last log lines:\n{ingest.tail(s.log_path())}")
    s.cleanup_dir()


def hwm_kib(server) -> int | None:
    pid = server.pid()
    return proc_status_kib(pid).get("VmHWM") if pid else None


def rss_kib(server) -> int | None:
    pid = server.pid()
    return proc_status_kib(pid).get("VmRSS") if pid else None


def exit_note(server) -> str | None:
    """If weir is gone, say how it ended (for error messages)."""
    p = server.proc
    if p is None or p.poll() is None:
        return None
    return f"weir exited with code {p.returncode}; last log lines:\n{ingest.tail(server.log_path())}"


class Stuck(RuntimeError):
    """A timed statement neither finished nor answered a cancel request."""


def timed_execute(conn, sql: str, limit: float, grace: float = 60.0):
    """Run sql on conn in a helper thread; return (seconds, cursor, error).

    After `limit` seconds the statement is cancelled (the error is then the
    cancellation); if it has not returned `grace` seconds after that, Stuck is
    raised and the connection is left to the caller to discard.
    """
    box: dict = {}

    def work() -> None:
        t0 = time.perf_counter()
        try:
            box["cur"] = conn.execute(sql)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["err"] = e
        box["seconds"] = time.perf_counter() - t0

    th = threading.Thread(target=work, daemon=True, name="timed-statement")
    th.start()
    th.join(limit)
    if th.is_alive():
        log(f"  still running after {limit:g} s; cancelling: {sql[:80]}")
        try:
            conn.cancel_safe(timeout=10)
        except Exception as e:
            log(f"  cancel request failed: {e!r}")
        th.join(grace)
        if th.is_alive():
            raise Stuck(f"statement did not finish within {limit:g} s and did not return "
                        f"{grace:g} s after being cancelled: {sql[:80]}")
    return box.get("seconds"), box.get("cur"), box.get("err")


# --------------------------------------------------------------------------
# (a) Throughput: batch query vs incremental backfill
# --------------------------------------------------------------------------


@dataclass
class ThroughputRun:
    kind: str  # "batch" or "incremental"
    repeat: int
    rows: int
    seconds: float
    rows_per_sec: float
    server_cpu_seconds: float
    result_rows: int
    verify_error: str | None = None
    timed_out: bool = False  # seconds / rows_per_sec are then bounds, not measurements


def run_throughput(args, registry: list) -> dict:
    out: dict = {"runs": [], "load": {}, "verify_notes": []}
    with Node(args, "throughput-load", registry) as s:
        with s.connect() as conn:
            table = args.source == "table"
            if table:
                conn.execute("CREATE TABLE s (id BIGINT PRIMARY KEY, g BIGINT, v BIGINT)")
            else:
                conn.execute("CREATE STREAM s (g BIGINT, v BIGINT)")
            expected: dict = {}
            log(f"throughput: loading {args.rows:,} rows ({args.groups:,} groups) into a {args.source} with COPY")
            cpu0 = s.cpu_seconds()
            t0 = time.perf_counter()
            copy_rows(conn, "s", copy_chunks(0, args.rows, args.groups, args.copy_chunk_rows, expected, table),
                      table)
            t1 = time.perf_counter()
            conn.execute("FLUSH")
            t2 = time.perf_counter()
            counted = int(conn.execute("SELECT count(*) FROM s").fetchone()[0])
            out["load"] = {
                "rows": args.rows, "copy_seconds": t1 - t0, "copy_flush_seconds": t2 - t0,
                "rows_per_sec": args.rows / (t1 - t0), "server_cpu_seconds": s.cpu_seconds() - cpu0,
                "counted_rows": counted, "vmhwm_kib_after_load": hwm_kib(s),
            }
            log(f"  loaded in {t1 - t0:.1f} s ({args.rows / (t1 - t0):,.0f} rows/s, partly bound by "
                f"generating the rows in Python); SELECT count(*) = {counted:,}")
            if counted != args.rows:
                out["verify_notes"].append(f"after COPY and FLUSH, SELECT count(*) FROM s returned {counted:,}, "
                                           f"expected {args.rows:,}")
            expected_rows = normalize((g, *e) for g, e in expected.items())
            del expected

            batch_sql = BATCH_SQL.format(src="s")
            try:
                for rep in range(1, args.repeat + 1):
                    # Alternate which one goes first, so neither always gets the warmer cache.
                    order = ("batch", "incremental") if rep % 2 == 1 else ("incremental", "batch")
                    for kind in order:
                        s.check_alive()
                        time.sleep(args.settle_seconds)
                        s.set_phase(f"throughput-{kind}")
                        if kind == "batch":
                            run = time_batch(s, conn, batch_sql, args.rows, rep, expected_rows, args)
                        else:
                            run = time_incremental(s, conn, args.rows, rep, expected_rows, batch_sql, args)
                        out["runs"].append(run)
                        log(f"throughput {kind:<11} run {rep}: "
                            + ("TIMED OUT after " if run.timed_out else "")
                            + f"{run.seconds:.2f} s = {run.rows_per_sec:,.0f} rows/s, "
                            f"server CPU {run.server_cpu_seconds:.2f} s"
                            + (f"  VERIFY FAILED: {run.verify_error}" if run.verify_error else ""))
            except Stuck as e:
                if getattr(e, "run", None) is not None:
                    out["runs"].append(e.run)
                log(f"throughput: {e}; abandoning the remaining runs")
                out["aborted"] = str(e)
            s.set_phase("idle")
        out["vmhwm_kib"] = hwm_kib(s)
        out["version"] = s.version
    runs = out["runs"]
    summ: dict = {}
    for kind in ("batch", "incremental"):
        rs = [r for r in runs if r.kind == kind and not r.timed_out]
        if rs:
            summ[kind] = {
                "rows_per_sec": statistics.median(r.rows_per_sec for r in rs),
                "seconds": statistics.median(r.seconds for r in rs),
                "min_rows_per_sec": min(r.rows_per_sec for r in rs),
                "max_rows_per_sec": max(r.rows_per_sec for r in rs),
                "server_cpu_us_per_row": statistics.median(r.server_cpu_seconds / r.rows * 1e6 for r in rs),
                "runs": len(rs),
                "timed_out_runs": sum(1 for r in runs if r.kind == kind and r.timed_out),
            }
    if "batch" in summ and "incremental" in summ:
        summ["ratio_incremental_over_batch"] = summ["incremental"]["rows_per_sec"] / summ["batch"]["rows_per_sec"]
        pairs = [i.rows_per_sec / b.rows_per_sec for b, i in zip(
            [r for r in runs if r.kind == "batch"], [r for r in runs if r.kind == "incremental"])
            if not (b.timed_out or i.timed_out)]
        summ["ratio_per_repeat"] = pairs
    out["summary"] = summ
    out["runs"] = [asdict(r) for r in runs]
    return out


def time_batch(s, conn, sql: str, rows: int, rep: int, expected_rows: list[tuple], args) -> ThroughputRun:
    cpu0 = s.cpu_seconds()
    t0 = time.perf_counter()
    _, cur, err = timed_execute(conn, sql, args.statement_timeout)
    if err is not None:
        if isinstance(err, psycopg.errors.QueryCanceled):
            return ThroughputRun("batch", rep, rows, args.statement_timeout, rows / args.statement_timeout,
                                 s.cpu_seconds() - cpu0, 0, None, timed_out=True)
        raise err
    result = cur.fetchall()
    t1 = time.perf_counter()
    cpu1 = s.cpu_seconds()
    got = normalize(result)
    err = None
    if got != expected_rows:
        err = f"batch query differs from the totals computed by the loader ({first_difference(got, expected_rows)})"
    return ThroughputRun("batch", rep, rows, t1 - t0, rows / (t1 - t0), cpu1 - cpu0, len(result), err)


def time_incremental(s, conn, rows: int, rep: int, expected_rows: list[tuple], batch_sql: str,
                     args) -> ThroughputRun:
    view = f"mv_{rep}"
    cpu0 = s.cpu_seconds()
    t0 = time.perf_counter()
    _, _, err = timed_execute(conn, VIEW_SQL.format(view=view, src="s"), args.statement_timeout)
    t1 = time.perf_counter()
    cpu1 = s.cpu_seconds()
    if err is not None:
        if isinstance(err, psycopg.errors.QueryCanceled):
            log(f"  CREATE MATERIALIZED VIEW {view} cancelled after {t1 - t0:.1f} s")
            run = ThroughputRun("incremental", rep, rows, t1 - t0, rows / (t1 - t0), cpu1 - cpu0, 0, None,
                                timed_out=True)
            # A cancelled CREATE should leave nothing behind; if the view is
            # still there it keeps the dataflow thread busy, so it has to go.
            left = [r[0] for r in conn.execute("SHOW MATERIALIZED VIEWS").fetchall()]
            if view in left:
                run.verify_error = (f"CREATE MATERIALIZED VIEW {view} returned 57014 (cancelled), yet the view "
                                    f"still exists (SHOW MATERIALIZED VIEWS: {left})")
                log(f"  {run.verify_error}; dropping it")
                t2 = time.perf_counter()
                _, _, derr = timed_execute(conn, f"DROP MATERIALIZED VIEW IF EXISTS {view}", 120, grace=5)
                if derr is not None:
                    stuck = Stuck(f"DROP MATERIALIZED VIEW {view} after a cancelled CREATE failed: {derr!r}")
                    stuck.run = run
                    raise stuck
                log(f"  DROP took {time.perf_counter() - t2:.1f} s")
            return run
        raise err
    # Read without FLUSH first: CREATE is documented to return only after the backfill.
    got = normalize(conn.execute(f"SELECT g, n, s, lo, hi FROM {view}").fetchall())
    err = None
    if got != expected_rows:
        err = f"right after CREATE the view differs from the expected result ({first_difference(got, expected_rows)})"
        conn.execute("FLUSH")
        again = normalize(conn.execute(f"SELECT g, n, s, lo, hi FROM {view}").fetchall())
        err += "; after FLUSH it " + ("matches" if again == expected_rows
                                      else f"still differs ({first_difference(again, expected_rows)})")
    else:
        # The comparison the brief of this benchmark asks for: view == batch query, both read now.
        batch = normalize(conn.execute(batch_sql).fetchall())
        if batch != got:
            err = f"view differs from the batch query ({first_difference(got, batch)})"
    if not args.keep_views:
        conn.execute(f"DROP MATERIALIZED VIEW {view}")
    return ThroughputRun("incremental", rep, rows, t1 - t0, rows / (t1 - t0), cpu1 - cpu0, len(got), err)


# --------------------------------------------------------------------------
# (b) Freshness under load
# --------------------------------------------------------------------------


class Loader(threading.Thread):
    """Writes `rate` rows/s into a stream, one COPY every `interval` seconds.

    The schedule is cumulative: each tick sends whatever is due since the
    start, at most `max_batch_factor` nominal batches, so a slow COPY is made
    up for afterwards and the achieved rate shows whether the server kept up.
    """

    def __init__(self, server, table: str, rate: float, interval: float, groups: int,
                 method: str, max_batch_factor: int = 10):
        super().__init__(daemon=True, name="loader")
        self.server, self.table, self.rate, self.interval = server, table, rate, interval
        self.groups, self.method = groups, method
        self.max_batch = max(1, int(rate * interval * max_batch_factor))
        self.stop_evt = threading.Event()
        self.sent = 0
        self.statements = 0
        self.stmt_lat: list[float] = []
        self.t0 = self.t1 = 0.0
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._mark_lock = threading.Lock()
        self._mark: tuple[float, int] | None = None

    def mark(self) -> None:
        """Start (or restart) counting the achieved rate from now."""
        with self._mark_lock:
            self._mark = (time.perf_counter(), self.sent)

    def achieved(self) -> tuple[int, float]:
        with self._mark_lock:
            m = self._mark
        if m is None:
            return self.sent, self.t1 - self.t0
        return self.sent - m[1], self.t1 - m[0]

    def run(self) -> None:
        conn = None
        try:
            conn = self.server.connect()
            cur = conn.cursor()
            perf = time.perf_counter
            self.t0 = perf()
            self.ready.set()
            tick = self.t0
            while not self.stop_evt.is_set():
                due = min(self.max_batch, int(self.rate * (perf() - self.t0)) - self.sent)
                if due > 0:
                    start = self.sent
                    s = perf()
                    if self.method == "copy":
                        data = b"".join(copy_chunks(start, due, self.groups, due))
                        with cur.copy(f"COPY {self.table} (g, v) FROM STDIN") as cp:
                            cp.write(data)
                    else:
                        values = ",".join(f"({i % self.groups},{value_of(i)})" for i in range(start, start + due))
                        cur.execute(f"INSERT INTO {self.table} (g, v) VALUES {values}".encode())
                    self.stmt_lat.append(perf() - s)
                    self.sent += due
                    self.statements += 1
                self.t1 = perf()
                tick += self.interval
                delay = tick - perf()
                if delay > 0:
                    self.stop_evt.wait(delay)
                elif delay < -1.0:
                    tick = perf()  # far behind: don't try to catch up with a burst of ticks
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
            self.ready.set()
        finally:
            self.t1 = time.perf_counter()
            if conn is not None:
                conn.close()


def run_freshness(args, registry: list) -> dict:
    out: dict = {}
    rng = random.Random(20240601)
    with Node(args, "freshness", registry) as s:
        with s.connect() as admin:
            admin.execute("CREATE STREAM s2 (g BIGINT, v BIGINT)")
            admin.execute(VIEW_SQL.format(view="mv2", src="s2"))
        loader = Loader(s, "s2", args.load_rate, args.load_interval_ms / 1000.0, args.groups, args.load_method)
        log(f"freshness: loading {args.load_rate:,.0f} rows/s ({args.load_method}, every "
            f"{args.load_interval_ms:g} ms); warm-up {args.fresh_warmup:g} s")
        loader.start()
        loader.ready.wait()
        lat_ms: list[float] = []
        insert_ms: list[float] = []
        timeouts = 0
        anomalies: list[str] = []
        polls = 0
        writer = s.connect()
        reader = s.connect()
        try:
            wcur, rcur = writer.cursor(), reader.cursor()
            ins_sql = "INSERT INTO s2 (g, v) VALUES (%s, %s)"
            point_sql = "SELECT n FROM mv2 WHERE g = %s"
            time.sleep(args.fresh_warmup)
            if loader.error:
                raise RuntimeError(f"the loader failed: {loader.error!r}") from loader.error
            loader.mark()
            t_start = time.perf_counter()
            poll = args.poll_ms / 1000.0
            timeout = args.fresh_timeout
            for k in range(args.fresh_samples):
                if loader.error:
                    raise RuntimeError(f"the loader failed: {loader.error!r}") from loader.error
                g = MARKER_BASE + k
                ts = time.perf_counter()
                wcur.execute(ins_sql, (Int8(g), Int8(k)))
                t_commit = time.perf_counter()
                insert_ms.append((t_commit - ts) * 1e3)
                deadline = t_commit + timeout
                next_poll = t_commit
                seen = None
                while True:
                    row = rcur.execute(point_sql, (Int8(g),)).fetchone()
                    now = time.perf_counter()
                    polls += 1
                    if row is not None:
                        seen = now
                        if row[0] != 1:
                            anomalies.append(f"marker group {g}: n = {row[0]}, expected 1")
                        break
                    if now >= deadline:
                        break
                    next_poll += poll
                    d = next_poll - time.perf_counter()
                    if d > 0:
                        time.sleep(d)
                    else:
                        next_poll = time.perf_counter()
                if seen is None:
                    timeouts += 1
                    log(f"  marker {k} not visible after {timeout:g} s")
                else:
                    lat_ms.append((seen - t_commit) * 1e3)
                if (k + 1) % 50 == 0:
                    cur_sorted = sorted(lat_ms)
                    log(f"  {k + 1} samples: p50 {percentile(cur_sorted, 0.5):.0f} ms, "
                        f"p99 {percentile(cur_sorted, 0.99):.0f} ms")
                # Each sample ends just after a barrier made the marker visible, so
                # without a pause the next marker would always land at the same
                # point of the barrier interval. A random pause spanning the whole
                # interval spreads the markers uniformly over it.
                time.sleep(rng.uniform(0, args.fresh_pause_ms / 1000.0))
            t_end = time.perf_counter()
        finally:
            loader.stop_evt.set()
            loader.join(timeout=30)
            writer.close()
            reader.close()
        if loader.error:
            raise RuntimeError(f"the loader failed: {loader.error!r}") from loader.error
        rows_in_window, window = loader.achieved()
        # Consistency after the load: the view must equal the batch query over the stream.
        with s.connect() as conn:
            conn.execute("FLUSH")
            view = normalize(conn.execute("SELECT g, n, s, lo, hi FROM mv2").fetchall())
            batch = normalize(conn.execute(BATCH_SQL.format(src="s2")).fetchall())
            total = int(conn.execute("SELECT count(*) FROM s2").fetchone()[0])
        expected_total = loader.sent + args.fresh_samples
        verify_error = None
        if view != batch:
            verify_error = f"after FLUSH mv2 differs from the batch query ({first_difference(view, batch)})"
        elif total != expected_total:
            verify_error = f"the stream holds {total:,} rows, expected {expected_total:,}"
        if verify_error:
            log(f"  VERIFY FAILED: {verify_error}")
        srt = sorted(lat_ms)
        lat_stmt = sorted(loader.stmt_lat)
        out = {
            "samples": len(lat_ms),
            "timeouts": timeouts,
            "anomalies": anomalies,
            "seconds": t_end - t_start,
            "p50_ms": percentile(srt, 0.50),
            "p90_ms": percentile(srt, 0.90),
            "p99_ms": percentile(srt, 0.99),
            "max_ms": srt[-1] if srt else float("nan"),
            "min_ms": srt[0] if srt else float("nan"),
            "mean_ms": statistics.fmean(srt) if srt else float("nan"),
            "latencies_ms": lat_ms,
            "marker_insert_p50_ms": percentile(sorted(insert_ms), 0.50),
            "marker_insert_p99_ms": percentile(sorted(insert_ms), 0.99),
            "polls": polls,
            "target_rate": args.load_rate,
            "achieved_rate": rows_in_window / window if window > 0 else 0.0,
            "loader_rows_total": loader.sent,
            "loader_statements": loader.statements,
            "loader_stmt_p50_ms": percentile(lat_stmt, 0.50) * 1e3,
            "loader_stmt_p99_ms": percentile(lat_stmt, 0.99) * 1e3,
            "view_groups": len(view),
            "stream_rows": total,
            "verify_error": verify_error,
            "vmhwm_kib": hwm_kib(s),
        }
        log(f"freshness: {len(lat_ms)} samples over {t_end - t_start:.1f} s: p50 {out['p50_ms']:.1f} ms, "
            f"p99 {out['p99_ms']:.1f} ms, max {out['max_ms']:.1f} ms; load {out['achieved_rate']:,.0f} rows/s "
            f"(target {args.load_rate:,.0f}); timeouts {timeouts}")
    return out


# --------------------------------------------------------------------------
# (c) Memory with many groups
# --------------------------------------------------------------------------


def run_memory(args, registry: list, mode: str) -> dict:
    rows, groups = args.mem_rows, args.mem_groups
    out: dict = {"mode": mode, "rows": rows, "groups": groups}
    with Node(args, f"memory-{mode}", registry) as s:
        out["vmhwm_kib_start"] = hwm_kib(s)
        with s.connect() as conn:
            conn.execute("CREATE STREAM s3 (g BIGINT, v BIGINT)")
            chunks = list(copy_chunks(0, rows, groups, args.copy_chunk_rows))
            if mode == "streaming":
                t0 = time.perf_counter()
                conn.execute(VIEW_SQL.format(view="mv3", src="s3"))
                out["create_seconds"] = time.perf_counter() - t0
                log(f"memory/{mode}: view created; loading {rows:,} rows into {groups:,} groups")
                cpu0 = s.cpu_seconds()
                t0 = time.perf_counter()
                copy_rows(conn, "s3", chunks)
                t1 = time.perf_counter()
                conn.execute("FLUSH")
                t2 = time.perf_counter()
                out.update(copy_seconds=t1 - t0, flush_seconds=t2 - t1, view_seconds=t2 - t0,
                           server_cpu_seconds=s.cpu_seconds() - cpu0)
                log(f"  COPY {t1 - t0:.1f} s, then FLUSH {t2 - t1:.1f} s")
            else:
                log(f"memory/{mode}: loading {rows:,} rows ({groups:,} groups), then creating the view")
                t0 = time.perf_counter()
                copy_rows(conn, "s3", chunks)
                conn.execute("FLUSH")
                out["copy_seconds"] = time.perf_counter() - t0
                out["vmhwm_kib_after_load"] = hwm_kib(s)
                cpu0 = s.cpu_seconds()
                t0 = time.perf_counter()
                conn.execute(VIEW_SQL.format(view="mv3", src="s3"))
                t1 = time.perf_counter()
                out.update(create_seconds=t1 - t0, view_seconds=t1 - t0, server_cpu_seconds=s.cpu_seconds() - cpu0)
                log(f"  COPY {out['copy_seconds']:.1f} s, CREATE MATERIALIZED VIEW (backfill) {t1 - t0:.1f} s")
            del chunks
            out["rows_per_sec"] = rows / out["view_seconds"]
            n_groups = int(conn.execute("SELECT count(*) FROM mv3").fetchone()[0])
            n_rows = conn.execute("SELECT sum(n) FROM mv3").fetchone()[0]
            n_rows = None if n_rows is None else int(n_rows)
            g = groups // 2
            point = conn.execute("SELECT n FROM mv3 WHERE g = %s", (Int8(g),)).fetchone()
            expect_point = len(range(g, rows, groups))
            errs = []
            if n_groups != min(groups, rows):
                errs.append(f"view has {n_groups:,} groups, expected {min(groups, rows):,}")
            if n_rows != rows:
                errs.append(f"sum(n) over the view is {n_rows}, expected {rows:,}")
            if (point[0] if point else None) != expect_point:
                errs.append(f"point read of group {g} returned {point}, expected n = {expect_point}")
            out["verify_error"] = "; ".join(errs) or None
            if errs:
                log(f"  VERIFY FAILED: {out['verify_error']}")
        out["vmhwm_kib"] = hwm_kib(s)
        out["vmrss_kib_end"] = rss_kib(s)
        mem = s.memory()
        out["peak_pss_kib"] = mem.get("peak_pss_kib")
        out["phase_peak_pss_kib"] = mem.get("phase_peak_pss_kib")
        log(f"memory/{mode}: peak RSS (VmHWM) {fmt_mib(out['vmhwm_kib'])} MiB, RSS at end "
            f"{fmt_mib(out['vmrss_kib_end'])} MiB")
    return out


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def machine_info(args) -> dict:
    m = ingest.machine_info(args.tmp_dir)
    try:
        m["nproc"] = len(os.sched_getaffinity(0))
    except AttributeError:
        m["nproc"] = os.cpu_count()
    return m


def goal(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "**missed**")


def fmt_ms(x: float | None) -> str:
    return "—" if x is None or x != x else f"{x:,.1f}"


def fmt_s(x: float | None) -> str:
    return "—" if x is None or x != x else f"{x:,.2f}"


def markdown(args, results: dict, machine: dict, version: str) -> str:
    L: list[str] = []
    L.append("### Materialized views: throughput, freshness, memory")
    L.append("")
    th = results.get("throughput")
    if th:
        sm = th["summary"]
        b, i = sm.get("batch", {}), sm.get("incremental", {})
        ratio = sm.get("ratio_incremental_over_batch")
        where = ("in a stream (`CREATE STREAM s (g BIGINT, v BIGINT)`" if args.source == "stream" else
                 "in a table (`CREATE TABLE s (id BIGINT PRIMARY KEY, g BIGINT, v BIGINT)`")
        L.append(
            f"**Throughput.** {args.rows:,} rows {where}, loaded with "
            f"`COPY`), g = i mod {args.groups:,}. The same aggregate "
            f"`SELECT g, count(*), sum(v), min(v), max(v) FROM s GROUP BY g` computed as a batch query "
            f"(DataFusion inside weir, all result rows fetched) and incrementally, by timing "
            f"`CREATE MATERIALIZED VIEW` over the loaded rows (it returns when the backfill is complete). "
            f"Median of {args.repeat} run{'s' if args.repeat != 1 else ''} each, alternating which goes first; "
            + ("each run's view is kept (idle) while the next one is created."
               if args.keep_views else "the view is dropped after each run.")
        )
        L.append("")
        L.append("| Measure | Batch query | Incremental view | Incremental / batch | Goal |")
        L.append("|---|---:|---:|---:|---|")
        L.append(f"| Rows/s | {fmt_int(b.get('rows_per_sec'))} | {fmt_int(i.get('rows_per_sec'))} | "
                 f"{'—' if ratio is None else f'{ratio:.2f}×'} | ≥ 0.5× {goal(None if ratio is None else ratio >= 0.5)} |")
        L.append(f"| Seconds for {args.rows:,} rows | {fmt_s(b.get('seconds'))} | {fmt_s(i.get('seconds'))} | — | |")
        L.append(f"| Server CPU per row (µs) | {fmt_s(b.get('server_cpu_us_per_row'))} | "
                 f"{fmt_s(i.get('server_cpu_us_per_row'))} | "
                 f"{fmt_ratio(i.get('server_cpu_us_per_row'), b.get('server_cpu_us_per_row'))} | |")
        if b.get("runs", 0) > 1:
            L.append(f"| Range of rows/s over runs | {fmt_int(b.get('min_rows_per_sec'))} – "
                     f"{fmt_int(b.get('max_rows_per_sec'))} | {fmt_int(i.get('min_rows_per_sec'))} – "
                     f"{fmt_int(i.get('max_rows_per_sec'))} | "
                     + ", ".join(f"{r:.2f}×" for r in sm.get("ratio_per_repeat", [])) + " | |")
        L.append("")
        tmo = [r for r in th["runs"] if r.get("timed_out")]
        if tmo:
            L.append(f"**{len(tmo)} run(s) did not finish within {args.statement_timeout:g} s and were cancelled** "
                     "(left out of the medians): "
                     + ", ".join(f"{r['kind']} run {r['repeat']}" for r in tmo) + ".")
            L.append("")
        if th.get("aborted"):
            L.append(f"**The remaining runs were abandoned:** {th['aborted']}.")
            L.append("")
        ld = th.get("load", {})
        bad = [r for r in th["runs"] if r.get("verify_error")] + [{"verify_error": n} for n in th["verify_notes"]]
        L.append(
            f"Loading the rows took {fmt_s(ld.get('copy_seconds'))} s ({fmt_int(ld.get('rows_per_sec'))} rows/s, "
            f"bounded by generating them in Python). "
            + ("Every view equalled the batch query and the totals computed by the loader."
               if not bad else f"**{len(bad)} verification failure(s):** "
               + "; ".join(r["verify_error"] for r in bad) + ".")
            + f" Peak RSS of that node: {fmt_mib(th.get('vmhwm_kib'))} MiB."
        )
        L.append("")
    fr = results.get("freshness")
    if fr:
        ok = fr["p99_ms"] < 250 and fr["timeouts"] == 0
        L.append(
            f"**Freshness** at the default 100 ms barrier interval, under a steady load of "
            f"{args.load_rate:,.0f} rows/s (one `{'COPY' if args.load_method == 'copy' else 'INSERT'}` of "
            f"{int(args.load_rate * args.load_interval_ms / 1000):,} rows every {args.load_interval_ms:g} ms, "
            f"own connection) into the stream feeding a `GROUP BY g` view with the same aggregates. "
            f"A probe inserts a marker row into a group of its own and, on another connection, polls the view with "
            f"a point read every {args.poll_ms:g} ms; the latency runs from the marker's `INSERT` returning "
            f"(committed) to the first read that sees it, so it includes up to one poll interval plus a round "
            f"trip. A random pause of 0–{args.fresh_pause_ms:g} ms between markers spreads them uniformly over the "
            f"barrier interval."
        )
        L.append("")
        L.append("| Measure | Value | Goal |")
        L.append("|---|---:|---|")
        L.append(f"| Commit-to-visible latency p50 (ms) | {fmt_ms(fr['p50_ms'])} | |")
        L.append(f"| Commit-to-visible latency p90 (ms) | {fmt_ms(fr['p90_ms'])} | |")
        L.append(f"| Commit-to-visible latency p99 (ms) | {fmt_ms(fr['p99_ms'])} | < 250 ms {goal(ok)} |")
        L.append(f"| Commit-to-visible latency max (ms) | {fmt_ms(fr['max_ms'])} | |")
        L.append(f"| Samples (not visible within {args.fresh_timeout:g} s) | {fr['samples']} ({fr['timeouts']}) | |")
        L.append(f"| Load achieved (rows/s) | {fmt_int(fr['achieved_rate'])} | {args.load_rate:,.0f} |")
        L.append(f"| Loader statement latency p50 / p99 (ms) | {fmt_ms(fr['loader_stmt_p50_ms'])} / "
                 f"{fmt_ms(fr['loader_stmt_p99_ms'])} | |")
        L.append(f"| Marker `INSERT` latency p50 / p99 (ms) | {fmt_ms(fr['marker_insert_p50_ms'])} / "
                 f"{fmt_ms(fr['marker_insert_p99_ms'])} | |")
        L.append("")
        notes = [f"{fr['samples']} samples over {fr['seconds']:.1f} s; the fastest marker showed up after "
                 f"{fmt_ms(fr['min_ms'])} ms."]
        if fr["achieved_rate"] < 0.95 * args.load_rate:
            notes.append(f"**The load fell short of its target ({fr['achieved_rate']:,.0f} of "
                         f"{args.load_rate:,.0f} rows/s).**")
        if fr.get("verify_error"):
            notes.append(f"**Verification failed: {fr['verify_error']}.**")
        else:
            notes.append(f"After the run (and `FLUSH`) the view equalled the batch query over all "
                         f"{fr['stream_rows']:,} rows of the stream.")
        if fr.get("anomalies"):
            notes.append(f"**{len(fr['anomalies'])} marker(s) read with a wrong count, e.g. {fr['anomalies'][0]}.**")
        L.append(" ".join(notes))
        L.append("")
    mems = results.get("memory") or []
    if mems:
        L.append(
            f"**Memory** with many groups: a `GROUP BY g` view (count, sum, min, max) over {args.mem_rows:,} rows "
            f"with {args.mem_groups:,} distinct groups (g = i mod {args.mem_groups:,}), each variant on a fresh "
            f"node. Peak resident set is `VmHWM` of the weir process over the node's whole life "
            f"(loading included)."
        )
        L.append("")
        L.append("| Variant | Peak RSS (MiB) | Before the view (MiB) | View time (s) | Rows/s into the view | Goal |")
        L.append("|---|---:|---:|---:|---:|---|")
        for m in mems:
            if m["mode"] == "backfill":
                label = "load, then `CREATE MATERIALIZED VIEW` (backfill)"
                before = m.get("vmhwm_kib_after_load")
            else:
                label = "`CREATE MATERIALIZED VIEW`, then `COPY` + `FLUSH`"
                before = m.get("vmhwm_kib_start")
            peak = m.get("vmhwm_kib")
            L.append(f"| {label} | {fmt_mib(peak)} | {fmt_mib(before)} | {fmt_s(m.get('view_seconds'))} | "
                     f"{fmt_int(m.get('rows_per_sec'))} | < 1 GiB {goal(None if not peak else peak < 1024 * 1024)} |")
        L.append("")
        bad = [m for m in mems if m.get("verify_error")]
        if bad:
            L.append("**Verification failed:** " + "; ".join(f"{m['mode']}: {m['verify_error']}" for m in bad) + ".")
        else:
            L.append("Both views held every group with the right counts.")
        L.append("")
    L.append(
        f"Machine: {machine['cpu']}, nproc {machine['nproc']}"
        + (f", {machine['memory_gib']} GiB RAM" if machine.get("memory_gib") else "")
        + f", Linux {machine['kernel']}; data directories on {machine['tmp_fs']} (`{machine['tmp_dir']}`). "
        f"Client: Python {machine['python']}, psycopg {machine['psycopg']} (libpq {machine['libpq']}), on the same "
        f"machine, over TCP to 127.0.0.1. weir: `{version}`, default configuration"
        + (f" plus `{' '.join(args.weir_arg)}`" if args.weir_arg else "") + "."
    )
    L.append("")
    L.append("Reproduce with:")
    L.append("")
    L.append("```sh")
    L.append("cargo build --release")
    L.append("python3 " + " ".join(["benches/views.py", *args.argv_for_docs]))
    L.append("```")
    th_runs = (th or {}).get("runs") or []
    if th_runs:
        L.append("")
        L.append("<details><summary>All throughput runs</summary>")
        L.append("")
        L.append("| Kind | Run | Rows | Seconds | Rows/s | Server CPU s |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for r in th_runs:
            lim = "≥ " if r.get("timed_out") else ""
            lo = "≤ " if r.get("timed_out") else ""
            L.append(f"| {r['kind']} | {r['repeat']} | {r['rows']:,} | {lim}{r['seconds']:.2f} | "
                     f"{lo}{r['rows_per_sec']:,.0f} | {r['server_cpu_seconds']:.2f} |")
        L.append("")
        L.append("</details>")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Materialized view benchmark: incremental vs batch throughput, freshness, memory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN, help="weir release binary")
    p.add_argument("--weir-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for `weir serve` (repeatable)")
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    g = p.add_argument_group("throughput")
    g.add_argument("--rows", type=int, default=10_000_000, help="rows in the stream")
    g.add_argument("--groups", type=int, default=1000, help="distinct values of g (throughput and freshness)")
    g.add_argument("--repeat", type=int, default=3, help="batch and incremental runs each (median reported)")
    g.add_argument("--copy-chunk-rows", type=int, default=50_000, help="rows per COPY data message batch")
    g.add_argument("--source", choices=("stream", "table"), default="stream",
                   help="what the rows go into: an append-only stream, or a table with a primary key "
                        "(then min and max keep every value of a group, as rows may be deleted)")
    g.add_argument("--keep-views", action="store_true",
                   help="keep each run's view instead of dropping it before the next run (the kept views are "
                        "idle: the stream gets no new rows)")
    g.add_argument("--statement-timeout", type=float, default=900.0,
                   help="cancel a timed query or CREATE MATERIALIZED VIEW after this many seconds")
    g = p.add_argument_group("freshness")
    g.add_argument("--load-rate", type=float, default=50_000, help="background load in rows/s")
    g.add_argument("--load-interval-ms", type=float, default=20, help="one loader statement every this many ms")
    g.add_argument("--load-method", choices=("copy", "insert"), default="copy",
                   help="loader statement: COPY or multi-row INSERT")
    g.add_argument("--fresh-samples", type=int, default=200, help="marker rows to time")
    g.add_argument("--fresh-pause-ms", type=float, default=100,
                   help="random pause between markers, uniform in 0..this; keep it at least the barrier "
                        "interval, or the markers stay in step with the barriers")
    g.add_argument("--fresh-warmup", type=float, default=2.0, help="seconds of load before the first marker")
    g.add_argument("--fresh-timeout", type=float, default=10.0, help="give up on a marker after this many s")
    g.add_argument("--poll-ms", type=float, default=2.0, help="point-read polling interval")
    g = p.add_argument_group("memory")
    g.add_argument("--mem-rows", type=int, default=2_000_000, help="rows in the many-groups stream")
    g.add_argument("--mem-groups", type=int, default=1_000_000, help="distinct groups in the many-groups view")
    g.add_argument("--mem-modes", default=",".join(MEM_MODES),
                   help=f"comma-separated subset of {','.join(MEM_MODES)}")
    g = p.add_argument_group("general")
    g.add_argument("--json", metavar="FILE", help="also write all runs and the summary as JSON")
    g.add_argument("--tmp-dir", default=tempfile.gettempdir(), help="where the nodes' scratch directories go")
    g.add_argument("--keep", action="store_true", help="keep the scratch directories and logs")
    g.add_argument("--startup-timeout", type=float, default=60.0, help="seconds to wait for weir to start")
    g.add_argument("--mem-interval", type=float, default=0.25, help="memory sampling interval in seconds")
    g.add_argument("--settle-seconds", type=float, default=1.0, help="pause before each timed run")
    g.add_argument("--no-prepare", action="store_true", help="never use named prepared statements")
    args = p.parse_args(argv)
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    args.mem_modes = [x.strip() for x in args.mem_modes.split(",") if x.strip()]
    if [x for x in args.phases if x not in PHASES] or not args.phases:
        p.error(f"--phases: choose from {PHASES}")
    if [x for x in args.mem_modes if x not in MEM_MODES]:
        p.error(f"--mem-modes: choose from {MEM_MODES}")
    for name in ("rows", "groups", "repeat", "copy_chunk_rows", "fresh_samples", "mem_rows", "mem_groups"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.load_rate <= 0 or args.load_interval_ms <= 0 or args.poll_ms <= 0:
        p.error("--load-rate, --load-interval-ms and --poll-ms must be positive")
    if args.groups >= MARKER_BASE:
        p.error(f"--groups must be below {MARKER_BASE:,} (higher groups are reserved for freshness markers)")
    local = ("--json", "--weir-bin", "--tmp-dir")
    args.argv_for_docs = [
        a for i, a in enumerate(argv)
        if a not in local and not (i > 0 and argv[i - 1] in local) and not a.startswith(tuple(x + "=" for x in local))
    ]
    return args


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if psycopg is None:
        print('benches/views.py needs psycopg 3; install it with: pip install "psycopg[binary]"', file=sys.stderr)
        return 2
    if not sys.platform.startswith("linux"):
        print("benches/views.py reads /proc and runs on Linux only", file=sys.stderr)
        return 2
    if not os.access(args.weir_bin, os.X_OK):
        print(f"weir binary not found at {args.weir_bin}.\n"
              f"Build it with `CARGO_TARGET_DIR={DEFAULT_TARGET_DIR} cargo build --release` or pass --weir-bin PATH.",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_sigterm)
    registry: list = []
    results: dict = {}
    rc = 0
    try:
        machine = machine_info(args)
        log(f"machine: {machine['cpu']}, nproc {machine['nproc']}, {machine['memory_gib']} GiB RAM")
        if "throughput" in args.phases:
            results["throughput"] = run_throughput(args, registry)
        if "freshness" in args.phases:
            results["freshness"] = run_freshness(args, registry)
        if "memory" in args.phases:
            results["memory"] = [run_memory(args, registry, mode) for mode in args.mem_modes]
        version = registry[0].version if registry else "unknown"
        sys.stdout.write(markdown(args, results, machine, version))
        sys.stdout.flush()
        if args.json:
            doc = {
                "argv": argv,
                "config": {k: v for k, v in vars(args).items() if k != "argv_for_docs"},
                "machine": machine,
                "weir_version": version,
                "results": results,
            }
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2, default=str)
                f.write("\n")
            log(f"wrote {args.json}")
        failed = [
            *[r for r in (results.get("throughput") or {}).get("runs", []) if r.get("verify_error")],
            *(results.get("throughput") or {}).get("verify_notes", []),
            *([1] if (results.get("freshness") or {}).get("verify_error") else []),
            *[m for m in results.get("memory") or [] if m.get("verify_error")],
        ]
        if failed:
            log(f"{len(failed)} verification failure(s); see the report")
            rc = 3
    except KeyboardInterrupt:
        log("interrupted; shutting weir down")
        rc = 130
    except Exception as e:
        log(f"error: {e!r}")
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for s in reversed(registry):
            stop_server(s)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
