#!/usr/bin/env python3
"""Nexmark on weir, side by side with batch engines (and Apache Flink).

One command:

    python3 benches/nexmark/run.py                   # 10,000,000 events, 3 runs
    python3 benches/nexmark/run.py --smoke           # 200,000 events, 1 run

1. Generate once. A release weir node creates the sources `person`,
   `auction` and `bid` with `connector = 'nexmark'` (the `nexmark` crate,
   base time pinned, so every run and every engine sees the same events);
   the events go into weir's log. That is timed on its own (the generator
   alone). `COPY ... TO STDOUT (FORMAT csv)` then writes them to CSV files,
   which DuckDB turns into Parquet. Nothing of this is inside a timed part.
2. For each query, one after another, never overlapping:
   - weir: a fresh start of the node on the same data directory, then
     `CREATE MATERIALIZED VIEW qN AS ...` from benches/nexmark/qN.sql, which
     returns once the view has read every event; timed with the CPU of the
     weir process (utime + stime from /proc), its peak resident set (VmHWM,
     reset before each run), the view's operator state entries (`GET
     /state`), and a checksum of the view's contents. The view is dropped
     after each run. Before each run the store is compacted
     (`VACUUM`, not timed), so no run pays for the generation's or a
     dropped view's backlog; after `CREATE` returns, the CPU counts on
     until the node is idle, so each run pays for the flushes and
     compactions its own writes leave.
   - DataFusion (the `datafusion` Python package) and DuckDB: the same
     computation as a batch query over the Parquet files, reduced to the
     same checksum inside the engine; wall and process CPU time.
   - Apache Flink (when PyFlink is installed; see --flink-python): the same
     SQL in local mode over the CSV files into a blackhole sink, at
     parallelism 1 and 2 (benches/nexmark/flink_job.py).
   Medians of --repeat runs; every checksum must agree with weir's.

The result is Markdown on stdout (for docs/benchmarks/log.md), progress on
stderr; --json keeps every run, --plot draws throughput per query (SVG).

Requirements: Python 3.9+, `pip install "psycopg[binary]" duckdb datafusion`,
a release build of weir. Flink: `python3 -m venv ~/.cache/weir-tools/flink-venv
&& ~/.cache/weir-tools/flink-venv/bin/pip install apache-flink==2.3.0` (about
1 GB; Java 17).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ingest  # noqa: E402  (benches/ingest.py: /proc helpers, formatting)
import queries as Q  # noqa: E402
from ingest import fmt_int, fmt_mib, proc_status_kib, reset_peak  # noqa: E402
from ingest import tree_cpu_seconds as cpu_seconds  # noqa: E402

psycopg = ingest.psycopg

TARGET_DIR = os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/weir-target-rel")
DEFAULT_WEIR_BIN = os.path.join(TARGET_DIR, "release", "weir")
DEFAULT_FLINK_PYTHON = os.path.expanduser("~/.cache/weir-tools/flink-venv/bin/python")
BASE_TIME = 1_436_918_400_000
TABLES = Q.TABLES
ALL_QUERIES = ["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q7_tumble", "q8"]


def log(msg: str) -> None:
    print(f"[nexmark] {msg}", file=sys.stderr, flush=True)


class Weir(ingest.WeirNode):
    """A weir node over one data directory, restarted between queries."""

    def compact(self) -> None:
        """Compact the whole store (`VACUUM`), so that a run starts with no
        backlog of flushes and compactions from the generation or a dropped
        view that its own writes would set off and pay for."""
        with self.connect() as conn:
            conn.execute("VACUUM")

    def settle(self, timeout: float = 300) -> None:
        """Wait until the node is idle (under 2% of a core for two
        half-second periods in a row)."""
        deadline = time.time() + timeout
        quiet, last = 0, cpu_seconds(self.proc.pid)
        while quiet < 2 and time.time() < deadline:
            time.sleep(0.5)
            now = cpu_seconds(self.proc.pid)
            quiet = quiet + 1 if now - last < 0.01 else 0
            last = now

    def state_entries(self, view: str) -> int | None:
        url = f"http://127.0.0.1:{self.http_port}/state"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(f'weir_view_state_entries{{view="{view}"}}'):
                return int(line.split()[-1])
        return None


# --------------------------------------------------------------------------
# 1. Generate once
# --------------------------------------------------------------------------

def generate(weir: Weir, events: int, splits: int, watermarks: bool) -> dict:
    with weir.connect() as conn:
        cpu0, t0 = cpu_seconds(weir.proc.pid), time.perf_counter()
        for table, kind in TABLES.items():
            columns = f"({Q.weir_columns(table)}) " if watermarks else ""
            conn.execute(
                f"CREATE SOURCE {table} {columns}"
                f"WITH (connector = 'nexmark', nexmark.table.type = '{kind}', "
                f"nexmark.event.num = '{events}', nexmark.base.time = '{BASE_TIME}', "
                f"nexmark.split.num = '{splits}')")
        weir.wait_for_generators(conn, 0.05)
        conn.execute("FLUSH")
        seconds, cpu = time.perf_counter() - t0, cpu_seconds(weir.proc.pid) - cpu0
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    log(f"generated {events:,} events ({rows}) in {seconds:.1f} s, {cpu:.1f} CPU-s")
    return {"seconds": seconds, "cpu_seconds": cpu, "rows": rows}


def export(weir: Weir, workdir: str) -> dict:
    """Every table as CSV (for Flink) and Parquet (for the batch engines)."""
    import duckdb
    files = {}
    with weir.connect() as conn:
        for table in TABLES:
            csv_path = os.path.join(workdir, f"{table}.csv")
            with open(csv_path, "wb") as out, conn.cursor().copy(
                    f"COPY {table} TO STDOUT WITH (FORMAT csv)") as copy:
                for chunk in copy:
                    out.write(chunk)
            files[table] = csv_path
    con = duckdb.connect()
    for table, path in files.items():
        columns = ", ".join(f"'{c}': '{t}'" for c, t in Q.schema(table))
        parquet = os.path.join(workdir, f"{table}.parquet")
        con.execute(f"COPY (SELECT * FROM read_csv('{path}', header = false, columns = {{{columns}}})) "
                    f"TO '{parquet}' (FORMAT parquet)")
    log(f"exported CSV and Parquet to {workdir}")
    return files


# --------------------------------------------------------------------------
# 2. Time each query
# --------------------------------------------------------------------------

def warm(paths: list[str]) -> None:
    """Read files through once, so that every engine's timed run starts with
    its input in the page cache: otherwise an engine that runs right after
    another one used the memory pays for reading the disk, and whoever runs
    first after Flink looks slowest."""
    buffer = bytearray(1 << 20)
    for path in paths:
        files = [path] if os.path.isfile(path) else [
            os.path.join(root, name) for root, _, names in os.walk(path) for name in names]
        for name in files:
            try:
                with open(name, "rb", buffering=0) as f:
                    while f.readinto(buffer):
                        pass
            except OSError:
                pass  # a file RocksDB removed meanwhile


def inputs(query: str, workdir: str, kind: str) -> list[str]:
    return [os.path.join(workdir, f"{table}.{kind}") for table in Q.READS[query]]


def run_weir(weir: Weir, query: str) -> dict:
    pid = weir.proc.pid
    with weir.connect() as conn:
        conn.execute(f"DROP MATERIALIZED VIEW IF EXISTS {query}")
        weir.compact()
        weir.settle()
        warm([weir.data_dir])
        reset_peak(pid)
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        conn.execute(Q.create_view(query))
        seconds = time.perf_counter() - t0
        # The flushes and compactions the view's writes leave behind are
        # part of its cost, though they run after it returns.
        weir.settle()
        cpu = cpu_seconds(pid) - cpu0
        peak = proc_status_kib(pid).get("VmHWM")
        state = weir.state_entries(query)
        check = Q.normalise(conn.execute(Q.checksum_sql(query, query, Q.DataFusion())).fetchone())
        conn.execute(f"DROP MATERIALIZED VIEW {query}")
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_kib": peak, "state_entries": state,
            "checksum": check}


def run_batch(engine: str, query: str, workdir: str) -> dict:
    """One batch run in this process; CPU is the whole process's."""
    reset_peak("self")
    if engine == "duckdb":
        import duckdb
        con = duckdb.connect()
        for table in TABLES:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{workdir}/{table}.parquet')")
        sql = Q.checksum_sql(query, f"({Q.batch_sql(query, Q.DuckDB())})", Q.DuckDB())
        cpu0, t0 = time.process_time(), time.perf_counter()
        row = con.execute(sql).fetchone()
    else:
        import datafusion
        ctx = datafusion.SessionContext()
        for table in TABLES:
            ctx.register_parquet(table, f"{workdir}/{table}.parquet")
        sql = Q.checksum_sql(query, f"({Q.batch_sql(query, Q.DataFusion())})", Q.DataFusion())
        cpu0, t0 = time.process_time(), time.perf_counter()
        batch = ctx.sql(sql).collect()[0]
        row = [batch.column(i)[0].as_py() for i in range(batch.num_columns)]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_kib": proc_status_kib(os.getpid()).get("VmHWM"),
            "checksum": Q.normalise(row)}


