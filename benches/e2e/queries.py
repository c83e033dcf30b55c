"""The Nexmark queries of the end-to-end harness, as the Nexmark suite
(nexmark-flink) writes them, in each engine's spelling, and the canonical
form and order-independent hash every engine's output is checked with.

Only the spelling differs between engines: weir's window table functions
are `TUMBLE(bid, date_time, ...)` / `HOP(bid, date_time, slide, size)`,
Flink's `TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), ...))`, and DuckDB
(the reference answer) computes the same windows with `time_bucket`.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib

# The bid table as weir's Nexmark generator makes it (`extra` kept).
BID_COLUMNS = [("auction", "BIGINT"), ("bidder", "BIGINT"), ("price", "BIGINT"),
               ("channel", "VARCHAR"), ("url", "VARCHAR"), ("date_time", "TIMESTAMP"),
               ("extra", "VARCHAR")]

# Event time, as nexmark-flink declares it.
WATERMARK = "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND"

# The output columns of each query: i = integer, d = decimal, s = text,
# t = timestamp.
COLUMNS = {
    "q0": [("auction", "i"), ("bidder", "i"), ("price", "i"), ("date_time", "t"), ("extra", "s")],
    "q1": [("auction", "i"), ("bidder", "i"), ("price", "d"), ("date_time", "t"), ("extra", "s")],
    "q2": [("auction", "i"), ("price", "i")],
    "q5": [("auction", "i"), ("num", "i")],
    "q7": [("auction", "i"), ("price", "i"), ("bidder", "i"), ("date_time", "t"), ("extra", "s")],
    "q7_tumble": [("window_start", "t"), ("window_end", "t"), ("maxprice", "i")],
    # Not a query: weir's ingest alone (COPY into the table, no view), a
    # baseline for where weir's time goes; its check is the table itself.
    "ingest": [("auction", "i"), ("bidder", "i"), ("price", "i"), ("channel", "s"), ("url", "s"),
               ("date_time", "t"), ("extra", "s")],
}

# The tables each query reads (every query here reads bids only).
READS = {q: ["bid"] for q in COLUMNS}

# Queries whose windows need event time (the watermark on the source).
WINDOWED = ("q5", "q7", "q7_tumble")

ALL_QUERIES = list(COLUMNS)

# What only weir runs.
WEIR_ONLY = ("ingest",)


def _q5(hop: str) -> str:
    return f"""SELECT AuctionBids.auction, AuctionBids.num
FROM (
    SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM {hop}
    GROUP BY auction, window_start, window_end
) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
    FROM (
        SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
        FROM {hop}
        GROUP BY auction, window_start, window_end
    ) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime
) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime
   AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn"""


def _q7(tumble: str) -> str:
    return f"""SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid AS B
JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM {tumble}
    GROUP BY window_start, window_end
) AS B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time"""


def _common(query: str, mod: str) -> str | None:
    if query == "ingest":
        return "SELECT * FROM bid"
    if query == "q0":
        return "SELECT auction, bidder, price, date_time, extra FROM bid"
    if query == "q1":
        return "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid"
    if query == "q2":
        return f"SELECT auction, price FROM bid WHERE {mod} = 0"
    return None


def _windowed(query: str, tumble: str, hop: str) -> str:
    """The windowed queries, given each engine's spelling of the windows."""
    if query == "q5":
        return _q5(hop)
    if query == "q7":
        return _q7(tumble)
    if query == "q7_tumble":
        return (f"SELECT window_start, window_end, max(price) AS maxprice FROM {tumble} "
                f"GROUP BY window_start, window_end")
    raise KeyError(query)


def weir_sql(query: str) -> str:
    return _common(query, "auction % 123") or _windowed(
        query,
        "TUMBLE(bid, date_time, INTERVAL '10' SECOND)",
        "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)")


def flink_sql(query: str) -> str:
    return _common(query, "MOD(auction, 123)") or _windowed(
        query,
        "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))",
        "TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))")


def duckdb_sql(query: str) -> str:
    """The reference answer: windows as time buckets (TUMBLE: the 10-second
    bucket; HOP: the five 10-second windows, every 2 seconds, that hold each
    bid)."""
    common = _common(query, "auction % 123")
    if common:
        return common

    def bucket(seconds: int) -> str:
        return (f"time_bucket(INTERVAL '{seconds} seconds', date_time, "
                f"TIMESTAMP '1970-01-01 00:00:00')")
    tumble = (f"(SELECT *, {bucket(10)} AS window_start, {bucket(10)} + INTERVAL '10 seconds' AS window_end "
              f"FROM bid)")
    hop = (f"(SELECT *, {bucket(2)} - INTERVAL (2 * k) SECOND AS window_start, "
           f"{bucket(2)} - INTERVAL (2 * k) SECOND + INTERVAL '10 seconds' AS window_end "
           f"FROM bid CROSS JOIN range(5) AS shifts(k))")
    return _windowed(query, tumble, hop)


# --------------------------------------------------------------------------
# Canonical form and hash
# --------------------------------------------------------------------------
#
# Every engine's rows arrive as Python values (weir through psycopg, DuckDB
# through its client) or as text (Flink's sink files). Each value becomes
# one canonical text: integers in decimal; decimals exact, without
# trailing zeros or exponent (90.800 and 90.8 are both "90.8"); timestamps
# as `YYYY-MM-DD HH:MM:SS.fff` (no time zone: every engine reads the same
# zone-less TIMESTAMP, milliseconds being the generator's precision); text
# as is; NULL as `\N`. A row is its values joined by U+001F; its hash the
# first 8 bytes of BLAKE2b; the output's hash the sum of its rows' hashes
# modulo 2^64, so equal multisets (duplicates counted) hash equal whatever
# the order.

NULL = "\\N"


def _int(v) -> str:
    return str(int(v))


def _dec(v) -> str:
    d = v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v))
    if d == 0:
        return "0"
    d = d.normalize()
    return format(d, "f")


def _ts(v) -> str:
    if not isinstance(v, datetime.datetime):
        text = str(v).strip().replace("T", " ")
        v = datetime.datetime.fromisoformat(text)
    if v.tzinfo is not None:
        v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return v.strftime("%Y-%m-%d %H:%M:%S.") + f"{v.microsecond // 1000:03d}"


def _str(v) -> str:
    return str(v)


CANON = {"i": _int, "d": _dec, "t": _ts, "s": _str}


def canonical_row(query: str, row) -> str:
    fields = []
    for (_, kind), value in zip(COLUMNS[query], row, strict=True):
        fields.append(NULL if value is None else CANON[kind](value))
    return "\x1f".join(fields)


def row_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


class Digest:
    """An order-independent digest of a multiset of rows."""

    def __init__(self, query: str):
        self.query = query
        self.rows = 0
        self.total = 0

    def add(self, row) -> None:
        self.rows += 1
        self.total = (self.total + row_hash(canonical_row(self.query, row))) & 0xFFFF_FFFF_FFFF_FFFF

    def remove(self, row) -> None:
        self.rows -= 1
        self.total = (self.total - row_hash(canonical_row(self.query, row))) & 0xFFFF_FFFF_FFFF_FFFF

    def result(self) -> dict:
        return {"rows": self.rows, "hash": f"{self.total:016x}"}
