"""The Nexmark queries of this directory as batch SQL for each engine, and
the checksum every engine computes over a query's output.

weir runs `qN.sql` (a materialized view, with TUMBLE and HOP); the batch
engines run the same computation written with their own window functions.
Each output is reduced inside the engine to one row: the row count, the sum
of every integer column, the sum of the lengths of every text column and
the sum of every timestamp's milliseconds within its hour. Equal checksums
mean equal outputs for every practical purpose, and the client never
fetches millions of rows.
"""

from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))

# The generator's tables, and the kind of event each keeps.
TABLES = {"person": "Person", "auction": "Auction", "bid": "Bid"}

# The output columns of each view: i = integer, s = text, t = timestamp.
COLUMNS = {
    "q0": [("auction", "i"), ("bidder", "i"), ("price", "i"), ("date_time", "t")],
    "q1": [("auction", "i"), ("bidder", "i"), ("price", "i"), ("date_time", "t")],
    "q2": [("auction", "i"), ("price", "i")],
    "q3": [("name", "s"), ("city", "s"), ("state", "s"), ("id", "i")],
    "q4": [("category", "i"), ("total", "i"), ("auctions", "i")],
    "q5": [("auction", "i"), ("window_start", "t"), ("window_end", "t"), ("bids", "i")],
    "q7": [("auction", "i"), ("price", "i"), ("bidder", "i"), ("date_time", "t")],
    "q7_tumble": [("window_end", "t"), ("maxprice", "i")],
    "q8": [("id", "i"), ("name", "s"), ("window_start", "t"), ("auctions", "i")],
}

# The tables each query reads.
READS = {
    "q0": ["bid"], "q1": ["bid"], "q2": ["bid"], "q3": ["auction", "person"],
    "q4": ["auction", "bid"], "q5": ["bid"], "q7": ["bid"], "q7_tumble": ["bid"], "q8": ["auction", "person"],
}


class Dialect:
    """How an engine writes the few things the standard leaves open."""

    name = "standard"

    def bucket(self, column: str, seconds: int) -> str:
        raise NotImplementedError

    def idiv(self, a: str, b: str) -> str:
        return f"({a}) / {b}"

    def millis_of_hour(self, column: str) -> str:
        return (f"(CAST(date_part('minute', {column}) AS BIGINT) * 60000"
                f" + CAST(date_part('millisecond', {column}) AS BIGINT))")

    def length(self, column: str) -> str:
        return f"length({column})"


class DataFusion(Dialect):
    name = "datafusion"

    def bucket(self, column: str, seconds: int) -> str:
        return f"date_bin(INTERVAL '{seconds} seconds', {column}, TIMESTAMP '1970-01-01 00:00:00')"


class DuckDB(Dialect):
    name = "duckdb"

    def bucket(self, column: str, seconds: int) -> str:
        return f"time_bucket(INTERVAL '{seconds} seconds', {column}, TIMESTAMP '1970-01-01 00:00:00')"

    def idiv(self, a: str, b: str) -> str:
        return f"({a}) // {b}"


def interval(seconds: int) -> str:
    return f"INTERVAL '{seconds} seconds'"