def run_engine(args, weir: Weir, engine: str, query: str, workdir: str, run: int) -> dict:
    if engine == "weir":
        return {"weir": run_weir(weir, query)}
    if engine in ("datafusion", "duckdb"):
        warm(inputs(query, workdir, "parquet"))
        return {engine: run_batch(engine, query, workdir)}
    if run >= (args.flink_repeat or args.repeat):
        return {}
    out = {}
    for p in (1, 2):
        warm(inputs(query, workdir, "csv"))
        out[f"flink-p{p}"] = run_flink(args, query, workdir, p, check=(run == 0 and p == 2))
    return out


def run_flink(args, query: str, workdir: str, parallelism: int, check: bool) -> dict | None:
    cmd = [args.flink_python, os.path.join(HERE, "flink_job.py"), "--query", query,
           "--data", workdir, "--parallelism", str(parallelism)]
    if check:
        cmd.append("--checksum")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.flink_timeout)
    if out.returncode != 0:
        log(f"flink {query} p={parallelism} failed: {out.stderr.strip()[-2000:]}")
        return None
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "checksum" in result:
        result["checksum"] = Q.normalise(result["checksum"])
    return result


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r and r.get(key) is not None]
    return statistics.median(values) if values else None


def per_second(events: int, runs: list[dict], key: str) -> float | None:
    m = median(runs, key)
    return events / m if m else None


