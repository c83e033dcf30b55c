"""One timed Nexmark query on Apache Flink (PyFlink local mini-cluster), run
by benches/e2e/run.py with the Python that has PyFlink, in a fresh process
(and so a fresh JVM) per run.

Streaming mode, configured as nexmark-flink configures it: mini-batch on
(allow-latency 2 s, size 5000), the JVM heap set explicitly (JVM_ARGS, set
by run.py), event-time watermark `date_time - 4 s` on the source for the
windowed queries. The source is the run's CSV file (filesystem connector);
the sink a filesystem sink in --out: CSV when the query's output is
insert-only, Debezium JSON (a changelog, which run.py applies) when the
plan updates rows. Two state modes:

  nockpt   hash-map state, no checkpoints;
  rocksdb  RocksDB state (incremental), exactly-once checkpoints every
           second to a local directory.

First the same job runs twice over an empty CSV file (the first warms the
JVM, the second measures what starting a job costs), then the job over the
events. Prints
one JSON line: wall seconds and CPU-seconds (this process and the JVM, from
/proc) of both jobs, and the JVM's peak resident set (VmHWM, reset before
the timed job).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import ingest  # noqa: E402  (benches/ingest.py: /proc helpers)
import queries as Q  # noqa: E402

FLINK_TYPES = {"BIGINT": "BIGINT", "VARCHAR": "STRING", "TIMESTAMP": "TIMESTAMP(3)"}
SINK_TYPES = {"i": "BIGINT", "d": "DECIMAL(23, 3)", "s": "STRING", "t": "TIMESTAMP(3)", "a": "BIGINT"}


def environment(mode: str, parallelism: int, scratch: str):
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment
    conf = Configuration()
    settings = {
        "parallelism.default": str(parallelism),
        "table.exec.resource.default-parallelism": str(parallelism),
        "table.exec.mini-batch.enabled": "true",
        "table.exec.mini-batch.allow-latency": "2 s",
        "table.exec.mini-batch.size": "5000",
    }
    if mode == "rocksdb":
        ckpt = "file://" + os.path.join(scratch, "checkpoints")
        settings.update({
            "state.backend.type": "rocksdb",
            "execution.checkpointing.incremental": "true",
            "execution.checkpointing.interval": "1 s",
            "execution.checkpointing.mode": "EXACTLY_ONCE",
            "execution.checkpointing.dir": ckpt,
            "state.checkpoints.dir": ckpt,
        })
    elif mode == "nockpt":
        settings["state.backend.type"] = "hashmap"
    else:
        raise SystemExit(f"unknown mode {mode}")
    for key, value in settings.items():
        conf.set_string(key, value)
    env_settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()
    t_env = TableEnvironment.create(env_settings)
    for key, value in settings.items():
        t_env.get_config().set(key, value)
    return t_env


def job(query: str, csv_path: str, out: str, sink_format: str, mode: str, parallelism: int,
        scratch: str) -> dict:
    t_env = environment(mode, parallelism, scratch)
    columns = [f"`{c}` {FLINK_TYPES[t]}" for c, t in Q.BID_COLUMNS]
    if query in Q.WINDOWED:
        columns.append(Q.WATERMARK)
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE bid ({', '.join(columns)}) WITH ("
        f"'connector' = 'filesystem', 'path' = '{csv_path}', 'format' = 'csv')")
    sink = ", ".join(f"`{c}` {SINK_TYPES[k]}" for c, k in Q.COLUMNS[query])
    fmt = "'format' = 'csv'" if sink_format == "csv" else (
        "'format' = 'debezium-json', 'debezium-json.timestamp-format.standard' = 'SQL'")
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE sink ({sink}) WITH ("
        f"'connector' = 'filesystem', 'path' = '{out}', {fmt})")
    me = os.getpid()
    for pid in ingest.descendants(me):
        ingest.reset_peak(pid)
    cpu0, t0 = ingest.tree_cpu_seconds(me), time.perf_counter()
    result = t_env.execute_sql(f"INSERT INTO sink {Q.flink_sql(query)}")
    result.wait()
    seconds, cpu = time.perf_counter() - t0, ingest.tree_cpu_seconds(me) - cpu0
    peak = sum(ingest.proc_status_kib(pid).get("VmHWM", 0) for pid in ingest.descendants(me))
    job_id = str(result.get_job_client().get_job_id())
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_kib": peak, "job_id": job_id,
            "checkpoints": completed_checkpoints(job_id) if mode == "rocksdb" else 0}


def completed_checkpoints(job_id: str) -> int | None:
    """How many checkpoints of the job completed, from the local cluster's
    log (pyflink/log), which says `Completed checkpoint N for job ID`."""
    try:
        import pyflink
    except ImportError:
        return None
    log_dir = os.path.join(os.path.dirname(os.path.abspath(pyflink.__file__)), "log")
    count = 0
    try:
        names = os.listdir(log_dir)
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(log_dir, name), errors="replace") as f:
                for line in f:
                    if "Completed checkpoint" in line and job_id in line:
                        count += 1
        except OSError:
            pass
    return count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--query", required=True)
    ap.add_argument("--csv", required=True, help="the bid CSV file")
    ap.add_argument("--empty", required=True, help="an empty CSV file, for the warm-up job")
    ap.add_argument("--out", required=True, help="an empty directory for the sink's files")
    ap.add_argument("--mode", required=True, choices=["nockpt", "rocksdb"])
    ap.add_argument("--sink-format", required=True, choices=["csv", "debezium-json"])
    ap.add_argument("--parallelism", type=int, default=1)
    args = ap.parse_args()
    def empty(name: str) -> dict:
        return job(args.query, args.empty, os.path.join(args.out, name), args.sink_format, args.mode,
                   args.parallelism, os.path.join(args.out, f"scratch-{name}"))
    first = empty("first")
    startup = empty("startup")
    timed_out = os.path.join(args.out, "sink")
    timed = job(args.query, args.csv, timed_out, args.sink_format, args.mode, args.parallelism,
                os.path.join(args.out, "scratch"))
    print(json.dumps({"first": first, "startup": startup, "timed": timed, "sink": timed_out}))

if __name__ == "__main__":
    main()