def batch_sql(query: str, d: Dialect) -> str:
    """The query over tables bid, auction and person, for a batch engine."""
    if query == "q0":
        return "SELECT auction, bidder, price, date_time FROM bid"
    if query == "q1":
        return f"SELECT auction, bidder, {d.idiv('price * 908', '1000')} AS price, date_time FROM bid"
    if query in ("q2", "q3", "q4"):
        return view_query(query)
    if query == "q5":
        shifts = " UNION ALL ".join(f"SELECT {interval(2 * k)} AS shift" for k in range(5))
        return f"""
SELECT auction, window_start, window_start + {interval(10)} AS window_end, count(*) AS bids
FROM (
    SELECT b.auction, {d.bucket('b.date_time', 2)} - o.shift AS window_start
    FROM bid AS b CROSS JOIN ({shifts}) AS o
) AS h
GROUP BY auction, window_start"""
    if query == "q7":
        return f"""
SELECT b.auction, b.price, b.bidder, b.date_time
FROM bid AS b
JOIN (
    SELECT {d.bucket('date_time', 10)} + {interval(10)} AS window_end, max(price) AS maxprice
    FROM bid
    GROUP BY 1
) AS m ON b.price = m.maxprice
WHERE b.date_time >= m.window_end - {interval(10)} AND b.date_time < m.window_end"""
    if query == "q7_tumble":
        return f"""
SELECT {d.bucket('date_time', 10)} + {interval(10)} AS window_end, max(price) AS maxprice
FROM bid
GROUP BY 1"""
    if query == "q8":
        return f"""
SELECT p.id, p.name, p.window_start, a.auctions
FROM (
    SELECT id, name, {d.bucket('date_time', 10)} AS window_start
    FROM person
    GROUP BY 1, 2, 3
) AS p
JOIN (
    SELECT seller, {d.bucket('date_time', 10)} AS window_start, count(*) AS auctions
    FROM auction
    GROUP BY 1, 2
) AS a ON p.id = a.seller AND p.window_start = a.window_start"""
    raise KeyError(query)


def view_file(query: str) -> str:
    return os.path.join(HERE, f"{query}.sql")


def create_view(query: str) -> str:
    """`CREATE MATERIALIZED VIEW qN AS ...` from qN.sql, comments dropped."""
    with open(view_file(query)) as f:
        lines = [line for line in f.read().splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines)


def view_query(query: str) -> str:
    """The SELECT of qN.sql (for the queries every engine reads alike),
    without weir's emit policy."""
    select = create_view(query).split(" AS\n", 1)[1]
    return "\n".join(line for line in select.splitlines() if not line.startswith("EMIT "))


def checksum_sql(query: str, source: str, d: Dialect) -> str:
    """One row summarising `source` (a table name or a parenthesised query)."""
    parts = ["count(*)"]
    for column, kind in COLUMNS[query]:
        expr = {"i": column, "s": d.length(column), "t": d.millis_of_hour(column)}[kind]
        parts.append(f"sum({expr})")
    return f"SELECT {', '.join(parts)} FROM {source} AS checked"


def normalise(row) -> tuple:
    """Engines return sums as int, Decimal or float: compare them as ints."""
    return tuple(None if v is None else int(v) for v in row)


# Event time, as Flink's jobs declare it for their windows (and weir's
# sources for the queries in WATERMARKED): the generator's events arrive in
# order, so nothing is late and every engine sees the same rows.
WATERMARK = "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND"

# The queries weir runs on sources declaring that watermark by default: the
# windowed aggregates, whose windows only close (and whose state is only
# dropped) as event time passes them, as in Flink's jobs. q7 is left out:
# its join on the window's end would become an interval join, which is
# slower in weir today than the regular join (docs/benchmarks/log.md).
WATERMARKED = ("q5", "q7_tumble", "q8")


def weir_columns(table: str) -> str:
    """The column list of weir's `CREATE SOURCE`, with the watermark."""
    return ", ".join([f"{c} {t}" for c, t in schema(table)] + [WATERMARK])


def schema(table: str) -> list[tuple[str, str]]:
    """Column names and SQL types, as the generator makes them."""
    cols = {
        "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, "
               "date_time TIMESTAMP, extra VARCHAR",
        "auction": "id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT, "
                   "reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, "
                   "category BIGINT, extra VARCHAR",
        "person": "id BIGINT, name VARCHAR, email_address VARCHAR, credit_card VARCHAR, "
                  "city VARCHAR, state VARCHAR, date_time TIMESTAMP, extra VARCHAR",
    }[table]
    return [tuple(c.strip().split(" ", 1)) for c in cols.split(",")]
