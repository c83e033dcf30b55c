#!/usr/bin/env python3
"""Kafka pipeline benchmark: JSON source -> q7-like windowed view -> Kafka sink,
end to end, beside the same pipeline fed from weir's embedded log; and how
fast a source catches up on its backlog after a SIGKILL.

The events are produced once, before anything is timed, into a topic of
--partitions partitions (confluent-kafka, idempotent producer):

    {"auction": i % 1000, "bidder": i % 5000, "price": (i * 7919) % 10000,
     "date_time": base + i milliseconds}

  kafka     CREATE SOURCE bids (...) WITH (connector = 'kafka', ...)
            FORMAT PLAIN ENCODE JSON, the view, and a PLAIN JSON sink; timed
            from CREATE SOURCE until the sink's topic holds every closed
            window.
  embedded  the same view and sink over an APPEND ONLY table that COPY
            loads with the same events (CSV); timed from the COPY until the
            sink's topic holds every closed window.
  recovery  the kafka pipeline caught up, weir killed with SIGKILL, --backlog
            more events produced, weir restarted: timed from the restart
            until the source holds every event (consumer lag drained).

The view (one row per 10-second window, final rows only):

    SELECT window_start, window_end, max(price) AS max_price, count(*) AS bids
    FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
    GROUP BY window_start, window_end EMIT ON WINDOW CLOSE

Each phase runs --repeat times (medians); the sink topic's windows are
checked against the expected counts. The result is Markdown on stdout.

Requirements: psycopg 3, confluent-kafka (`pip install confluent-kafka`), a
weir build, and a Kafka broker: --bootstrap (or KAFKA_BOOTSTRAP), else one
started with scripts/kafka-broker.sh for the run. That broker is the tests'
unoptimized build, so for figures to publish pass Apache Kafka's address
(docker/compose.yml) with --bootstrap.

Examples:
  python3 benches/kafka.py --weir-bin $HOME/.cache/weir-target-rel/release/weir
  python3 benches/kafka.py --events 200000 --repeat 1      # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (benches/ingest.py: WeirServer, machine info)

try:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError:
    sys.exit("benches/kafka.py needs confluent-kafka: pip install confluent-kafka")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_WEIR_BIN = os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target-rel")),
    "release", "weir")
BASE_MS = 1_700_000_000_000
WINDOW_MS = 10_000
DELAY_MS = 4_000
COLUMNS = ("auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP, "
           "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND")
VIEW = ("CREATE MATERIALIZED VIEW q7 AS SELECT window_start, window_end, "
        "max(price) AS max_price, count(*) AS bids "
        "FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND) "
        "GROUP BY window_start, window_end EMIT ON WINDOW CLOSE")


def log(msg: str) -> None:
    print(f"[kafka] {msg}", file=sys.stderr, flush=True)


def event(i: int) -> dict:
    return {"auction": i % 1000, "bidder": i % 5000, "price": (i * 7919) % 10000,
            "date_time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((BASE_MS + i) // 1000))
            + f".{(BASE_MS + i) % 1000:03d}"}


def closed_windows(events: int) -> int:
    """Windows whose end the final watermark (last event time - delay) has reached."""
    watermark = BASE_MS + events - 1 - DELAY_MS
    first = BASE_MS // WINDOW_MS
    return max(0, (watermark // WINDOW_MS) - first)


class Broker:
    """The broker the run uses: given, or started for the run."""

    def __init__(self, bootstrap: str | None):
        self.dir = None
        self.bootstrap = bootstrap
        if not bootstrap:
            script = os.path.join(ROOT, "scripts", "kafka-broker.sh")
            subprocess.run([script, "install"], check=True, stdout=subprocess.DEVNULL)
            self.dir = tempfile.mkdtemp(prefix="weir-bench-kafka-")
            self.bootstrap = subprocess.run([script, "start", self.dir], check=True,
                                            capture_output=True, text=True).stdout.strip()
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def stop(self) -> None:
        if self.dir:
            subprocess.run([os.path.join(ROOT, "scripts", "kafka-broker.sh"), "stop", self.dir])

    def create_topic(self, name: str, partitions: int) -> None:
        for future in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result()

    def produce(self, topic: str, start: int, count: int, partitions: int) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "linger.ms": 20, "batch.num.messages": 10000})
        for i in range(start, start + count):
            while True:
                try:
                    producer.produce(topic, json.dumps(event(i)).encode(), partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush(120)

    def messages(self, topic: str) -> int:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "weir-bench"})
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            total = 0
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                total += high - low
            return total
        finally:
            consumer.close()


def wait_until(check, limit: float, what: str) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > limit:
            raise TimeoutError(f"{what} not reached within {limit:.0f}s")
        time.sleep(0.05)
    return time.monotonic()


def server_args(args) -> argparse.Namespace:
    return argparse.Namespace(weir_bin=args.weir_bin, tmp_dir=args.tmp_dir, weir_arg=[],
                              startup_timeout=60, no_prepare=True, mem_interval=0.5, keep=False)


def with_clause(broker: Broker, topic: str) -> str:
    return (f"WITH (connector = 'kafka', topic = '{topic}', "
            f"properties.bootstrap.server = '{broker.bootstrap}')")


def measured(phase: str, args, seconds: float, cpu: float, windows: int, expected: int) -> dict:
    return {"phase": phase, "seconds": seconds, "cpu": cpu,
            "events_per_s": args.events / seconds, "events_per_cpu_s": args.events / cpu,
            "windows": windows, "expected": expected}


def run_kafka(args, broker: Broker, topic: str, rep: int) -> dict:
    out = f"q7-kafka-{os.getpid()}-{rep}"
    broker.create_topic(out, 1)
    server = ingest.WeirServer(server_args(args))
    server.start()
    try:
        conn = server.connect()
        cpu0, t0 = server.cpu_seconds(), time.monotonic()
        conn.execute(f"CREATE SOURCE bids ({COLUMNS}) {with_clause(broker, topic)} "
                     "FORMAT PLAIN ENCODE JSON")
        conn.execute(VIEW)
        conn.execute(f"CREATE SINK out FROM q7 {with_clause(broker, out)} FORMAT PLAIN ENCODE JSON")
        expected = closed_windows(args.events)
        t1 = wait_until(lambda: broker.messages(out) >= expected, 1800, "kafka sink output")
        run = measured("kafka", args, t1 - t0, server.cpu_seconds() - cpu0,
                       broker.messages(out), expected)
        log(f"kafka run {rep}: {run['events_per_s']:,.0f} events/s, {run['cpu']:.1f} CPU-s")
        if rep == args.repeat - 1 and args.backlog:
            run["recovery"] = recovery(args, broker, topic, server, conn)
        return run
    finally:
        server.stop()
        server.cleanup_dir()


def recovery(args, broker: Broker, topic: str, server, conn) -> dict:
    conn.close()
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    broker.produce(topic, args.events, args.backlog, args.partitions)
    cmd = server.proc.args
    t0 = time.monotonic()
    server.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=server._log,
                                   stderr=subprocess.STDOUT, cwd=server.workdir,
                                   start_new_session=True)
    server.wait_ready(60, lambda: server.proc.poll() is None)
    ready = time.monotonic()
    conn = server.connect()
    total = args.events + args.backlog
    t1 = wait_until(lambda: conn.execute("SELECT count(*) FROM bids").fetchone()[0] >= total,
                    1800, "the backlog")
    result = {"backlog": args.backlog, "restart_s": ready - t0, "drained_s": t1 - t0,
              "events_per_s": args.backlog / (t1 - ready)}
    log(f"recovery: ready in {result['restart_s']:.2f}s, {args.backlog:,} events drained "
        f"{result['drained_s']:.2f}s after the restart")
    conn.close()
    return result


def run_embedded(args, broker: Broker, rep: int) -> dict:
    out = f"q7-embedded-{os.getpid()}-{rep}"
    broker.create_topic(out, 1)
    server = ingest.WeirServer(server_args(args))
    server.start()
    try:
        conn = server.connect()
        conn.execute(f"CREATE TABLE bids ({COLUMNS}) APPEND ONLY")
        conn.execute(VIEW)
        conn.execute(f"CREATE SINK out FROM q7 {with_clause(broker, out)} FORMAT PLAIN ENCODE JSON")
        cpu0, t0 = server.cpu_seconds(), time.monotonic()
        with conn.cursor().copy("COPY bids FROM STDIN WITH (FORMAT csv)") as copy:
            for start in range(0, args.events, 100_000):
                rows = (f"{e['auction']},{e['bidder']},{e['price']},{e['date_time']}\n"
                        for e in map(event, range(start, min(args.events, start + 100_000))))
                copy.write("".join(rows).encode())
        expected = closed_windows(args.events)
        t1 = wait_until(lambda: broker.messages(out) >= expected, 1800, "embedded sink output")
        run = measured("embedded", args, t1 - t0, server.cpu_seconds() - cpu0,
                       broker.messages(out), expected)
        log(f"embedded run {rep}: {run['events_per_s']:,.0f} events/s, {run['cpu']:.1f} CPU-s")
        return run
    finally:
        server.stop()
        server.cleanup_dir()


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def markdown(args, broker: Broker, kafka: list[dict], embedded: list[dict]) -> str:
    machine = ingest.machine_info(args.tmp_dir or tempfile.gettempdir())
    k, e = median(kafka, "events_per_s"), median(embedded, "events_per_s")
    lines = [
        f"### Kafka pipeline ({args.events:,} events, {args.partitions} partitions, "
        f"medians of {args.repeat})",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores; load average "
        f"{os.getloadavg()[0]:.2f}; weir `{args.weir_bin}`; broker `{broker.bootstrap}`.",
        "",
        "| pipeline | events/s | events per CPU-second of weir | windows out |",
        "|---|---|---|---|",
        f"| Kafka JSON source -> q7 -> Kafka sink | {k:,.0f} | "
        f"{median(kafka, 'events_per_cpu_s'):,.0f} | {kafka[0]['windows']} of {kafka[0]['expected']} |",
        f"| embedded log (COPY) -> q7 -> Kafka sink | {e:,.0f} | "
        f"{median(embedded, 'events_per_cpu_s'):,.0f} | {embedded[0]['windows']} of "
        f"{embedded[0]['expected']} |",
        "",
        f"Kafka / embedded: {k / e:.2f}.",
    ]
    recovery = kafka[-1].get("recovery")
    if recovery:
        lines += ["", f"Recovery: after SIGKILL and {recovery['backlog']:,} more events, weir "
                  f"accepted connections {recovery['restart_s']:.2f} s after the restart and the "
                  f"source had drained the backlog {recovery['drained_s']:.2f} s after it "
                  f"({recovery['events_per_s']:,.0f} events/s)."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weir-bin", default=DEFAULT_WEIR_BIN)
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--backlog", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tmp-dir", default=None)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    broker = Broker(args.bootstrap)
    try:
        topic = f"bids-{os.getpid()}"
        broker.create_topic(topic, args.partitions)
        log(f"producing {args.events:,} events to {topic} at {broker.bootstrap}")
        broker.produce(topic, 0, args.events, args.partitions)
        kafka, embedded = [], []
        for rep in range(args.repeat):
            kafka.append(run_kafka(args, broker, topic, rep))
            embedded.append(run_embedded(args, broker, rep))
        print(markdown(args, broker, kafka, embedded))
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