def report(results: dict, meta: dict) -> str:
    events = meta["events"]
    engines = [e for e in ["weir", "datafusion", "duckdb", "flink-p1", "flink-p2"]
               if any(results[q].get(e) for q in results)]
    out = [f"Nexmark, {events:,} events ({', '.join(f'{v:,} {k}s' for k, v in meta['generate']['rows'].items())}); "
           f"median of {meta['repeat']} runs. Load average before / after: "
           f"{meta['load_before']} / {meta['load_after']}. Queries on sources with Flink's "
           f"watermark: {meta['watermarked']}.", ""]
    out.append("| query | engine | events/s | events per CPU-s | weir per CPU-s vs engine | peak memory (MiB) | rows | output checksum |")
    out.append("|---|---|---:|---:|---:|---:|---:|---|")
    for query, by_engine in results.items():
        weir_cpu = per_second(events, by_engine.get("weir", []), "cpu_seconds")
        for engine in engines:
            runs = by_engine.get(engine) or []
            if not runs:
                continue
            cpu_rate = per_second(events, runs, "cpu_seconds")
            ratio = "—" if engine == "weir" else ingest.fmt_ratio(weir_cpu, cpu_rate)
            check = runs[0].get("checksum") or by_engine.get(engine.split("-")[0] + "-checksum")
            agrees = "" if engine == "weir" else (" ✓" if check == by_engine["weir"][0]["checksum"] else " ✗")
            rows = fmt_int(check[0]) if check else "—"
            digest = f"{hash(tuple(check)) & 0xffffffff:08x}{agrees}" if check else "—"
            peak = median(runs, "peak_kib")
            out.append(f"| {query} | {engine} | {fmt_int(per_second(events, runs, 'seconds'))} | "
                       f"{fmt_int(cpu_rate)} | {ratio} | {fmt_mib(peak)} | {rows} | {digest} |")
    out.append("")
    out.append("weir's operator state entries after each view had read every event:")
    out.append("")
    out.append("| query | state entries |")
    out.append("|---|---:|")
    for query, by_engine in results.items():
        out.append(f"| {query} | {fmt_int(median(by_engine.get('weir', []), 'state_entries'))} |")
    g = meta["generate"]
    out.append("")
    out.append(f"Generating the events into weir's log (three sources, each running the generator over "
               f"the whole stream and keeping its own kind): {g['seconds']:.1f} s, {g['cpu_seconds']:.1f} CPU-s, "
               f"{fmt_int(3 * events / g['cpu_seconds'])} generated events per CPU-second.")
    return "\n".join(out)


