"""pgcli's completion queries (pgcli.pgexecute.PGExecute, the SQL pgcli
sends to complete schemas, tables, views, columns, functions, data types
and databases) against weir. Run by tests/catalog_clients.rs with the
server's port; exits non-zero on any mismatch."""

import sys

import psycopg
from pgcli.pgexecute import PGExecute

port = int(sys.argv[1])
with psycopg.connect(f"host=127.0.0.1 port={port} user=weir dbname=weir", autocommit=True) as c:
    c.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)")
    c.execute("CREATE VIEW v AS SELECT id FROM t")
    c.execute("CREATE MATERIALIZED VIEW mv AS SELECT name, count(*) AS n FROM t GROUP BY name")

pg = PGExecute(database="weir", user="weir", password=None, host="127.0.0.1", port=port, dsn=None)

assert list(pg.schemata()) == ["information_schema", "pg_catalog", "public"], list(pg.schemata())
public = lambda rows: [r for r in rows if r[0] == "public"]
assert public(pg.tables()) == [("public", "t")], list(pg.tables())
# pgcli lists materialized views with the views.
assert public(pg.views()) == [("public", "mv"), ("public", "v")], list(pg.views())
columns = [(r[1], r[2]) for r in public(pg.table_columns())]
assert columns == [("t", "id"), ("t", "name")], columns
view_columns = [(r[1], r[2]) for r in public(pg.view_columns())]
assert view_columns == [("mv", "name"), ("mv", "n"), ("v", "id")], view_columns
assert "weir" in list(pg.databases()), list(pg.databases())
functions = {(f.schema_name, f.func_name): f for f in pg.functions()}
assert functions[("pg_catalog", "abs")].return_type, functions[("pg_catalog", "abs")]
assert list(pg.datatypes()) == [], list(pg.datatypes())
assert list(pg.foreignkeys()) == [], list(pg.foreignkeys())
assert "public" in pg.search_path(), pg.search_path()
print("pgcli completion ok")
