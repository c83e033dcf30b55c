"""The SQL Grafana's PostgreSQL data source sends (Grafana 10 and 11,
postgresMetaQuery.ts and its macros) for a time-series panel over a view:
the table and column pickers' metadata queries and the panel's query with
$__timeGroupAlias and $__timeFilter expanded. psycopg 3 with prepared
statements, the extended protocol, like Grafana's pgx. Run by
tests/catalog_clients.rs with the server's port; exits non-zero on any
mismatch."""

import sys
from datetime import datetime

import psycopg

url = f"host=127.0.0.1 port={sys.argv[1]} user=weir dbname=weir"
c = psycopg.connect(url, autocommit=True)
c.execute("CREATE TABLE readings (ts TIMESTAMP, sensor VARCHAR, value DOUBLE PRECISION) APPEND ONLY")
c.execute("CREATE VIEW per_sensor AS SELECT ts, sensor, value FROM readings")
c.execute(
    "INSERT INTO readings VALUES "
    "('2024-01-01 00:00:10', 'a', 1.0), ('2024-01-01 00:00:50', 'a', 3.0), "
    "('2024-01-01 00:01:30', 'a', 5.0), ('2024-01-01 00:05:00', 'b', 7.0)"
)
c.execute("FLUSH")


def rows(sql):
    return c.execute(sql, prepare=True).fetchall()


# Health check.
assert rows("SELECT 1") == [(1,)]

schema_constraint = """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
        FROM
            generate_series(
                array_lower(string_to_array(current_setting('search_path'),','),1),
                array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""

# The table picker: tables and views of the schemas on the search path.
tables = rows(
    """select quote_ident(table_name) as "table" from information_schema.tables
    where quote_ident(table_schema) not in ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
      and """
    + schema_constraint
)
assert sorted(tables) == [("per_sensor",), ("readings",)], tables

# The column picker, which finds the time column by its type.
columns = rows(
    """select quote_ident(column_name) as "column", data_type as "type"
    from information_schema.columns
    where quote_ident(table_name) = 'per_sensor' and """
    + schema_constraint
)
assert columns == [
    ("ts", "timestamp without time zone"),
    ("sensor", "character varying"),
    ("value", "double precision"),
], columns

# The panel: $__timeGroupAlias(ts, 1m) and $__timeFilter(ts) expanded.
series = rows(
    """SELECT
  floor(extract(epoch from ts)/60)*60 AS "time",
  avg(value) AS "value"
FROM per_sensor
WHERE
  ts BETWEEN '2024-01-01T00:00:00Z' AND '2024-01-01T00:03:00Z'
GROUP BY 1
ORDER BY 1"""
)
start = datetime(2024, 1, 1).timestamp()
assert [(float(t) - start, v) for t, v in series] == [(0.0, 2.0), (60.0, 5.0)], series

# $__time(ts) with a metric column, as the table view sends it.
table_view = rows(
    """SELECT ts AS "time", sensor AS metric, value
FROM per_sensor
WHERE ts BETWEEN '2024-01-01T00:00:00Z' AND '2024-01-01T01:00:00Z'
ORDER BY 1"""
)
assert [r[1] for r in table_view] == ["a", "a", "a", "b"], table_view
print("grafana queries ok")
