-- The objects the psql meta-command test describes, on weir and on PostgreSQL 15.
CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION, ts TIMESTAMP);
CREATE VIEW v AS SELECT id, name FROM t WHERE price > 1;
CREATE MATERIALIZED VIEW mv AS SELECT name, count(*) AS n FROM t GROUP BY name;
COMMENT ON TABLE t IS 'prices seen';
COMMENT ON COLUMN t.price IS 'in cents';
COMMENT ON MATERIALIZED VIEW mv IS 'rows per name';
