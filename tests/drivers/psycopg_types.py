"""psycopg 3 against weir: parameters, prepared statements, text and binary
results, transactions, error codes, and dates, intervals and floats that
come back as they went in. Run by tests/drivers.rs with the server's port;
exits non-zero on any mismatch."""

import datetime as dt
import sys

import psycopg

url = f"host=127.0.0.1 port={sys.argv[1]} user=weir dbname=weir"
UTC = dt.timezone.utc

with psycopg.connect(url, autocommit=True) as conn:
    assert conn.info.server_version == 150000, conn.info.server_version
    version = conn.execute("SELECT version()").fetchone()[0]
    assert version.startswith("PostgreSQL 15.0 (weir "), version

    conn.execute(
        "CREATE TABLE m (id BIGINT PRIMARY KEY, at TIMESTAMP, at_tz TIMESTAMPTZ, "
        "day DATE, span INTERVAL, x DOUBLE PRECISION, note VARCHAR)"
    )
    rows = [
        (1, dt.datetime(2024, 1, 1, 10, 0), dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC),
         dt.date(2024, 1, 1), dt.timedelta(days=1, hours=2), 1.0, "one"),
        (2, dt.datetime(2024, 1, 2, 0, 0, 0, 500000),
         dt.datetime(2024, 1, 2, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
         dt.date(2024, 2, 29), dt.timedelta(minutes=90), 0.1 + 0.2, None),
    ]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO m VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)

    # Text parameters in PostgreSQL's other spellings.
    conn.execute(
        "INSERT INTO m (id, at, at_tz, x) VALUES (%s, %s::timestamp, %s::timestamptz, %s)",
        (3, "Jan 3 2024 10:00", "2024-01-03T10:00:00Z", 1e20),
    )

    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        got = cur.execute("SELECT * FROM m WHERE id < 3 ORDER BY id").fetchall()
        assert got == rows, (binary, got)
        got = cur.execute("SELECT at, at_tz, x FROM m WHERE id = 3").fetchone()
        assert got == (dt.datetime(2024, 1, 3, 10), dt.datetime(2024, 1, 3, 10, tzinfo=UTC), 1e20), got

    # What a text-format result looks like on the wire.
    cur = conn.cursor()
    cur.execute("SELECT x, at_tz, span FROM m WHERE id = 1")
    raw = [cur.pgresult.get_value(0, i).decode() for i in range(3)]
    assert raw == ["1", "2024-01-01 10:00:00+00", "1 day 02:00:00"], raw

    # A prepared statement, run more than once.
    for _ in range(3):
        got = conn.execute("SELECT note FROM m WHERE id = %s", (1,), prepare=True).fetchone()
        assert got == ("one",), got

    cur = conn.execute("SELECT count(*), sum(x), 1 + 1, 1::int, now() FROM m")
    assert [d.name for d in cur.description] == ["count", "sum", "?column?", "int4", "now"]

    assert conn.execute(
        "SELECT %s::interval = %s::interval", (dt.timedelta(hours=24), dt.timedelta(days=1))
    ).fetchone() == (True,)

    # A parameter in a subquery over a catalog weir keeps empty is folded
    # away with it; the ones after it keep their numbers.
    assert conn.execute(
        "SELECT (SELECT seqstart FROM pg_catalog.pg_sequence WHERE seqstart = %s), %s::int + 1,"
        " (SELECT count(*) FROM pg_catalog.pg_sequence)",
        (5, 41),
    ).fetchone() == (None, 42, 0)
    assert conn.execute("SELECT to_regtype(%s), to_regtype(%s)", ("int8", "hstore")).fetchone() == (20, None)

    try:
        conn.execute("SELECT * FROM missing")
        raise AssertionError("no error")
    except psycopg.errors.UndefinedTable as e:
        assert e.sqlstate == "42P01"
    try:
        conn.execute("SELECT %s::timestamp", ("not a time",))
        raise AssertionError("no error")
    except psycopg.errors.InvalidDatetimeFormat as e:
        assert str(e).startswith('invalid input syntax for type timestamp: "not a time"'), e

# Transactions: a committed block is kept, a failed one is rolled back.
with psycopg.connect(url) as conn:
    with conn.transaction():
        conn.execute("INSERT INTO m (id, note) VALUES (10, 'kept')")
    try:
        with conn.transaction():
            conn.execute("SELECT 1/0")
    except psycopg.errors.DivisionByZero:
        pass
    assert conn.execute("SELECT note FROM m WHERE id = 10").fetchone() == ("kept",)
print("ok")
