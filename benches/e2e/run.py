#!/usr/bin/env python3
"""Nexmark end to end: every engine reads the same CSV file into a live
query, and the output of every timed run is checked.

    python3 benches/e2e/run.py                        # 2,000,000 events, 3 runs
    python3 benches/e2e/run.py --smoke                # 100,000 events, 1 run
    python3 benches/e2e/run.py --events 2000000 --repeat 3 --queries q0,q1,q2,q5,q7

The queries (benches/e2e/queries.py) are nexmark-flink's: q0 and q1
keep `extra`, q1 is `0.908 * price` (a DECIMAL), q2 `auction % 123 = 0`,
q5 the full hot-items query (counts per auction per HOP window, the
maximum per window, joined back with `num >= maxn`), q7 the highest bid
with `BETWEEN window_end - 10 s AND window_end`; q7_tumble is q7's inner
windowed aggregate on its own. Of q11-q22, those that read bids alone:
q11 (bids per bidder per SESSION, 10 s gap), q15-q17 (counts by price
rank per day, per channel and day, per auction and day, with `FILTER`
and `count(DISTINCT)`), q18 (each bidder's latest bid per auction) and
q19 (the ten highest bids per auction) by `row_number()`, q21 (a
channel id by CASE and a regular expression) and q22 (URL directories).
q18 and q19 are checked on the columns the input determines (ties of
time or price leave the rest to the engine), q17's average by its integer
part (Flink's average of a BIGINT is one). `ingest` is weir only: the
same COPY into the table with no view, the baseline of what the views
add.

1. Input, once per event count (cached in --workdir as events-N/bid.csv).
   A weir node generates the events with `CREATE SOURCE bid WITH
   (connector = 'nexmark', nexmark.event.num = N, base time pinned)` and
   `COPY bid TO STDOUT (FORMAT csv)` writes the bids to a CSV file (every
   column, `extra` included). That file is the one input of every engine.
   Not timed. DuckDB's answer to each query over the same file is the
   reference (cached as events-N/expected-qN.json).

2. For each query, run by run, the engines take turns (weir, then Flink
   without checkpoints, then Flink with RocksDB and checkpoints), the CSV
   file read through once before each run so every engine finds it in the
   page cache:

   weir, the live path. A fresh node on an empty data directory, default
   settings (an epoch every 100 ms, fsync on). `CREATE TABLE bid (...)
   APPEND ONLY` (with the watermark `date_time - 4 s` for the windowed
   queries, as Flink's source) and `CREATE MATERIALIZED VIEW qN AS ...`
   come first; once the node is idle, the timed region starts: the CSV file
   streamed in 1 MiB chunks through `COPY bid FROM STDIN (FORMAT csv)`
   (psycopg 3), then `FLUSH`, then until the node is idle: its CPU time
   sampled every 200 ms, idle once two samples in a row show no growth
   (--idle-cpu, default 0; an idle node uses none); the region ends at
   the last sample that grew (or when FLUSH returned, if later).
   Measured: wall seconds, CPU-seconds of the weir process (utime + stime
   from /proc/PID/stat, all threads), peak resident set (VmHWM, reset
   before the region). The client's own CPU (reading the file, sending
   it) is not counted (the JSON keeps it). Also recorded: time and CPU to
   the end of COPY and to the end of FLUSH. Then
   `SELECT * FROM qN` is hashed and checked.

   Flink 2.3 (PyFlink local mini-cluster, parallelism 1, streaming mode,
   benches/e2e/flink_job.py, a fresh process and JVM per run): the same
   CSV file as a filesystem source, mini-batch on (2 s, 5000 rows), heap
   set with -Xms/-Xmx (--flink-heap), watermark `date_time - 4 s` for
   the windowed queries, a filesystem sink (CSV; a Debezium-JSON changelog
   if a plan updates rows) whose files are read back, the changelog
   applied, hashed and checked. Two modes: `nockpt` (hash-map state, no
   checkpoints) and `rocksdb` (RocksDB state, exactly-once checkpoints
   every second). Each run's process first runs the job over an empty
   file twice (warming the JVM; the second gives the cost of starting a
   job), then the job over the events, timed from `execute_sql` until the
   job finished: wall seconds, CPU-seconds of the process tree (the Python
   client and the JVM), peak resident set of the JVM. The table gives
   the job over the events less the job over no events ("net": stream
   processing without the mini-cluster's start, which favours Flink); the
   JSON keeps both.

3. Every timed run's output is checked: an order-independent hash of the
   canonical text of every row (benches/e2e/queries.py says how values
   are canonicalised) and the row count must equal DuckDB's. A mismatch
   fails the run: the harness prints which engine, query and run, with
   the row counts, and exits non-zero after the table.

Rates divide by the rows the query reads (bid rows, for every query here).
Medians and ranges over --repeat runs; the weir/Flink ratio per CPU-second
is computed within each run (run i of weir against run i of Flink) and
its median reported.

Output: Markdown on stdout, progress on stderr, every run in --json FILE.

Requirements: Python 3.10+ with `pip install "psycopg[binary]" duckdb`; a
release build of weir; for Flink: `python3 -m venv
~/.cache/weir-tools/flink-venv && ~/.cache/weir-tools/flink-venv/bin/pip
install apache-flink==2.3.0` (Java 17).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import decimal
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ingest  # noqa: E402  (benches/ingest.py: /proc helpers)
import queries as Q  # noqa: E402  (benches/e2e/queries.py)
from ingest import proc_status_kib, reset_peak  # noqa: E402
from ingest import tree_cpu_seconds as cpu_seconds  # noqa: E402

psycopg = ingest.psycopg

DEFAULT_WEIR_BIN = os.path.join(
    os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/weir-target-rel"), "release", "weir")
DEFAULT_FLINK_PYTHON = os.path.expanduser("~/.cache/weir-tools/flink-venv/bin/python")
BASE_TIME = 1_436_918_400_000
FLINK_MODES = ["nockpt", "rocksdb"]
ENGINES = ["weir"] + [f"flink-{m}" for m in FLINK_MODES]
SAMPLE = 0.2
csv.field_size_limit(1 << 30)


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Weir(ingest.WeirNode):
    """A weir node, and when it has finished its work."""

    def wait_idle(self, idle_cpu: float, timeout: float = 3600) -> tuple[float, float]:
        """Sample the node's CPU every 200 ms until two samples in a row grew
        by at most idle_cpu; returns (perf_counter, CPU-seconds) of the last
        sample that grew (the end of the work)."""
        pid = self.proc.pid
        deadline = time.time() + timeout
        last_t, last_cpu = time.perf_counter(), cpu_seconds(pid)
        end_t, end_cpu, quiet = last_t, last_cpu, 0
        while quiet < 2:
            if time.time() > deadline:
                raise SystemExit("weir did not become idle")
            time.sleep(SAMPLE)
            t, c = time.perf_counter(), cpu_seconds(pid)
            if c - last_cpu > idle_cpu:
                quiet, end_t, end_cpu = 0, t, c
            else:
                quiet += 1
            last_t, last_cpu = t, c
        return end_t, end_cpu


def bid_columns(watermark: bool) -> str:
    cols = [f"{c} {t}" for c, t in Q.BID_COLUMNS]
    if watermark:
        cols.append(Q.WATERMARK)
    return ", ".join(cols)


# --------------------------------------------------------------------------
# 1. Input and reference answers
# --------------------------------------------------------------------------

def generate(args, data: str) -> dict:
    """events-N/bid.csv from weir's Nexmark generator, once per N."""
    meta_path = os.path.join(data, "input.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        log(f"input cached: {meta['rows']['bid']:,} bids in {data}")
        return meta
    os.makedirs(data, exist_ok=True)
    gen_dir = os.path.join(data, "generator")
    shutil.rmtree(gen_dir, ignore_errors=True)
    node = Weir(args.weir_bin, gen_dir, os.path.join(data, "generator.log"))
    node.start()
    try:
        with node.connect() as conn:
            conn.execute(
                f"CREATE SOURCE bid WITH (connector = 'nexmark', nexmark.table.type = 'Bid', "
                f"nexmark.event.num = '{args.events}', nexmark.base.time = '{BASE_TIME}', "
                f"nexmark.split.num = '1')")
            node.wait_for_generators(conn, 0.1)
            conn.execute("FLUSH")
            rows = conn.execute("SELECT count(*) FROM bid").fetchone()[0]
            tmp = os.path.join(data, "bid.csv.tmp")
            with open(tmp, "wb") as out, conn.cursor().copy("COPY bid TO STDOUT WITH (FORMAT csv)") as copy:
                for chunk in copy:
                    out.write(chunk)
            os.rename(tmp, os.path.join(data, "bid.csv"))
    finally:
        node.stop()
        shutil.rmtree(gen_dir, ignore_errors=True)
    meta = {"events": args.events, "rows": {"bid": rows}, "bytes": os.path.getsize(os.path.join(data, "bid.csv")),
            "generator": "weir CREATE SOURCE ... connector = 'nexmark', split.num 1, "
                         f"base.time {BASE_TIME}"}
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    log(f"generated {rows:,} bids ({meta['bytes'] / 2**20:.0f} MiB of CSV) into {data}")
    return meta


def duckdb_connection(csv_path: str):
    import duckdb
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    columns = ", ".join(f"'{c}': '{t}'" for c, t in Q.BID_COLUMNS)
    con.execute(
        f"CREATE VIEW bid AS SELECT * FROM read_csv('{csv_path}', header = false, delim = ',', "
        f"quote = '\"', escape = '\"', auto_detect = false, allow_quoted_nulls = false, "
        f"columns = {{{columns}}})")
    return con


def expected(data: str, query: str) -> dict:
    path = os.path.join(data, f"expected-{query}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    con = duckdb_connection(os.path.join(data, "bid.csv"))
    digest = Q.Digest(query)
    cur = con.execute(Q.duckdb_sql(query))
    while True:
        rows = cur.fetchmany(100_000)
        if not rows:
            break
        for row in rows:
            digest.add(row)
    result = digest.result()
    with open(path, "w") as f:
        json.dump(result, f)
    log(f"DuckDB's answer to {query}: {result['rows']:,} rows, hash {result['hash']}")
    return result


def warm(path: str) -> None:
    """Read the input through, so that every run finds it in the page cache."""
    buffer = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


# --------------------------------------------------------------------------
# 2. Timed runs
# --------------------------------------------------------------------------

def run_weir(args, query: str, data: str, scratch: str) -> dict:
    csv_path = os.path.join(data, "bid.csv")
    data_dir = os.path.join(scratch, f"weir-{query}")
    shutil.rmtree(data_dir, ignore_errors=True)
    node = Weir(args.weir_bin, data_dir, os.path.join(scratch, f"weir-{query}.log"))
    node.start()
    try:
        pid = node.proc.pid
        with node.connect() as conn:
            watermark = query in Q.WINDOWED and not args.weir_no_watermark
            conn.execute(f"CREATE TABLE bid ({bid_columns(watermark)}) APPEND ONLY")
            view = "bid" if query in Q.WEIR_ONLY else query
            if query not in Q.WEIR_ONLY:  # "ingest": the table alone
                try:
                    conn.execute(f"CREATE MATERIALIZED VIEW {query} AS {Q.weir_sql(query)}")
                except psycopg.Error as e:
                    return {"error": f"CREATE MATERIALIZED VIEW: {e.sqlstate}: {e}".strip()}
            node.wait_idle(args.idle_cpu)
            warm(csv_path)
            reset_peak(pid)
            client0 = time.process_time()
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            with conn.cursor() as cur, cur.copy("COPY bid FROM STDIN (FORMAT csv)") as copy, \
                    open(csv_path, "rb") as f:
                while chunk := f.read(1 << 20):
                    copy.write(chunk)
            copy_t, copy_cpu = time.perf_counter(), cpu_seconds(pid)
            client_cpu = time.process_time() - client0
            conn.execute("FLUSH")
            flush_t, flush_cpu = time.perf_counter(), cpu_seconds(pid)
            end_t, end_cpu = node.wait_idle(args.idle_cpu)
            end_t, end_cpu = max(end_t, flush_t), max(end_cpu, flush_cpu)
            peak = proc_status_kib(pid).get("VmHWM")
            digest = Q.Digest(query)
            with conn.cursor() as cur:
                for row in cur.stream(f"SELECT * FROM {view}"):
                    digest.add(row)
        return {"seconds": end_t - t0, "cpu_seconds": end_cpu - cpu0, "peak_kib": peak,
                "copy_seconds": copy_t - t0, "copy_cpu_seconds": copy_cpu - cpu0,
                "flush_seconds": flush_t - t0, "flush_cpu_seconds": flush_cpu - cpu0,
                "client_copy_cpu_seconds": client_cpu, "watermark": watermark, "output": digest.result()}
    finally:
        node.stop()
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


def read_flink_sink(query: str, sink: str, fmt: str) -> dict:
    """The rows of the sink's files (Flink names finished files part-*;
    hidden in-progress files would mean an unfinished job)."""
    digest = Q.Digest(query)
    names = sorted(os.listdir(sink)) if os.path.isdir(sink) else []
    hidden = [n for n in names if n.startswith(".")]
    if hidden:
        raise RuntimeError(f"unfinished sink files in {sink}: {hidden[:3]}")
    columns = [c for c, _ in Q.COLUMNS[query]]
    for name in names:
        with open(os.path.join(sink, name), newline="") as f:
            if fmt == "csv":
                for row in csv.reader(f):
                    digest.add(row)
            else:
                for line in f:
                    if not line.strip():
                        continue
                    change = json.loads(line, parse_float=decimal.Decimal)
                    if change.get("before") is not None and change["op"] in ("d", "u"):
                        digest.remove([change["before"][c] for c in columns])
                    if change.get("after") is not None and change["op"] in ("c", "r", "u"):
                        digest.add([change["after"][c] for c in columns])
    return digest.result()


SINK_FORMAT: dict[str, str] = {}


def run_flink(args, query: str, mode: str, data: str, scratch: str) -> dict:
    csv_path = os.path.join(data, "bid.csv")
    empty = os.path.join(scratch, "empty.csv")
    open(empty, "w").close()
    out = os.path.join(scratch, f"flink-{query}-{mode}")
    env = dict(os.environ, JVM_ARGS=f"-Xms{args.flink_heap} -Xmx{args.flink_heap}")
    formats = [args.flink_sink] if args.flink_sink != "auto" else [SINK_FORMAT.get(query, "csv")]
    if formats[0] == "csv" and args.flink_sink == "auto":
        formats.append("debezium-json")
    for fmt in formats:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        warm(csv_path)
        cmd = [args.flink_python, os.path.join(HERE, "flink_job.py"), "--query", query,
               "--csv", csv_path, "--empty", empty, "--out", out, "--mode", mode,
               "--sink-format", fmt, "--parallelism", "1"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.flink_timeout, env=env)
        if proc.returncode == 0:
            break
        if fmt == "csv" and "update" in proc.stderr.lower() and "support" in proc.stderr.lower() \
                and len(formats) > 1:
            log(f"flink {query}: the plan updates rows; sink as a Debezium-JSON changelog")
            continue
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.lstrip().startswith("at ")]
        return {"error": "\n".join(lines[-15:])}
    SINK_FORMAT[query] = fmt
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    timed, startup = result["timed"], result["startup"]
    try:
        output = read_flink_sink(query, result["sink"], fmt)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        output = {"rows": -1, "hash": f"unreadable sink: {e}"}
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return {"seconds": timed["seconds"] - startup["seconds"],
            "cpu_seconds": timed["cpu_seconds"] - startup["cpu_seconds"],
            "peak_kib": timed["peak_kib"], "raw": timed, "startup": startup, "first_job": result["first"],
            "sink_format": fmt, "mode": mode, "parallelism": 1, "heap": args.flink_heap, "output": output}


def check(engine: str, query: str, run: int, result: dict, want: dict) -> bool:
    got = result.get("output")
    if got is None:
        return False
    ok = got == want
    result["check"] = "ok" if ok else "MISMATCH"
    if not ok:
        log(f"CHECK FAILED: {engine} {query} run {run + 1}: {got['rows']:,} rows, hash {got['hash']}; "
            f"DuckDB: {want['rows']:,} rows, hash {want['hash']}")
    return ok


# --------------------------------------------------------------------------
# 3. Report
# --------------------------------------------------------------------------

def stats(values: list[float]) -> tuple[float, float, float] | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def fmt_med(values: list[float], digits: int = 1) -> str:
    s = stats(values)
    if s is None:
        return "—"
    med, lo, hi = s
    if len(values) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def fmt_rate(rows: int, values: list[float]) -> str:
    s = stats(values)
    if s is None or s[0] <= 0:
        return "—"
    return f"{rows / s[0] / 1000:,.0f} K"


def report(results: dict, meta: dict) -> str:
    rows = meta["input"]["rows"]["bid"]
    out = [f"Nexmark end to end, {meta['events']:,} events: {rows:,} bids "
           f"({meta['input']['bytes'] / 2**20:.0f} MiB of CSV), the same file for every engine; "
           f"{meta['repeat']} run(s) per engine, median (min–max). weir: live path, fresh node, "
           f"view declared first, COPY FROM STDIN, FLUSH, until idle; epochs every 100 ms, fsync on. "
           f"Flink {meta['flink_version']}: streaming, parallelism 1, mini-batch (2 s, 5000), heap "
           f"{meta['flink_heap']}; its CPU-s and wall are the job over the events less the same job over "
           f"an empty file. CPU-s = CPU-seconds of the engine's processes; peak = VmHWM in MiB; "
           f"ratio = weir bids per CPU-s / Flink bids per CPU-s, the median of per-run ratios "
           f"(above 1: weir uses less CPU).",
           "",
           "| query | rows read | weir CPU-s | weir wall s | weir peak | Flink CPU-s | Flink wall s "
           "| Flink peak | Flink+RocksDB+1 s ckpt CPU-s | Flink+ckpt wall s | Flink+ckpt peak "
           "| weir/Flink per CPU-s | weir/Flink+ckpt per CPU-s | output rows | check |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    rates = ["| query | " + " | ".join(f"{e} rows/CPU-s | {e} rows/s" for e in ENGINES) + " |",
             "|---|" + "---:|---:|" * len(ENGINES)]
    for query, runs in results.items():
        if query in Q.WEIR_ONLY:
            continue

        def col(engine, key, scale=1.0):
            return [r[engine][key] * scale if r.get(engine) and r[engine].get(key) is not None else None
                    for r in runs]

        def ratios(mode):
            values = []
            for r in runs:
                w, f = r.get("weir"), r.get(f"flink-{mode}")
                if w and f and w.get("cpu_seconds") and f.get("cpu_seconds"):
                    values.append(f["cpu_seconds"] / w["cpu_seconds"])
            s = stats(values)
            if s is None:
                return "—"
            return f"{s[0]:.2f}×" if len(values) == 1 else f"{s[0]:.2f}× ({s[1]:.2f}–{s[2]:.2f})"

        cells = [query, f"{rows:,}"]
        rate_cells = [query]
        for engine in ENGINES:
            errors = [r[engine]["error"] for r in runs if r.get(engine, {}).get("error")]
            if errors and len(errors) == len(runs):
                cells += [f"fails: {errors[0].splitlines()[0][:90]}", "—", "—"]
                rate_cells += ["—", "—"]
                continue
            cells += [fmt_med(col(engine, "cpu_seconds"), 2), fmt_med(col(engine, "seconds"), 2),
                      fmt_med(col(engine, "peak_kib", 1 / 1024), 0)]
            rate_cells += [fmt_rate(rows, col(engine, "cpu_seconds")), fmt_rate(rows, col(engine, "seconds"))]
        cells += [ratios("nockpt"), ratios("rocksdb")]
        counts = sorted({r[e]["output"]["rows"] for r in runs for e in ENGINES
                         if r.get(e) and r[e].get("output")})
        cells.append(", ".join(f"{c:,}" for c in counts) or "—")
        checks = [r[e].get("check") for r in runs for e in ENGINES if r.get(e) and not r[e].get("error")]
        failing = [e for e in ENGINES if any(r.get(e, {}).get("error") for r in runs)]
        check_cell = ("ok" if checks and all(c == "ok" for c in checks) else
                      ("FAIL" if checks else "—"))
        if failing:
            check_cell += f" ({', '.join(failing)}: did not run)"
        cells.append(check_cell)
        out.append("| " + " | ".join(cells) + " |")
        rates.append("| " + " | ".join(rate_cells) + " |")
    out += ["", "Rates (bid rows per CPU-second and per wall second, of the medians):", ""] + rates
    ckpts = []
    for query, runs in results.items():
        n = [r["flink-rocksdb"]["raw"].get("checkpoints") for r in runs
             if r.get("flink-rocksdb") and r["flink-rocksdb"].get("raw")]
        if n:
            ckpts.append(f"{query} {', '.join(str(x) for x in n)}")
    if ckpts:
        out += ["", "Flink+ckpt, checkpoints completed in each timed run: " + "; ".join(ckpts) + "."]
    out += ["", "weir, where the time goes (medians; times from the start of COPY; ingest = the same "
            "COPY into the table with no view):", "",
            "| query | to end of COPY CPU-s | wall s | to end of FLUSH CPU-s | wall s | to idle CPU-s "
            "| wall s | peak MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for query, runs in results.items():
        w = [r["weir"] for r in runs if r.get("weir") and not r["weir"].get("error")]
        if not w:
            continue

        def med(key, scale=1.0, digits=2):
            return f"{statistics.median(x[key] for x in w) * scale:.{digits}f}"
        out.append(f"| {query} | {med('copy_cpu_seconds')} | {med('copy_seconds')} | {med('flush_cpu_seconds')} "
                   f"| {med('flush_seconds')} | {med('cpu_seconds')} | {med('seconds')} "
                   f"| {med('peak_kib', 1 / 1024, 0)} |")
    return "\n".join(out)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def flink_version(python: str) -> str:
    try:
        out = subprocess.run([python, "-c", "import pyflink.version as v; print(v.__version__)"],
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--queries", default="ingest,q0,q1,q2,q7_tumble,q5,q7",
                    help="of " + ",".join(Q.ALL_QUERIES) + " (ingest: weir's COPY alone, no view)")
    ap.add_argument("--engines", default=",".join(ENGINES), help="of " + ",".join(ENGINES))
    ap.add_argument("--smoke", action="store_true", help="100,000 events, 1 run")
    ap.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    ap.add_argument("--flink-python", default=DEFAULT_FLINK_PYTHON)
    ap.add_argument("--flink-heap", default="2g", help="the JVM's -Xms and -Xmx (default 2g)")
    ap.add_argument("--flink-timeout", type=float, default=3600)
    ap.add_argument("--flink-sink", default="auto", choices=["auto", "csv", "debezium-json"],
                    help="Flink's sink format (auto: CSV, or a Debezium-JSON changelog if the plan updates rows)")
    ap.add_argument("--workdir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "weir-e2e"))
    ap.add_argument("--idle-cpu", type=float, default=0.0,
                    help="CPU-seconds a 200 ms sample may grow by and still count as idle")
    ap.add_argument("--weir-no-watermark", action="store_true",
                    help="no watermark on weir's table, even for windowed queries")
    ap.add_argument("--json", help="write every run to this file")
    ap.add_argument("--keep", action="store_true", help="keep data directories and sink files")
    ap.add_argument("--report", metavar="JSON", help="only print the table of an earlier run's --json file")
    args = ap.parse_args(argv)
    if args.smoke:
        args.events, args.repeat = 100_000, 1
    return args


def main(argv) -> int:
    args = parse_args(argv)
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        saved["meta"].setdefault("load_after", None)
        print(report(saved["results"], saved["meta"]))
        return 0
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for q in queries:
        if q not in Q.COLUMNS:
            raise SystemExit(f"unknown query {q}; known: {', '.join(Q.ALL_QUERIES)}")
    data = os.path.join(args.workdir, f"events-{args.events}")
    scratch = os.path.join(args.workdir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    meta = {"events": args.events, "repeat": args.repeat, "queries": queries, "engines": engines,
            "weir_bin": os.path.realpath(args.weir_bin), "flink_heap": args.flink_heap,
            "flink_version": flink_version(args.flink_python) if any(e.startswith("flink") for e in engines) else "-",
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_before": os.getloadavg()[0], "commit": git_commit()}
    meta["input"] = generate(args, data)
    results: dict[str, list[dict]] = {}
    failed = []
    for query in queries:
        want = expected(data, query)
        results[query] = []
        for run in range(args.repeat):
            entry: dict = {"run": run + 1}
            for engine in engines:
                if query in Q.WEIR_ONLY and engine != "weir":
                    continue
                if engine == "weir":
                    r = run_weir(args, query, data, scratch)
                else:
                    r = run_flink(args, query, engine.split("-", 1)[1], data, scratch)
                entry[engine] = r
                if r.get("error"):
                    log(f"{engine} {query} run {run + 1}: ERROR {r['error'][:1500]}")
                    continue
                if not check(engine, query, run, r, want):
                    failed.append(f"{engine} {query} run {run + 1}")
                log(f"{engine} {query} run {run + 1}: {r['cpu_seconds']:.2f} CPU-s, {r['seconds']:.2f} s, "
                    f"peak {r['peak_kib'] / 1024:.0f} MiB, {r['output']['rows']:,} rows, {r['check']}")
            results[query].append(entry)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"meta": meta, "expected": {q: expected(data, q) for q in results},
                               "results": results}, f, indent=1)
    meta["load_after"] = os.getloadavg()[0]
    meta["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "expected": {q: expected(data, q) for q in results},
                       "results": results}, f, indent=1)
    print(report(results, meta))
    if failed:
        print(f"\nCHECK FAILED: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