def plot(results: dict, events: int, path: str) -> None:
    """Events per CPU-second per query and engine, log scale, as SVG."""
    engines = ["weir", "datafusion", "duckdb", "flink-p1", "flink-p2"]
    colours = {"weir": "#1f77b4", "datafusion": "#ff7f0e", "duckdb": "#2ca02c",
               "flink-p1": "#d62728", "flink-p2": "#9467bd"}
    engines = [e for e in engines if any(results[q].get(e) for q in results)]
    import math
    rates = {(q, e): per_second(events, results[q].get(e) or [], "cpu_seconds")
             for q in results for e in engines}
    top = max((r for r in rates.values() if r), default=1)
    lo, hi = 3, math.ceil(math.log10(top))
    width, height, left, bottom = 120 + 90 * len(results), 360, 70, 40
    plot_h = height - bottom - 20
    bar = 70 / max(1, len(engines))

    def y(rate):
        return 20 + plot_h * (1 - (math.log10(max(rate, 10 ** lo)) - lo) / (hi - lo))

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
           f'font-family="sans-serif" font-size="11">']
    for p in range(lo, hi + 1):
        svg.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(10 ** p)}" y2="{y(10 ** p)}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 5}" y="{y(10 ** p) + 4}" text-anchor="end">1e{p}</text>')
    for i, query in enumerate(results):
        x0 = left + 10 + 90 * i
        for j, engine in enumerate(engines):
            rate = rates[(query, engine)]
            if rate:
                svg.append(f'<rect x="{x0 + j * bar}" y="{y(rate)}" width="{bar - 1}" '
                           f'height="{20 + plot_h - y(rate)}" fill="{colours[engine]}"/>')
        svg.append(f'<text x="{x0 + 35}" y="{height - bottom + 15}" text-anchor="middle">{query}</text>')
    svg.append(f'<text x="12" y="{20 + plot_h / 2}" transform="rotate(-90 12 {20 + plot_h / 2})" '
               f'text-anchor="middle">events per CPU-second</text>')
    for j, engine in enumerate(engines):
        svg.append(f'<rect x="{left + 110 * j}" y="{height + 5}" width="10" height="10" fill="{colours[engine]}"/>')
        svg.append(f'<text x="{left + 110 * j + 14}" y="{height + 14}">{engine}</text>')
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg))


