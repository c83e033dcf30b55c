#!/usr/bin/env python3
"""Sustained rate: Nexmark bids arrive at a fixed rate into a live query,
step by step at higher rates; how fresh the results stay (write to
visible), and the highest rate each engine holds without falling behind.

    python3 benches/e2e/sustained.py --rates 50000,100000,200000 --seconds 30 \
        --engines weir,flink --weir-bin ~/.cache/weir-target-rel/release/weir

The input is the bids CSV of benches/e2e/run.py (--events, cached in
--workdir), cycled. Every row gets one more column, `written_at`: the
wall-clock time in microseconds at which the producer hands the row to
the engine. The query is Nexmark q1 (`0.908 * price`) with `written_at`
passed through, over the bids of one auction in --sample (`auction %
7 = 0` by default: Nexmark's hot auctions are multiples of 100, so a
modulus prime to 100 keeps a fair seventh), so every output row says when its input was
written, and freshness is the time it became visible less that. Every
row is read and computed; only a sample comes out, so that reading the
output in this Python process does not hold either engine back (Flink's
print sink blocks its job when the pipe fills). Each rate runs for
--seconds on a fresh engine; the producer sends a batch every --tick
seconds (rate x tick rows) on a fixed schedule, and never waits for the
engine beyond what sending takes.

weir: a fresh node with its defaults (epochs every 100 ms, fsync on), an
`APPEND ONLY` table and the view `fresh` declared first. The producer
sends each batch as one `COPY bid FROM STDIN` (a batch commits as one
write, as a client of any PostgreSQL server would send it); a second
connection runs `COPY (SUBSCRIBE fresh WITH (snapshot = false)) TO STDOUT`
and takes a row's visibility as the moment its change reaches the client.

Flink 2.3 (PyFlink mini-cluster, parallelism 1, streaming, mini-batch
off so as not to add its 2 s of latency; engine `flink`: hash-map state,
no checkpoints; `flink-ckpt`: RocksDB state and exactly-once checkpoints
every second, as weir's results are durable and exactly once): the
producer writes each batch as a new file, renamed into a directory that a
filesystem source watches every 100 ms (`source.monitor-interval`); the
job adds `CURRENT_TIMESTAMP` (evaluated per row as it is processed) and
prints to stdout, which the harness reads. Visibility is that processing
time: it leaves out the print sink's own delay, which favours Flink.

Freshness percentiles are over the rows of the step's last two thirds
(the first third lets a fresh engine warm up). A rate is held when the
producer kept its schedule (sent at least 98% of the rate: a weir COPY
returns once committed, so a node that cannot take the rate slows its
producer) and the p99 stayed within --max-p99-ms (1 s). CPU-seconds are
the engine's processes' over the whole step.

Requirements as for benches/e2e/run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ingest  # noqa: E402
import run as e2e  # noqa: E402
from ingest import tree_cpu_seconds as cpu_seconds  # noqa: E402

FLINK_PROGRAM = r'''
import sys
from pyflink.common import Configuration
from pyflink.table import EnvironmentSettings, TableEnvironment
directory = sys.argv[1]
sample = int(sys.argv[2])
checkpoints = sys.argv[3]
conf = Configuration()
conf.set_string("parallelism.default", "1")
if checkpoints:
    conf.set_string("state.backend.type", "rocksdb")
    conf.set_string("execution.checkpointing.incremental", "true")
    conf.set_string("execution.checkpointing.interval", "1 s")
    conf.set_string("execution.checkpointing.mode", "EXACTLY_ONCE")
    conf.set_string("execution.checkpointing.dir", "file://" + checkpoints)
else:
    conf.set_string("state.backend.type", "hashmap")
settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
t = TableEnvironment.create(settings)
t.execute_sql(f"""CREATE TEMPORARY TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT,
  channel STRING, url STRING, date_time TIMESTAMP(3), extra STRING, written_at BIGINT)
  WITH ('connector' = 'filesystem', 'path' = '{directory}', 'format' = 'csv',
        'source.monitor-interval' = '100 ms')""")
t.execute_sql("""CREATE TEMPORARY TABLE fresh (auction BIGINT, price DECIMAL(23, 3),
  written_at BIGINT, seen STRING) WITH ('connector' = 'print')""")
print("READY", flush=True)
t.execute_sql(f"""INSERT INTO fresh SELECT auction, 0.908 * price, written_at,
  DATE_FORMAT(CURRENT_TIMESTAMP, 'yyyy-MM-dd HH:mm:ss.SSS') FROM bid
  WHERE MOD(auction, {sample}) = 0""").wait()
'''


def log(msg: str) -> None:
    print(f"[sustained {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now_us() -> int:
    return time.time_ns() // 1000


def load_rows(path: str, limit: int) -> list[bytes]:
    rows = []
    with open(path, "rb") as f:
        for line in f:
            rows.append(line.rstrip(b"\n"))
            if len(rows) >= limit:
                break
    return rows


class Producer:
    """Sends rate x tick rows every tick, each stamped with the time it
    leaves, on a fixed schedule; records how many it sent."""

    def __init__(self, rows: list[bytes], rate: int, tick: float, seconds: float, send):
        self.rows, self.rate, self.tick, self.seconds, self.send = rows, rate, tick, seconds, send
        self.sent = 0
        self.elapsed = 0.0

    def run(self) -> None:
        per_tick = max(1, int(self.rate * self.tick))
        ticks = int(self.seconds / self.tick)
        at = 0
        start = time.perf_counter()
        for k in range(ticks):
            due = start + k * self.tick
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            stamp = b",%d\n" % now_us()
            batch = []
            for _ in range(per_tick):
                batch.append(self.rows[at])
                at = (at + 1) % len(self.rows)
            self.send(stamp.join(batch) + stamp)
            self.sent += per_tick
        self.elapsed = time.perf_counter() - start


def freshness(samples: list[tuple[float, float]], start: float, seconds: float) -> dict:
    """Percentiles (ms) of (time seen, delay ms) samples by thirds of the step."""
    def part(lo: float, hi: float) -> list[float]:
        return sorted(d for t, d in samples if start + lo * seconds <= t < start + hi * seconds)

    def pct(values: list[float], p: float) -> float | None:
        if not values:
            return None
        return values[min(len(values) - 1, int(p * len(values)))]

    middle, last, measured = part(1 / 3, 2 / 3), part(2 / 3, 1.5), part(1 / 3, 1.5)
    return {
        "rows_seen": len(samples),
        "p50_ms": pct(measured, 0.50), "p99_ms": pct(measured, 0.99), "max_ms": pct(measured, 1.0),
        "p99_middle_ms": pct(middle, 0.99), "p99_last_ms": pct(last, 0.99),
    }


def held(result: dict, rate: int, max_p99_ms: float) -> bool:
    """The producer kept its schedule, and the rows stayed fresh."""
    achieved = result["sent"] / result["send_seconds"] if result["send_seconds"] else 0
    p99 = result["p99_ms"]
    return achieved >= 0.98 * rate and p99 is not None and p99 <= max_p99_ms


# --------------------------------------------------------------------------
# weir
# --------------------------------------------------------------------------

def run_weir(args, rows: list[bytes], rate: int, scratch: str) -> dict:
    data_dir = os.path.join(scratch, f"weir-{rate}")
    shutil.rmtree(data_dir, ignore_errors=True)
    node = e2e.Weir(args.weir_bin, data_dir, os.path.join(scratch, f"weir-{rate}.log"))
    node.start()
    samples: list[tuple[float, float]] = []
    try:
        pid = node.proc.pid
        with node.connect() as conn:
            cols = ", ".join(f"{c} {t}" for c, t in e2e.Q.BID_COLUMNS)
            conn.execute(f"CREATE TABLE bid ({cols}, written_at BIGINT) APPEND ONLY")
            conn.execute("CREATE MATERIALIZED VIEW fresh AS SELECT auction, bidder, "
                         "0.908 * price AS price, date_time, written_at FROM bid "
                         f"WHERE auction % {args.sample} = 0")
        stop = threading.Event()
        ready = threading.Event()
        watcher = threading.Thread(target=watch_weir, args=(node, samples, stop, ready), daemon=True)
        watcher.start()
        ready.wait(10)
        with node.connect() as conn:
            def send(batch: bytes) -> None:
                with conn.cursor().copy("COPY bid FROM STDIN (FORMAT csv)") as copy:
                    copy.write(batch)
            producer = Producer(rows, rate, args.tick, args.seconds, send)
            cpu0, t0 = cpu_seconds(pid), time.time()
            producer.run()
            time.sleep(args.drain)
            cpu = cpu_seconds(pid) - cpu0
        with node.connect() as conn:
            conn.execute("FLUSH")
            total = conn.execute("SELECT count(*) FROM fresh").fetchone()[0]
            wanted = conn.execute("SELECT count(*) FILTER (WHERE auction % "
                                  f"{args.sample} = 0), count(*) FROM bid").fetchone()
        deadline = time.time() + 120
        while len(samples) < total and time.time() < deadline:
            time.sleep(0.2)
        stop.set()
        result = {"sent": producer.sent, "send_seconds": producer.elapsed, "cpu_seconds": cpu,
                  "rows_in_view": total, **freshness(list(samples), t0, args.seconds)}
        if wanted[1] != producer.sent or total != wanted[0]:
            result["error"] = (f"the table holds {wanted[1]:,} rows of {producer.sent:,} sent, "
                               f"the view {total:,} of {wanted[0]:,}")
        return result
    finally:
        node.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def watch_weir(node, samples: list, stop: threading.Event, ready: threading.Event) -> None:
    """The view's changes as they reach a subscriber: (time seen, delay ms)
    of each row; the last column of a change row is `written_at`. Runs
    until the node stops."""
    try:
        with node.connect() as conn, \
                conn.cursor().copy("COPY (SUBSCRIBE fresh WITH (snapshot = false)) TO STDOUT") as copy:
            ready.set()
            pending = b""
            for chunk in copy:
                seen = time.time()
                pending += bytes(chunk)
                *lines, pending = pending.split(b"\n")
                if stop.is_set():
                    continue
                for line in lines:
                    written = line.rsplit(b"\t", 1)[-1]
                    if written.isdigit():
                        samples.append((seen, (seen * 1e6 - int(written)) / 1000))
    except Exception:  # the node stopping ends the stream
        ready.set()


# --------------------------------------------------------------------------
# Flink
# --------------------------------------------------------------------------

def run_flink(args, rows: list[bytes], rate: int, scratch: str, engine: str) -> dict:
    directory = os.path.join(scratch, f"flink-in-{rate}")
    staging = os.path.join(scratch, f"flink-staging-{rate}")
    for d in (directory, staging):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    program = os.path.join(scratch, "flink_sustained.py")
    with open(program, "w") as f:
        f.write(FLINK_PROGRAM)
    env = dict(os.environ, JVM_ARGS=f"-Xms{args.flink_heap} -Xmx{args.flink_heap}")
    checkpoints = os.path.join(scratch, f"flink-checkpoints-{rate}") if engine == "flink-ckpt" else ""
    if checkpoints:
        shutil.rmtree(checkpoints, ignore_errors=True)
    proc = subprocess.Popen([args.flink_python, program, directory, str(args.sample), checkpoints],
                            stdout=subprocess.PIPE,
                            stderr=open(os.path.join(scratch, f"flink-{rate}.log"), "w"), env=env)
    lines: queue.Queue = queue.Queue()
    samples: list[tuple[float, float]] = []

    def reader() -> None:
        for line in proc.stdout:
            lines.put((time.time(), line))

    threading.Thread(target=reader, daemon=True).start()
    try:
        wait_line(lines, b"READY", 120)
        time.sleep(args.flink_warmup)  # the job starts after execute_sql returns
        seq = [0]

        def send(batch: bytes) -> None:
            seq[0] += 1
            name = f"part-{seq[0]:08d}.csv"
            with open(os.path.join(staging, name), "wb") as f:
                f.write(batch)
            os.rename(os.path.join(staging, name), os.path.join(directory, name))

        producer = Producer(rows, rate, args.tick, args.seconds, send)
        cpu0, t0 = cpu_seconds(proc.pid), time.time()
        producer.run()
        time.sleep(args.drain)
        cpu = cpu_seconds(proc.pid) - cpu0
        while not lines.empty():
            _, line = lines.get()
            parsed = flink_sample(line)
            if parsed:
                samples.append(parsed)
        return {"sent": producer.sent, "send_seconds": producer.elapsed, "cpu_seconds": cpu,
                **freshness(samples, t0, args.seconds)}
    finally:
        for pid in ingest.descendants(proc.pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        proc.kill()
        proc.wait()


def wait_line(lines: queue.Queue, marker: bytes, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            _, line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if marker in line:
            return
    raise SystemExit("Flink did not start")


def flink_sample(line: bytes) -> tuple[float, float] | None:
    """`+I[auction, price, written_at, 2026-12-06 10:00:00.123]`: (seen, delay ms)."""
    text = line.decode(errors="replace").strip()
    if not text.startswith("+I[") or not text.endswith("]"):
        return None
    parts = [p.strip() for p in text[3:-1].split(",")]
    try:
        written = int(parts[2])
        seen = time.mktime(time.strptime(parts[3][:19], "%Y-%m-%d %H:%M:%S")) + float("0" + parts[3][19:])
    except (ValueError, IndexError):
        return None
    return seen, (seen * 1e6 - written) / 1000


# --------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="50000,100000,200000")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--tick", type=float, default=0.1)
    ap.add_argument("--sample", type=int, default=7, help="output the bids of auction %% N = 0")
    ap.add_argument("--drain", type=float, default=3.0, help="seconds after the last batch")
    ap.add_argument("--engines", default="weir,flink,flink-ckpt")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rows", type=int, default=1_000_000, help="distinct input rows, cycled")
    ap.add_argument("--workdir", default="/tmp/weir-e2e")
    ap.add_argument("--weir-bin", default=e2e.DEFAULT_WEIR_BIN)
    ap.add_argument("--flink-python", default=e2e.DEFAULT_FLINK_PYTHON)
    ap.add_argument("--flink-heap", default="2g")
    ap.add_argument("--flink-warmup", type=float, default=5.0)
    ap.add_argument("--max-p99-ms", type=float, default=1000,
                    help="freshest p99 a held rate may have")
    ap.add_argument("--json")
    ap.add_argument("--report", help="print the table of a run saved with --json, held judged again")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        results = saved["results"]
        for r in results:
            r["held"] = held(r, r["rate"], args.max_p99_ms)
        print_table(results, argparse.Namespace(**{**saved["args"], "max_p99_ms": args.max_p99_ms}))
        return
    data = os.path.join(args.workdir, f"events-{args.events}")
    e2e.generate(args, data)
    rows = load_rows(os.path.join(data, "bid.csv"), args.rows)
    scratch = os.path.join(args.workdir, "sustained")
    os.makedirs(scratch, exist_ok=True)
    results = []
    for rate in [int(r) for r in args.rates.split(",")]:
        for engine in args.engines.split(","):
            log(f"{engine} at {rate:,} rows/s for {args.seconds:.0f} s")
            if engine == "weir":
                result = run_weir(args, rows, rate, scratch)
            else:
                result = run_flink(args, rows, rate, scratch, engine)
            result.update(engine=engine, rate=rate, seconds=args.seconds,
                          held=held(result, rate, args.max_p99_ms))
            log(json.dumps(result))
            results.append(result)
    print_table(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    if any("error" in r for r in results):
        sys.exit(1)


def print_table(results: list[dict], args) -> None:
    def ms(v):
        return "" if v is None else f"{v:,.0f}"
    print(f"{args.seconds:.0f} s per rate, a batch every {args.tick * 1000:.0f} ms, "
          f"held: at least 98% of the rate sent and p99 within {args.max_p99_ms:.0f} ms\n")
    print("| engine | rate (rows/s) | sent (rows/s) | held | p50 ms | p99 ms | max ms | p99 middle / last third | CPU-s | CPU-µs per row |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        per_row = r["cpu_seconds"] / r["sent"] * 1e6 if r["sent"] else 0
        achieved = r["sent"] / r["send_seconds"] if r["send_seconds"] else 0
        print(f"| {r['engine']} | {r['rate']:,} | {achieved:,.0f} | {'yes' if r['held'] else 'no'} "
              f"| {ms(r['p50_ms'])} | {ms(r['p99_ms'])} | {ms(r['max_ms'])} "
              f"| {ms(r['p99_middle_ms'])} / {ms(r['p99_last_ms'])} | {r['cpu_seconds']:.1f} | {per_row:.2f} |")
    for engine in sorted({r["engine"] for r in results}):
        kept = [r["rate"] for r in results if r["engine"] == engine and r["held"]]
        print(f"\n{engine}: highest rate held {max(kept):,} rows/s" if kept else f"\n{engine}: no rate held")


if __name__ == "__main__":
    main()
