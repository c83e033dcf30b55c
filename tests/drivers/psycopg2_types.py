"""psycopg2 against weir (client-side parameters, the simple protocol):
parameters, transactions, error codes, and dates, intervals and floats
that come back as they went in. Run by tests/drivers.rs with the server's
port; exits non-zero on any mismatch."""

import datetime as dt
import sys

import psycopg2
import psycopg2.errors

conn = psycopg2.connect(host="127.0.0.1", port=sys.argv[1], user="weir", dbname="weir")
assert conn.server_version == 150000, conn.server_version
conn.autocommit = True
cur = conn.cursor()
cur.execute("SELECT version()")
assert cur.fetchone()[0].startswith("PostgreSQL 15.0 (weir "), "version()"

cur.execute(
    "CREATE TABLE m (id BIGINT PRIMARY KEY, at TIMESTAMP, at_tz TIMESTAMPTZ, "
    "day DATE, span INTERVAL, x DOUBLE PRECISION, note VARCHAR)"
)
UTC = dt.timezone.utc
rows = [
    (1, dt.datetime(2024, 1, 1, 10, 0), dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC),
     dt.date(2024, 1, 1), dt.timedelta(days=1, hours=2), 1.0, "one"),
    (2, dt.datetime(2024, 1, 2, 0, 0, 0, 500000), dt.datetime(2024, 1, 2, 10, tzinfo=UTC),
     dt.date(2024, 2, 29), dt.timedelta(minutes=90), 0.1 + 0.2, None),
]
cur.executemany("INSERT INTO m VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)
cur.execute("INSERT INTO m (id, at, x) VALUES (3, %s, %s)", ("2024-01-03", float("inf")))

cur.execute("SELECT * FROM m WHERE id < 3 ORDER BY id")
got = cur.fetchall()
assert [r[:2] + r[3:] for r in got] == [r[:2] + r[3:] for r in rows], got
# psycopg2 reads the offset into a fixed zone; compare the instants.
assert [r[2] for r in got] == [r[2] for r in rows], got
cur.execute("SELECT at, x FROM m WHERE id = 3")
assert cur.fetchone() == (dt.datetime(2024, 1, 3), float("inf"))

cur.execute("SELECT count(*), max(x), 1 + 1 FROM m")
assert [d.name for d in cur.description] == ["count", "max", "?column?"], cur.description

try:
    cur.execute("SELECT * FROM missing")
    raise AssertionError("no error")
except psycopg2.errors.UndefinedTable as e:
    assert e.pgcode == "42P01"
try:
    cur.execute("SELECT 'not a time'::timestamp")
    raise AssertionError("no error")
except psycopg2.errors.InvalidDatetimeFormat as e:
    assert e.pgcode == "22007"

# Transactions: psycopg2 opens one before the first statement.
conn.autocommit = False
cur = conn.cursor()
cur.execute("INSERT INTO m (id, note) VALUES (10, 'kept')")
conn.commit()
try:
    cur.execute("SELECT 1/0")
except psycopg2.errors.DivisionByZero:
    conn.rollback()
cur.execute("SELECT note FROM m WHERE id = 10")
assert cur.fetchone() == ("kept",)
conn.close()
print("ok")
