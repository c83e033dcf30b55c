#!/usr/bin/env python3
"""Cluster benchmark: one partitioned view over a Kafka source, on 1, 2 and
3 weir nodes of one machine; and how long the nodes left take to give
exact answers again after one of them is killed.

The events are produced once, before anything is timed, into a topic of
--partitions partitions:

    {"k": i % --keys, "v": i}

For each cluster size the nodes start with empty data directories and
form the cluster (untimed); then, timed from the CREATE SOURCE sent to the
first node until a SELECT on the first node gathers the exact totals
(asked once every node's /metrics shows the source has read every event):

    CREATE SOURCE events (k BIGINT, v BIGINT) WITH (connector = 'kafka', ...)
    CREATE MATERIALIZED VIEW totals WITH (partitioned = true) AS
      SELECT k, count(*) AS n, sum(v) AS total FROM events GROUP BY k

The timed region ends with every row of the view checked against the
recount (a mismatch fails the run). CPU-seconds are all nodes' processes.
By default every node reads and logs the whole source and the nodes
split the view's groups; with --split the source is declared with
`partition_by = 'k'`, so each node reads its share of the topic and
relays it through the cluster's rows topic (docs/cluster.md).

Recovery, on the largest cluster once it is caught up: one node is killed
with SIGKILL; timed until a SELECT on the first node gathers the exact
totals again: the group's session timeout, the address book forgetting
the node, and the others rebuilding its partitions from their own logs
(with --standbys 1, serving the copies they kept instead).

Requirements: psycopg 3, confluent-kafka, a weir build, and a Kafka
broker: --bootstrap (or KAFKA_BOOTSTRAP), else the tests' broker started
with scripts/kafka-broker.sh for the run.

Examples:
  python3 benches/cluster.py --weir-bin $HOME/.cache/weir-target-rel/release/weir
  python3 benches/cluster.py --events 100000 --nodes 1,2 --repeat 1   # smoke run
  python3 benches/cluster.py --split --nodes 3 --standbys 1   # failover onto standby copies
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
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (benches/ingest.py: ports, process CPU, machine info)
import kafka  # noqa: E402  (benches/kafka.py: the broker)

import psycopg  # noqa: E402
from confluent_kafka import Producer  # noqa: E402


def log(msg: str) -> None:
    print(f"[cluster] {msg}", file=sys.stderr, flush=True)


def produce(broker: kafka.Broker, topic: str, events: int, keys: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "batch.num.messages": 10000})
    for i in range(events):
        payload = json.dumps({"k": i % keys, "v": i}).encode()
        while True:
            try:
                producer.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def recount(events: int, keys: int) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for i in range(events):
        n, total = out.get(i % keys, (0, 0))
        out[i % keys] = (n + 1, total + i)
    return out


class Node(ingest.WeirNode):
    """A node of the benchmark's cluster, killed and stopped whole."""

    def __init__(self, args, cluster: str, bootstrap: str, name: str, workdir: str):
        super().__init__(args.weir_bin, os.path.join(workdir, name),
                         os.path.join(workdir, f"{name}.log"),
                         ("--auth", "trust", "--cluster", cluster, "--kafka", bootstrap,
                          "--node-name", name, "--standbys", str(args.standbys)))
        self.name = name

    def cpu(self) -> float:
        return ingest.tree_cpu_seconds(self.proc.pid) if self.proc else 0.0

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def formed(conn, names: list[str], partitions: int) -> bool:
    rows = conn.execute("SHOW CLUSTER").fetchall()
    owned = sorted(int(p) for row in rows for p in row[3].split(",") if p)
    return sorted(row[0] for row in rows) == sorted(names) and owned == list(range(partitions))


def exact(conn, expected: dict[int, tuple[int, int]]) -> bool:
    """The view gathered on this node equals the recount, row by row; a
    read that fails (a node just died) is not yet exact."""
    try:
        rows = conn.execute("SELECT k, n, total FROM totals").fetchall()
    except psycopg.Error:
        return False
    return len(rows) == len(expected) and all(expected.get(k) == (n, t) for k, n, t in rows)


def read_all(nodes: list[Node], events: int, split: bool) -> bool:
    """Every node's source has read every event (a split source: the
    nodes together), by their /metrics: cheap to ask often, unlike a
    gathered SELECT."""
    counts = []
    for node in nodes:
        try:
            url = f"http://127.0.0.1:{node.http_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as answer:
                page = answer.read().decode()
        except OSError:
            return False
        read = [float(line.split()[-1]) for line in page.splitlines()
                if line.startswith('weir_source_messages_total{source="events"}')]
        if not read:
            return False
        counts.append(read[0])
    if split:
        return sum(counts) >= events
    return min(counts) >= events


def wait_until(check, limit: float, what: str, poll: float) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > limit:
            raise SystemExit(f"{what} not reached within {limit:.0f}s")
        time.sleep(poll)
    return time.monotonic()


