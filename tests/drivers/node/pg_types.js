// node-postgres (the extended protocol, text parameters of unknown type)
// against weir: run by tests/drivers.rs with the server's port; exits
// non-zero on any mismatch.
const assert = require("node:assert/strict");
const { Client, types } = require("pg");

// Timestamps without a zone as text, to compare them without the local zone.
types.setTypeParser(1114, (text) => text);

async function main() {
  const client = new Client({
    host: "127.0.0.1",
    port: Number(process.argv[2]),
    user: "weir",
    database: "weir",
  });
  await client.connect();
  const version = await client.query("SELECT version()");
  assert.match(version.rows[0].version, /^PostgreSQL 15\.\d+ \(weir /);

  await client.query(
    "CREATE TABLE events (id BIGINT PRIMARY KEY, at TIMESTAMP, at_tz TIMESTAMPTZ, score DOUBLE PRECISION, note VARCHAR)"
  );
  // PostgreSQL reads a date alone as midnight; node-postgres sends a Date
  // as ISO text with the local offset.
  await client.query("INSERT INTO events VALUES ($1, $2, $3, $4, $5)", [
    1, "2024-01-01", new Date("2024-01-01T10:00:00Z"), 1.5, "first",
  ]);
  await client.query("INSERT INTO events VALUES ($1, $2, $3, $4, $5)", [
    2, "2024-01-01 10:00", "2024-01-01T12:00:00+02:00", 1e20, null,
  ]);

  const rows = await client.query(
    "SELECT id, at, at_tz, score, note FROM events WHERE at >= $1 ORDER BY id",
    ["Jan 1 2024"]
  );
  assert.deepEqual(
    rows.rows.map((r) => [Number(r.id), r.at, r.at_tz.toISOString(), r.score, r.note]),
    [
      [1, "2024-01-01 00:00:00", "2024-01-01T10:00:00.000Z", 1.5, "first"],
      [2, "2024-01-01 10:00:00", "2024-01-01T10:00:00.000Z", 1e20, null],
    ]
  );

  // A named prepared statement, run twice.
  const prepared = { name: "by_id", text: "SELECT note FROM events WHERE id = $1" };
  assert.deepEqual((await client.query({ ...prepared, values: [1] })).rows, [{ note: "first" }]);
  assert.deepEqual((await client.query({ ...prepared, values: [2] })).rows, [{ note: null }]);

  const names = await client.query("SELECT count(*), max(score), 1 + 1, now() FROM events");
  assert.deepEqual(
    names.fields.map((f) => f.name),
    ["count", "max", "?column?", "now"]
  );

  // Errors carry PostgreSQL's SQLSTATE.
  await assert.rejects(client.query("SELECT * FROM missing"), { code: "42P01" });
  await assert.rejects(
    client.query("INSERT INTO events (id, at) VALUES ($1, $2)", [3, "not a time"]),
    { code: "22007", message: 'invalid input syntax for type timestamp: "not a time"' }
  );

  await client.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
