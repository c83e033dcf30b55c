"""One Nexmark query on Apache Flink in local mode (run by benches/nexmark/run.py
with the Python that has PyFlink): the CSV files of the run as sources, a
blackhole sink, streaming mode with event-time windows (watermark
date_time - 4 s). Prints one JSON line: wall seconds and CPU-seconds of the
job (the JVM's CPU while it runs), its peak resident set, and with
--checksum the output's checksum computed by Flink in batch mode.
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
import ingest  # noqa: E402
import queries as Q  # noqa: E402

FLINK_TYPES = {"BIGINT": "BIGINT", "VARCHAR": "STRING", "TIMESTAMP": "TIMESTAMP(3)"}
SINK_TYPES = {"i": "BIGINT", "s": "STRING", "t": "TIMESTAMP(3)"}


class Flink(Q.Dialect):
    name = "flink"

    def millis_of_hour(self, column: str) -> str:
        return (f"(CAST(EXTRACT(MINUTE FROM {column}) AS BIGINT) * 60000"
                f" + CAST(EXTRACT(SECOND FROM {column}) AS BIGINT) * 1000"
                f" + CAST(EXTRACT(MILLISECOND FROM {column}) AS BIGINT) % 1000)")

    def length(self, column: str) -> str:
        return f"CHAR_LENGTH({column})"


def flink_sql(query: str) -> str:
    """The query in Flink's dialect: window table functions for windows."""
    def tumble(table: str) -> str:
        return f"TABLE(TUMBLE(TABLE {table}, DESCRIPTOR(date_time), INTERVAL '10' SECOND))"
    if query == "q0":
        return "SELECT auction, bidder, price, date_time FROM bid"
    if query == "q1":
        return "SELECT auction, bidder, price * 908 / 1000 AS price, date_time FROM bid"
    if query == "q2":
        return "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"
    if query in ("q3", "q4"):
        return Q.view_query(query)
    if query == "q5":
        return """SELECT auction, window_start, window_end, count(*) AS bids
FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end"""
    if query == "q7":
        return f"""SELECT b.auction, b.price, b.bidder, b.date_time
FROM bid AS b
JOIN (SELECT window_end, max(price) AS maxprice FROM {tumble('bid')} GROUP BY window_start, window_end) AS m
ON b.price = m.maxprice
WHERE b.date_time >= m.window_end - INTERVAL '10' SECOND AND b.date_time < m.window_end"""
    if query == "q7_tumble":
        return f"""SELECT window_end, max(price) AS maxprice FROM {tumble('bid')}
GROUP BY window_start, window_end"""
    if query == "q8":
        return f"""SELECT p.id, p.name, p.window_start, a.auctions
FROM (SELECT id, name, window_start, window_end FROM {tumble('person')}
      GROUP BY id, name, window_start, window_end) AS p
JOIN (SELECT seller, window_start, window_end, count(*) AS auctions FROM {tumble('auction')}
      GROUP BY seller, window_start, window_end) AS a
ON p.id = a.seller AND p.window_start = a.window_start AND p.window_end = a.window_end"""
    raise KeyError(query)


def create_sources(t_env, data: str, watermark: bool) -> None:
    for table in Q.TABLES:
        columns = [f"`{c}` {FLINK_TYPES[t]}" for c, t in Q.schema(table)]
        if watermark:
            columns.append(Q.WATERMARK)
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE {table} ({', '.join(columns)}) WITH ("
            f"'connector' = 'filesystem', 'path' = '{data}/{table}.csv', 'format' = 'csv')")


def environment(parallelism: int, batch: bool):
    from pyflink.table import EnvironmentSettings, TableEnvironment
    settings = EnvironmentSettings.in_batch_mode() if batch else EnvironmentSettings.in_streaming_mode()
    t_env = TableEnvironment.create(settings)
    t_env.get_config().set("parallelism.default", str(parallelism))
    t_env.get_config().set("table.exec.resource.default-parallelism", str(parallelism))
    return t_env


def timed(query: str, data: str, parallelism: int) -> dict:
    """The job over the events, less the same job over no events: a local
    job pays seconds to start its cluster, which is not stream processing.
    A first job over no events warms the JVM for both."""
    empty = os.path.join(data, "empty")
    os.makedirs(empty, exist_ok=True)
    for table in Q.TABLES:
        open(os.path.join(empty, f"{table}.csv"), "w").close()
    job(query, empty, parallelism)
    idle = job(query, empty, parallelism)
    full = job(query, data, parallelism)
    return {"seconds": full["seconds"] - idle["seconds"],
            "cpu_seconds": full["cpu_seconds"] - idle["cpu_seconds"],
            "peak_kib": full["peak_kib"], "startup_seconds": idle["seconds"],
            "startup_cpu_seconds": idle["cpu_seconds"]}


def job(query: str, data: str, parallelism: int) -> dict:
    t_env = environment(parallelism, batch=False)
    create_sources(t_env, data, watermark=query in ("q5", "q7", "q7_tumble", "q8"))
    sink = ", ".join(f"`{c}` {SINK_TYPES[k]}" for c, k in Q.COLUMNS[query])
    t_env.execute_sql(f"CREATE TEMPORARY TABLE IF NOT EXISTS sink ({sink}) WITH ('connector' = 'blackhole')")
    me = os.getpid()
    for pid in ingest.descendants(me):
        ingest.reset_peak(pid)
    cpu0, t0 = ingest.tree_cpu_seconds(me), time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink {flink_sql(query)}").wait()
    seconds, cpu = time.perf_counter() - t0, ingest.tree_cpu_seconds(me) - cpu0
    peak = sum(ingest.proc_status_kib(pid).get("VmHWM", 0) for pid in ingest.descendants(me))
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_kib": peak}


def checksum(query: str, data: str, parallelism: int) -> list:
    t_env = environment(parallelism, batch=True)
    create_sources(t_env, data, watermark=query in ("q5", "q7", "q7_tumble", "q8"))
    sql = Q.checksum_sql(query, f"({flink_sql(query)})", Flink())
    with t_env.execute_sql(sql).collect() as rows:
        row = next(iter(rows))
    return [row[i] for i in range(len(row))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--query", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--checksum", action="store_true")
    args = ap.parse_args()
    result = timed(args.query, args.data, args.parallelism)
    if args.checksum:
        result["checksum"] = checksum(args.query, args.data, args.parallelism)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