# --------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--smoke", action="store_true", help="200,000 events, one run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--queries", default=",".join(ALL_QUERIES))
    ap.add_argument("--engines", default="weir,datafusion,duckdb,flink")
    ap.add_argument("--splits", type=int, default=2, help="generator splits (parallel generation)")
    ap.add_argument("--watermarks", default=",".join(Q.WATERMARKED),
                    help="queries that weir runs on sources declaring Flink's watermark "
                         "(date_time - 4 s), from a second copy of the events; 'none' for none. "
                         "With it windows close; q4 and q7 become interval joins")
    ap.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    ap.add_argument("--flink-python", default=DEFAULT_FLINK_PYTHON)
    ap.add_argument("--flink-timeout", type=float, default=3600)
    ap.add_argument("--flink-repeat", type=int, default=None,
                    help="runs of Flink per query (default --repeat); it is the slowest engine")
    ap.add_argument("--workdir", default=None, help="kept when given; a temporary one otherwise")
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", default=None, help="write an SVG of events per CPU-second")
    args = ap.parse_args()
    if args.smoke:
        args.events, args.repeat = 200_000, 1
    wanted = args.queries.split(",")
    engines = args.engines.split(",")
    if "flink" in engines and not os.path.exists(args.flink_python):
        log(f"no PyFlink at {args.flink_python}: Flink is left out")
        engines.remove("flink")
    workdir = args.workdir or tempfile.mkdtemp(prefix="weir-nexmark-")
    os.makedirs(workdir, exist_ok=True)
    watermarked = {q for q in args.watermarks.split(",") if q in wanted}
    nodes = {False: Weir(args.weir_bin, os.path.join(workdir, "weir-data"), os.path.join(workdir, "weir.log"))}
    if watermarked:
        nodes[True] = Weir(args.weir_bin, os.path.join(workdir, "weir-data-wm"),
                           os.path.join(workdir, "weir.log"))
    for node in nodes.values():
        shutil.rmtree(node.data_dir, ignore_errors=True)
    weir = nodes[False]
    meta = {"events": args.events, "repeat": args.repeat, "load_before": os.getloadavg()[:3],
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "weir_bin": args.weir_bin}
    meta["watermarked"] = ", ".join(sorted(watermarked)) or "none"
    try:
        for with_watermarks, node in nodes.items():
            node.start()
            generated = generate(node, args.events, args.splits, with_watermarks)
            meta.setdefault("generate", generated)
            if not with_watermarks:
                export(node, workdir)
            node.stop()
        results: dict = {}
        for query in wanted:
            results[query] = run_query(args, nodes[query in watermarked], query, engines, workdir)
    finally:
        for node in nodes.values():
            node.stop()
    meta["load_after"] = os.getloadavg()[:3]
    meta["load_before"] = " ".join(f"{x:.2f}" for x in meta["load_before"])
    meta["load_after"] = " ".join(f"{x:.2f}" for x in meta["load_after"])
    print(report(results, meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    if args.plot:
        plot(results, args.events, args.plot)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


def run_query(args, weir: Weir, query: str, engines: list[str], workdir: str) -> dict:
    """All engines on one query, run after run alternating, never overlapping."""
    out: dict = {}
    weir.start()
    try:
        for run in range(args.repeat):
            for engine in engines:
                for key, result in run_engine(args, weir, engine, query, workdir, run).items():
                    if result is None:
                        continue
                    if key.startswith("flink") and "checksum" in result:
                        out["flink-checksum"] = result["checksum"]
                    out.setdefault(key, []).append(result)
                    log(f"{query} run {run + 1} {key}: {result['seconds']:.2f} s, "
                        f"{result['cpu_seconds']:.2f} CPU-s, checksum {result.get('checksum')}")
    finally:
        weir.stop()
    mismatched = [e for e in engines if e in ("datafusion", "duckdb")
                  and out[e][0]["checksum"] != out["weir"][0]["checksum"]]
    if mismatched:
        log(f"{query}: {', '.join(mismatched)} disagree with weir")
    return out


if __name__ == "__main__":
    main()
