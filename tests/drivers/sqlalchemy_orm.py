"""SQLAlchemy 2 against weir: connect (which reads version()), a Core
query with bound parameters, and ORM writes and queries through a mapped
class. Run by tests/drivers.rs with the server's port and the driver
("psycopg2" or "psycopg"); exits non-zero on any mismatch."""

import datetime as dt
import sys

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

port, driver = sys.argv[1], sys.argv[2]
engine = sa.create_engine(f"postgresql+{driver}://weir@127.0.0.1:{port}/weir")


class Base(DeclarativeBase):
    pass


class Reading(Base):
    __tablename__ = "readings"
    id: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True)
    sensor: Mapped[str] = mapped_column(sa.String)
    at: Mapped[dt.datetime] = mapped_column(sa.DateTime)
    value: Mapped[float] = mapped_column(sa.Float)


with engine.connect() as conn:
    assert conn.dialect.server_version_info[:2] == (15, 0), conn.dialect.server_version_info
    # Created in SQL: metadata.create_all reflects the catalog first.
    conn.execute(sa.text(
        "CREATE TABLE readings (id BIGINT PRIMARY KEY, sensor VARCHAR, at TIMESTAMP, value DOUBLE PRECISION)"
    ))
    conn.commit()

with Session(engine) as session:
    session.add_all([
        Reading(id=1, sensor="a", at=dt.datetime(2024, 1, 1, 10), value=1.0),
        Reading(id=2, sensor="b", at=dt.datetime(2024, 1, 1, 11, 30), value=2.5),
        Reading(id=3, sensor="a", at=dt.datetime(2024, 1, 2), value=4.0),
    ])
    session.commit()

with engine.connect() as conn:
    table = Reading.__table__
    query = (
        sa.select(table.c.sensor, sa.func.count().label("n"), sa.func.sum(table.c.value).label("total"))
        .where(table.c.at >= sa.bindparam("since"))
        .group_by(table.c.sensor)
        .order_by(table.c.sensor)
    )
    got = conn.execute(query, {"since": dt.datetime(2024, 1, 1, 11)}).all()
    assert [tuple(r) for r in got] == [("a", 1, 4.0), ("b", 1, 2.5)], got
    got = conn.execute(sa.text("SELECT count(*) FROM readings WHERE at < :t"), {"t": "2024-01-02"})
    assert got.keys() == ["count"] and got.scalar() == 2

with Session(engine) as session:
    found = session.scalars(
        sa.select(Reading).where(Reading.sensor == "a").order_by(Reading.at)
    ).all()
    assert [(r.id, r.at, r.value) for r in found] == [
        (1, dt.datetime(2024, 1, 1, 10), 1.0),
        (3, dt.datetime(2024, 1, 2), 4.0),
    ], found
    reading = session.get(Reading, 2)
    assert reading is not None and reading.sensor == "b"
    reading.value = 3.5
    session.commit()
    assert session.scalar(sa.select(Reading.value).where(Reading.id == 2)) == 3.5
print("ok")
