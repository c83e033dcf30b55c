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
# t = timestamp, a = an average compared by its integer part (Flink's avg
# of a BIGINT is a BIGINT, truncated).
_BID_OUT = [("auction", "i"), ("bidder", "i"), ("price", "i"), ("channel", "s"), ("url", "s"),
            ("date_time", "t"), ("extra", "s")]
_RANKS = [("rank1", "price < 10000"), ("rank2", "price >= 10000 AND price < 1000000"),
          ("rank3", "price >= 1000000")]
_COUNT_COLUMNS = [(f"{r}_bids", "i") for r in ("total", "rank1", "rank2", "rank3")] + [
    (f"{r}_{what}", "i") for what in ("bidders", "auctions") for r in ("total", "rank1", "rank2", "rank3")]
COLUMNS = {
    "q0": [("auction", "i"), ("bidder", "i"), ("price", "i"), ("date_time", "t"), ("extra", "s")],
    "q1": [("auction", "i"), ("bidder", "i"), ("price", "d"), ("date_time", "t"), ("extra", "s")],
    "q2": [("auction", "i"), ("price", "i")],
    "q5": [("auction", "i"), ("num", "i")],
    "q7": [("auction", "i"), ("price", "i"), ("bidder", "i"), ("date_time", "t"), ("extra", "s")],
    "q7_tumble": [("window_start", "t"), ("window_end", "t"), ("maxprice", "i")],
    "q11": [("bidder", "i"), ("bid_count", "i"), ("starttime", "t"), ("endtime", "t")],
    "q15": [("day", "s"), *_COUNT_COLUMNS],
    "q16": [("channel", "s"), ("day", "s"), ("minute", "s"), *_COUNT_COLUMNS],
    "q17": [("auction", "i"), ("day", "s"), *_COUNT_COLUMNS[:4], ("min_price", "i"), ("max_price", "i"),
            ("avg_price", "a"), ("sum_price", "i")],
    "q18": [*_BID_OUT],
    "q19": [*_BID_OUT, ("rank_number", "i")],
    "q21": [*_BID_OUT[:4], ("channel_id", "s")],
    "q22": [*_BID_OUT[:4], ("dir1", "s"), ("dir2", "s"), ("dir3", "s")],
    # Not a query: weir's ingest alone (COPY into the table, no view), a
    # baseline for where weir's time goes; its check is the table itself.
    "ingest": [("auction", "i"), ("bidder", "i"), ("price", "i"), ("channel", "s"), ("url", "s"),
               ("date_time", "t"), ("extra", "s")],
}

# The columns a query's check compares, where not all: q18 keeps one bid
# per (bidder, auction) and the input has bids of one bidder on one auction
# in the same millisecond, so which of those it keeps is the engine's
# choice; q19's tenth place may be shared by equal prices likewise.
CHECKED = {"q18": ["auction", "bidder", "date_time"], "q19": ["auction", "price", "rank_number"]}

# The tables each query reads (every query here reads bids only).
READS = {q: ["bid"] for q in COLUMNS}

# Queries whose windows need event time (the watermark on the source).
WINDOWED = ("q5", "q7", "q7_tumble", "q11")

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


def _counts() -> str:
    """q15-q17's counts by price rank, as the Nexmark suite writes them."""
    parts = ["count(*) AS total_bids"] + [f"count(*) FILTER (WHERE {c}) AS {r}_bids" for r, c in _RANKS]
    for column, name in (("bidder", "bidders"), ("auction", "auctions")):
        parts.append(f"count(DISTINCT {column}) AS total_{name}")
        parts += [f"count(DISTINCT {column}) FILTER (WHERE {c}) AS {r}_{name}" for r, c in _RANKS]
    return ",\n    ".join(parts)


