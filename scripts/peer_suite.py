#!/usr/bin/env python3
"""Run RisingWave's streaming end-to-end suite against weir, record by record.

Each `.slt` file under `e2e_test/streaming` of a RisingWave checkout runs
against a fresh weir node (its own port and data directory), over the
simple query protocol, as RisingWave's runner sends it. A query passes
when weir returns RisingWave's expected rows (sorted first where the
record says `rowsort`); a statement passes when it succeeds or fails as
the record says. Records for other engines (`onlyif`/`skipif`), `system`
commands and `sleep`s beyond a second are left out or shortened.

It prints queries passed of all run, `CREATE MATERIALIZED VIEW`
statements accepted, a line per file, and the most common causes of
failure (error messages with names and numbers blanked).

The checkout is fetched separately and never copied into this repository:

  git clone --depth 1 https://github.com/risingwavelabs/risingwave /tmp/risingwave
  python3 scripts/peer_suite.py --rw /tmp/risingwave [--weir target/debug/weir]
      [--filter nexmark] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import decimal
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import psycopg

ENGINE = "risingwave"


@dataclass
class Record:
    kind: str  # statement, query
    sql: str
    expect_error: bool = False
    error: str = ""
    count: int | None = None
    sort: str = "nosort"
    rows: list[str] = field(default_factory=list)
    where: str = ""


def parse_file(path: str) -> list[Record | tuple]:
    """Records of a file, includes expanded in place."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out: list = []
    i = 0
    skip_next = False
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        words = line.split()
        head = words[0]
        if head == "include":
            pattern = os.path.join(os.path.dirname(path), " ".join(words[1:]))
            for included in sorted(glob.glob(pattern)):
                out.extend(parse_file(included))
            continue
        if head in ("skipif", "onlyif"):
            target = words[1] if len(words) > 1 else ""
            runs_here = target == ENGINE
            skip_next = skip_next or (runs_here if head == "skipif" else not runs_here)
            continue
        if head == "sleep":
            out.append(("sleep", words[1] if len(words) > 1 else "0s"))
            continue
        if head == "halt":
            break
        if head in ("statement", "query", "system"):
            block, i = take_block(lines, i)
            record = make_record(words, block, f"{path}:{i}")
            if skip_next or record is None:
                skip_next = False
                out.append(("skipped", head))
                continue
            out.append(record)
            continue
        # control, hash-threshold, connection, subtest and the like.
        skip_next = False
    return out


def take_block(lines: list[str], i: int) -> tuple[list[str], int]:
    block = []
    while i < len(lines) and lines[i].strip() != "":
        block.append(lines[i])
        i += 1
    return block, i


def make_record(words: list[str], block: list[str], where: str) -> Record | None:
    head = words[0]
    if head == "system":
        return None
    if head == "statement":
        mode = words[1] if len(words) > 1 else "ok"
        record = Record("statement", "\n".join(block), where=where)
        if mode == "error":
            record.expect_error = True
            record.error = " ".join(words[2:])
        elif mode == "count":
            record.count = int(words[2])
        return record
    # query
    if len(words) > 1 and words[1] == "error":
        return Record("query", "\n".join(block), expect_error=True, error=" ".join(words[2:]), where=where)
    sort = words[2] if len(words) > 2 and words[2] in ("rowsort", "valuesort", "nosort") else "nosort"
    if "----" in block:
        at = block.index("----")
        sql, rows = block[:at], block[at + 1:]
    else:
        sql, rows = block, []
    return Record("query", "\n".join(sql), sort=sort, rows=[normal(r) for r in rows], where=where)


def normal(line: str) -> str:
    """A row with its spacing folded, in PostgreSQL's text form: RisingWave
    prints a timestamptz's whole-hour offset as `+00:00` or `-04:00`,
    PostgreSQL (and weir) as `+00` or `-04`; a decimal's scale (`6221.50`) follows the type it was
    computed in, and RisingWave pads a time's fraction of a second to
    milliseconds (`00:00:20.210`) where PostgreSQL writes `00:00:20.21`, so
    trailing zeros of a fraction are dropped on both sides. Only the text
    changes, never the value."""
    line = re.sub(r"(\d\d:\d\d:\d\d(?:\.\d+)?)([+-]\d\d):00\b", r"\1\2", line)
    return " ".join(fraction(token) for token in line.split())


