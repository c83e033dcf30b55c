"""asyncpg against weir (the extended protocol, binary throughout):
parameters, prepared statements, transactions, error codes, and dates,
intervals and floats that come back as they went in. Run by
tests/drivers.rs with the server's port; exits non-zero on any mismatch."""

import asyncio
import datetime as dt
import sys

import asyncpg

UTC = dt.timezone.utc


async def main():
    conn = await asyncpg.connect(host="127.0.0.1", port=int(sys.argv[1]), user="weir", database="weir")
    assert conn.get_server_version()[:2] == (15, 0), conn.get_server_version()
    version = await conn.fetchval("SELECT version()")
    assert version.startswith("PostgreSQL 15.0 (weir "), version

    await conn.execute(
        "CREATE TABLE m (id BIGINT PRIMARY KEY, at TIMESTAMP, at_tz TIMESTAMPTZ, "
        "day DATE, span INTERVAL, x DOUBLE PRECISION, note VARCHAR)"
    )
    rows = [
        (1, dt.datetime(2024, 1, 1, 10, 0), dt.datetime(2024, 1, 1, 10, 0, tzinfo=UTC),
         dt.date(2024, 1, 1), dt.timedelta(days=1, hours=2), 1.0, "one"),
        (2, dt.datetime(2024, 1, 2, 0, 0, 0, 500000), dt.datetime(2024, 1, 2, 10, tzinfo=UTC),
         dt.date(2024, 2, 29), dt.timedelta(minutes=90), 0.1 + 0.2, None),
    ]
    await conn.executemany("INSERT INTO m VALUES ($1, $2, $3, $4, $5, $6, $7)", rows)
    got = [tuple(r) for r in await conn.fetch("SELECT * FROM m ORDER BY id")]
    assert got == rows, got

    # A prepared statement, run more than once.
    by_id = await conn.prepare("SELECT note FROM m WHERE id = $1")
    assert await by_id.fetchval(1) == "one"
    assert await by_id.fetchval(2) is None
    assert [a.name for a in by_id.get_attributes()] == ["note"]

    names = await conn.prepare("SELECT count(*), sum(x), 1 + 1, now() FROM m")
    assert [a.name for a in names.get_attributes()] == ["count", "sum", "?column?", "now"]

    assert await conn.fetchval(
        "SELECT $1::interval = $2::interval", dt.timedelta(hours=24), dt.timedelta(days=1)
    )

    try:
        await conn.fetch("SELECT * FROM missing")
        raise AssertionError("no error")
    except asyncpg.exceptions.UndefinedTableError as e:
        assert e.sqlstate == "42P01"
    try:
        await conn.fetch("SELECT 'not a time'::timestamp")
        raise AssertionError("no error")
    except asyncpg.exceptions.InvalidDatetimeFormatError as e:
        assert e.sqlstate == "22007"

    async with conn.transaction():
        await conn.execute("INSERT INTO m (id, note) VALUES (10, 'kept')")
    try:
        async with conn.transaction():
            await conn.fetch("SELECT 1/0")
    except asyncpg.exceptions.DivisionByZeroError:
        pass
    assert await conn.fetchval("SELECT note FROM m WHERE id = 10") == "kept"
    await conn.close()


asyncio.run(main())
print("ok")