def _more(query: str, day: str, minute: str, channel_id: str, dir_) -> str | None:
    """q15-q22 (q20 joins auctions, q14 calls a user function: not here),
    given each engine's spelling of a day and a minute of `date_time`, of
    the `channel_id` in the URL (NULL when there is none) and of the URL's
    i-th directory."""
    if query == "q15":
        return f"SELECT {day} AS day,\n    {_counts()}\nFROM bid GROUP BY {day}"
    if query == "q16":
        return (f"SELECT channel, {day} AS day, max({minute}) AS minute,\n    {_counts()}\n"
                f"FROM bid GROUP BY channel, {day}")
    if query == "q17":
        ranks = ", ".join(f"count(*) FILTER (WHERE {c}) AS {r}_bids" for r, c in _RANKS)
        return (f"SELECT auction, {day} AS day, count(*) AS total_bids, {ranks}, min(price) AS min_price, "
                f"max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price "
                f"FROM bid GROUP BY auction, {day}")
    if query == "q18":
        return ("SELECT auction, bidder, price, channel, url, date_time, extra FROM (SELECT *, ROW_NUMBER() "
                "OVER (PARTITION BY bidder, auction ORDER BY date_time DESC) AS rank_number FROM bid) AS b "
                "WHERE rank_number <= 1")
    if query == "q19":
        return ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) "
                "AS rank_number FROM bid) AS b WHERE rank_number <= 10")
    if query == "q21":
        return ("SELECT auction, bidder, price, channel, CASE WHEN lower(channel) = 'apple' THEN '0' "
                "WHEN lower(channel) = 'google' THEN '1' WHEN lower(channel) = 'facebook' THEN '2' "
                f"WHEN lower(channel) = 'baidu' THEN '3' ELSE {channel_id} END AS channel_id FROM bid "
                f"WHERE {channel_id} IS NOT NULL OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')")
    if query == "q22":
        return (f"SELECT auction, bidder, price, channel, {dir_(1)} AS dir1, {dir_(2)} AS dir2, "
                f"{dir_(3)} AS dir3 FROM bid")
    return None


_CHANNEL_ID = "'(&|^)channel_id=([^&]*)'"
_Q11 = ("SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime "
        "FROM {session} GROUP BY bidder, window_start, window_end")


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
    if query == "q11":
        return _Q11.format(session="SESSION(bid, date_time, INTERVAL '10' SECOND)")
    return _common(query, "auction % 123") or _more(
        query, "to_char(date_time, 'YYYY-MM-DD')", "to_char(date_time, 'HH24:MI')",
        f"(regexp_match(url, {_CHANNEL_ID}))[2]", lambda i: f"split_part(url, '/', {i + 3})") or _windowed(
        query,
        "TUMBLE(bid, date_time, INTERVAL '10' SECOND)",
        "HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)")


def flink_sql(query: str) -> str:
    if query == "q11":
        return _Q11.format(session="TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), "
                                   "INTERVAL '10' SECOND))")
    more = _more(
        query, "DATE_FORMAT(date_time, 'yyyy-MM-dd')", "DATE_FORMAT(date_time, 'HH:mm')",
        f"REGEXP_EXTRACT(url, {_CHANNEL_ID}, 2)", lambda i: f"SPLIT_INDEX(url, '/', {i + 2})")
    if more:
        # DAY and MINUTE are reserved words in Flink's SQL; the Nexmark
        # suite quotes them.
        return more.replace(" AS day,", " AS `day`,").replace(" AS minute,", " AS `minute`,")
    return _common(query, "MOD(auction, 123)") or _windowed(
        query,
        "TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))",
        "TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))")


def duckdb_sql(query: str) -> str:
    """The reference answer: windows as time buckets (TUMBLE: the 10-second
    bucket; HOP: the five 10-second windows, every 2 seconds, that hold each
    bid)."""
    common = _common(query, "auction % 123") or _more(
        query, "strftime(date_time, '%Y-%m-%d')", "strftime(date_time, '%H:%M')",
        f"CASE WHEN regexp_matches(url, {_CHANNEL_ID}) THEN regexp_extract(url, {_CHANNEL_ID}, 2) END",
        lambda i: f"split_part(url, '/', {i + 3})")
    if common:
        return common
    if query == "q11":
        # A bid starts a session unless the bidder's previous bid is less
        # than the gap before it; a session ends a gap after its last bid.
        return ("WITH marked AS (SELECT bidder, date_time, CASE WHEN date_time - lag(date_time) OVER w "
                "< INTERVAL 10 SECOND THEN 0 ELSE 1 END AS starts FROM bid "
                "WINDOW w AS (PARTITION BY bidder ORDER BY date_time)), "
                "numbered AS (SELECT bidder, date_time, sum(starts) OVER (PARTITION BY bidder "
                "ORDER BY date_time ROWS UNBOUNDED PRECEDING) AS session FROM marked) "
                "SELECT bidder, count(*) AS bid_count, min(date_time) AS starttime, "
                "max(date_time) + INTERVAL 10 SECOND AS endtime FROM numbered GROUP BY bidder, session")

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


def _avg(v) -> str:
    return str(int(v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v))))


CANON = {"i": _int, "d": _dec, "t": _ts, "s": _str, "a": _avg}


def canonical_row(query: str, row) -> str:
    checked = CHECKED.get(query)
    fields = []
    for (name, kind), value in zip(COLUMNS[query], row, strict=True):
        if checked is None or name in checked:
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