def run(args, broker: kafka.Broker, topic: str, size: int, rep: int,
        expected: dict[int, tuple[int, int]]) -> dict:
    workdir = tempfile.mkdtemp(prefix="weir-bench-cluster-", dir=args.tmp_dir)
    cluster = f"bench-{os.getpid()}-{size}-{rep}"
    nodes = [Node(args, cluster, broker.bootstrap, f"n{i + 1}", workdir) for i in range(size)]
    try:
        for node in nodes:
            node.start(timeout=120)
        conn = nodes[0].connect()
        names = [n.name for n in nodes]
        wait_until(lambda: formed(conn, names, args.cluster_partitions), 120,
                   "the cluster", 0.2)
        split = ", partition_by = 'k'" if args.split else ""
        cpu0, t0 = sum(n.cpu() for n in nodes), time.monotonic()
        conn.execute(f"CREATE SOURCE events (k BIGINT, v BIGINT) "
                     f"WITH (connector = 'kafka', topic = '{topic}', "
                     f"properties.bootstrap.server = '{broker.bootstrap}'{split}) "
                     "FORMAT PLAIN ENCODE JSON")
        conn.execute("CREATE MATERIALIZED VIEW totals WITH (partitioned = true) AS "
                     "SELECT k, count(*) AS n, sum(v) AS total FROM events GROUP BY k")
        wait_until(lambda: read_all(nodes, args.events, args.split), 1800,
                   "every event read", 0.2)
        t1 = wait_until(lambda: exact(conn, expected), 600, "the exact totals", args.poll)
        cpu = sum(n.cpu() for n in nodes) - cpu0
        result = {"nodes": size, "seconds": t1 - t0, "cpu": cpu,
                  "events_per_s": args.events / (t1 - t0), "events_per_cpu_s": args.events / cpu}
        log(f"{size} node(s), run {rep}: {result['seconds']:.2f} s, {cpu:.1f} CPU-s, "
            f"{result['events_per_s']:,.0f} events/s")
        if size > 1 and rep == args.repeat - 1:
            nodes[-1].kill()
            k0 = time.monotonic()
            k1 = wait_until(lambda: exact(conn, expected), 600, "exact totals after a kill",
                            args.poll)
            result["recovery_s"] = k1 - k0
            log(f"{size} nodes: exact again {k1 - k0:.2f} s after a node was killed")
        conn.close()
        return result
    finally:
        for node in nodes:
            node.stop()
        if not args.keep:
            subprocess.run(["rm", "-rf", workdir])


def markdown(args, results: list[dict], machine: dict) -> str:
    lines = [
        f"Partitioned `GROUP BY k` ({args.keys:,} keys) over a "
        f"{'split (`partition_by`) ' if args.split else 'whole-read '}Kafka source of "
        f"{args.events:,} JSON events in {args.partitions} partitions; "
        f"{args.cluster_partitions} cluster partitions; --standbys {args.standbys}; "
        f"{args.repeat} run(s) per size, "
        "median (min–max); every run's view checked row by row.",
        "",
        "| nodes | wall s | CPU-s (all nodes) | events/s | events per CPU-s | exact again after a kill |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sorted({r["nodes"] for r in results}):
        runs = [r for r in results if r["nodes"] == size]

        def cell(key: str, fmt: str) -> str:
            values = [r[key] for r in runs]
            med = statistics.median(values)
            return f"{med:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"
        recovery = [r["recovery_s"] for r in runs if "recovery_s" in r]
        lines.append(f"| {size} | {cell('seconds', '.2f')} | {cell('cpu', '.1f')} | "
                     f"{cell('events_per_s', ',.0f')} | {cell('events_per_cpu_s', ',.0f')} | "
                     f"{f'{recovery[0]:.1f} s' if recovery else '—'} |")
    lines += ["", f"Machine: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores; "
              f"broker at {args.bootstrap or 'the tests broker (unoptimized build)'}."]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weir-bin", default=kafka.DEFAULT_WEIR_BIN)
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--split", action="store_true",
                   help="the source is split over the nodes (partition_by = 'k')")
    p.add_argument("--cluster-partitions", type=int, default=12)
    p.add_argument("--standbys", type=int, default=0,
                   help="every node's --standbys: warm copies for that many failures")
    p.add_argument("--nodes", default="1,2,3")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--poll", type=float, default=0.2, help="seconds between checks of the view")
    p.add_argument("--tmp-dir", default=None)
    p.add_argument("--keep", action="store_true", help="keep the nodes' directories")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    broker = kafka.Broker(args.bootstrap)
    try:
        topic = f"cluster-events-{os.getpid()}"
        broker.create_topic(topic, args.partitions)
        log(f"producing {args.events:,} events to {topic} at {broker.bootstrap}")
        produce(broker, topic, args.events, args.keys, args.partitions)
        expected = recount(args.events, args.keys)
        results = []
        for rep in range(args.repeat):
            for size in [int(n) for n in args.nodes.split(",")]:
                results.append(run(args, broker, topic, size, rep, expected))
        machine = ingest.machine_info(args.tmp_dir or tempfile.gettempdir())
        print(markdown(args, results, machine))
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