def fraction(token: str) -> str:
    if re.fullmatch(r"-?\d+(\.\d+)?e[-+]\d+", token):
        # PostgreSQL writes 9.99e-05 where RisingWave writes 0.0000999.
        token = format(decimal.Decimal(token), "f")
    zoned = re.fullmatch(r"(\d\d:\d\d:\d\d\.\d+)([+-]\d\d(?::\d\d)*)", token)
    if zoned:
        return zoned.group(1).rstrip("0").rstrip(".") + zoned.group(2)
    if not re.fullmatch(r"-?\d+\.\d+|\d\d:\d\d:\d\d\.\d+", token):
        return token
    return token.rstrip("0").rstrip(".")


def text(value: bytes | None) -> str:
    if value is None:
        return "NULL"
    decoded = value.decode("utf-8", "replace")
    return "(empty)" if decoded == "" else decoded


def sorted_rows(rows: list[str], sort: str) -> list[str]:
    if sort == "rowsort":
        return sorted(rows)
    if sort == "valuesort":
        return sorted(v for r in rows for v in r.split())
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, binary: str):
        self.dir = tempfile.TemporaryDirectory(prefix="weir-peer-")
        self.port = free_port()
        self.log = open(os.path.join(self.dir.name, "weir.log"), "w")
        self.process = subprocess.Popen(
            [binary, "--listen", f"127.0.0.1:{self.port}", "--http-listen",
             f"127.0.0.1:{free_port()}", "--data-dir", os.path.join(self.dir.name, "data")],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.conn = self.connect()
        # One statement that never ends must not stop the run.
        self.run("SET statement_timeout = '60s'")

    def connect(self) -> psycopg.Connection:
        deadline = time.time() + 60
        while True:
            try:
                return psycopg.connect(host="127.0.0.1", port=self.port, user="root",
                                       dbname="dev", autocommit=True, connect_timeout=5)
            except psycopg.OperationalError:
                if time.time() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.1)

    def run(self, sql: str):
        """(error message or None, rows as text lines, affected count)."""
        result = self.conn.pgconn.exec_(sql.encode())
        status = result.status
        if status == psycopg.pq.ExecStatus.FATAL_ERROR:
            message = (result.error_field(psycopg.pq.DiagnosticField.MESSAGE_PRIMARY) or b"").decode(
                "utf-8", "replace")
            return message or "error", [], None
        rows = []
        for r in range(result.ntuples):
            rows.append(normal(" ".join(text(result.get_value(r, c)) for c in range(result.nfields))))
        tag = (result.command_status or b"").decode()
        count = int(tag.split()[-1]) if tag and tag.split()[-1].isdigit() else None
        return None, rows, count

    def close(self):
        try:
            self.conn.close()
        except Exception:
            pass
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        self.dir.cleanup()


CREATE_MV = re.compile(r"^\s*create\s+materialized\s+view\s+(if\s+not\s+exists\s+)?(\S+)", re.I)


def cause(message: str) -> str:
    """An error message with the parts that vary blanked, for counting."""
    message = message.splitlines()[0] if message else "error"
    message = re.sub(r'"[^"]*"', '"…"', message)
    message = re.sub(r"'[^']*'", "'…'", message)
    message = re.sub(r"\b\d+\b", "N", message)
    return message[:160]


@dataclass
class Tally:
    queries: int = 0
    queries_passed: int = 0
    statements: int = 0
    statements_passed: int = 0
    views: int = 0
    views_accepted: int = 0
    skipped: int = 0
    crashed: bool = False
    causes: collections.Counter = field(default_factory=collections.Counter)
    failures: list = field(default_factory=list)


def start_node(binary: str, attempts: int = 3) -> Node:
    """A fresh node; another try on another port if one fails to start
    (a port taken between choosing and binding it)."""
    for attempt in range(attempts):
        try:
            return Node(binary)
        except psycopg.OperationalError:
            if attempt + 1 == attempts:
                raise
    raise AssertionError("unreachable")


def run_file(binary: str, path: str, timeout: float) -> Tally:
    tally = Tally()
    records = parse_file(path)
    node = start_node(binary)
    started = time.time()
    refused: set[str] = set()
    try:
        for record in records:
            if isinstance(record, tuple):
                if record[0] == "sleep":
                    time.sleep(min(parse_seconds(record[1]), 1.0))
                else:
                    tally.skipped += 1
                continue
            if time.time() - started > timeout:
                tally.causes["file timed out"] += 1
                break
            check(node, record, tally, refused)
    except (psycopg.OperationalError, psycopg.InterfaceError) as e:
        tally.crashed = True
        tally.causes[f"connection lost: {cause(str(e))}"] += 1
    finally:
        node.close()
    return tally


