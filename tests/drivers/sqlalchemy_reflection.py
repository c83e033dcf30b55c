"""SQLAlchemy 2 reflection over weir's catalog (psycopg2 or psycopg 3):
table, view and materialized view names, columns with their types, the
primary key, comments, and Table(..., autoload_with=engine). Run by
tests/catalog_clients.rs with the server's port and the driver's name;
exits non-zero on any mismatch."""

import sys

from sqlalchemy import MetaData, Table, create_engine, inspect

port, driver = sys.argv[1], sys.argv[2]
engine = create_engine(f"postgresql+{driver}://weir@127.0.0.1:{port}/weir")
with engine.connect() as c:
    c = c.execution_options(isolation_level="AUTOCOMMIT")
    for statement in [
        "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION, ts TIMESTAMP)",
        "CREATE VIEW v AS SELECT id, name FROM t WHERE price > 1",
        "CREATE MATERIALIZED VIEW mv AS SELECT name, count(*) AS n FROM t GROUP BY name",
        "COMMENT ON TABLE t IS 'prices seen'",
        "COMMENT ON COLUMN t.price IS 'in cents'",
    ]:
        c.exec_driver_sql(statement)

i = inspect(engine)
assert i.get_table_names() == ["t"], i.get_table_names()
assert i.get_view_names() == ["v"], i.get_view_names()
assert i.get_materialized_view_names() == ["mv"], i.get_materialized_view_names()

columns = [(c["name"], str(c["type"]), c["nullable"], c.get("comment")) for c in i.get_columns("t")]
assert columns == [
    ("id", "BIGINT", False, None),
    ("name", "VARCHAR", True, None),
    ("price", "DOUBLE PRECISION", True, "in cents"),
    ("ts", "TIMESTAMP", True, None),
], columns
view_columns = [(c["name"], str(c["type"])) for c in i.get_columns("mv")]
assert view_columns == [("name", "VARCHAR"), ("n", "BIGINT")], view_columns

pk = i.get_pk_constraint("t")
assert pk["constrained_columns"] == ["id"] and pk["name"] == "t_pkey", pk
assert i.get_foreign_keys("t") == [], i.get_foreign_keys("t")
assert i.get_unique_constraints("t") == [], i.get_unique_constraints("t")
assert i.get_table_comment("t") == {"text": "prices seen"}, i.get_table_comment("t")

table = Table("t", MetaData(), autoload_with=engine)
assert [c.name for c in table.columns] == ["id", "name", "price", "ts"], table.columns
assert [c.name for c in table.primary_key] == ["id"], table.primary_key
view = Table("v", MetaData(), autoload_with=engine)
assert [c.name for c in view.columns] == ["id", "name"], view.columns
print("sqlalchemy reflection ok")