def check(node: Node, record: Record, tally: Tally, refused: set[str]) -> None:
    if os.environ.get("PEER_TRACE"):
        print(f"  running {record.where}", file=sys.stderr, flush=True)
    error, rows, count = node.run(record.sql)
    view = CREATE_MV.match(record.sql)
    if record.kind == "statement":
        tally.statements += 1
        if view and not record.expect_error:
            tally.views += 1
            name = view.group(2).lower()
            if error is None:
                tally.views_accepted += 1
            else:
                refused.add(name)
        passed = (error is not None) == record.expect_error
        if passed and record.count is not None and count != record.count:
            passed = False
        tally.statements_passed += passed
        if not passed:
            tally.causes["statement: " + (cause(error) if error else "succeeded, error expected")] += 1
            tally.failures.append((record.where, record.sql, error or "succeeded"))
        return
    tally.queries += 1
    if record.expect_error:
        passed = error is not None
    else:
        passed = error is None and sorted_rows(rows, record.sort) == sorted_rows(record.rows, record.sort)
    tally.queries_passed += passed
    if passed:
        return
    tally.failures.append((record.where, record.sql, error or f"wrong rows: {sorted_rows(rows, record.sort)[:5]}"))
    if error is None:
        tally.causes["query: wrong rows"] += 1
    elif any(re.search(rf"\b{re.escape(name)}\b", record.sql, re.I) for name in refused):
        tally.causes["query: reads a view that was refused"] += 1
    else:
        tally.causes["query: " + cause(error)] += 1


def parse_seconds(text: str) -> float:
    match = re.match(r"([\d.]+)\s*(ms|s|m)?", text)
    if not match:
        return 0.0
    value = float(match.group(1))
    return value / 1000 if match.group(2) == "ms" else value * 60 if match.group(2) == "m" else value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rw", required=True, help="a RisingWave checkout")
    target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/weir-target"))
    parser.add_argument("--weir", default=os.path.join(target, "debug", "weir"))
    parser.add_argument("--filter", default="")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per file")
    parser.add_argument("--json")
    parser.add_argument("--causes", type=int, default=30)
    parser.add_argument("--failures", help="write every failing record here")
    args = parser.parse_args()
    root = os.path.join(args.rw, "e2e_test", "streaming")
    files = sorted(glob.glob(os.path.join(root, "**", "*.slt"), recursive=True))
    files = [f for f in files if args.filter in os.path.relpath(f, root)]
    total = Tally()
    per_file = {}
    for path in files:
        name = os.path.relpath(path, root)
        tally = run_file(args.weir, path, args.timeout)
        per_file[name] = tally
        for attr in ("queries", "queries_passed", "statements", "statements_passed", "views",
                     "views_accepted", "skipped"):
            setattr(total, attr, getattr(total, attr) + getattr(tally, attr))
        total.causes.update(tally.causes)
        mark = " (connection lost)" if tally.crashed else ""
        print(f"{name}: queries {tally.queries_passed}/{tally.queries}, views "
              f"{tally.views_accepted}/{tally.views}{mark}", file=sys.stderr, flush=True)
    pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "n/a"
    print(f"files: {len(files)}")
    print(f"queries passed: {total.queries_passed} of {total.queries} ({pct(total.queries_passed, total.queries)})")
    print(f"statements as expected: {total.statements_passed} of {total.statements}")
    print(f"materialized views accepted: {total.views_accepted} of {total.views} "
          f"({pct(total.views_accepted, total.views)})")
    print(f"records left out (other engines, system commands): {total.skipped}")
    print("top causes:")
    for text_, n in total.causes.most_common(args.causes):
        print(f"  {n:5d}  {text_}")
    if args.failures:
        with open(args.failures, "w") as f:
            for tally in per_file.values():
                for where, sql, error in tally.failures:
                    f.write(f"--- {where}\n{sql}\n=> {error}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({name: {k: (dict(v) if isinstance(v, collections.Counter) else v)
                              for k, v in vars(t).items() if k != "failures"}
                       for name, t in per_file.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
