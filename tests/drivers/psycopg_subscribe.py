"""Change streams from psycopg 3 (the extended protocol): a SUBSCRIBE cursor
in a transaction, and COPY (SUBSCRIBE ...) TO STDOUT read row by row until
cancelled. Run by tests/subscribe.rs with the server's port; exits non-zero
on any mismatch."""

import sys
import threading
import time

import psycopg

url = f"host=127.0.0.1 port={sys.argv[1]} user=weir dbname=weir"
admin = psycopg.connect(url, autocommit=True)
admin.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
admin.execute("CREATE MATERIALIZED VIEW pos AS SELECT id, v FROM t WHERE v > 0")
admin.execute("INSERT INTO t VALUES (1, 10)")
admin.execute("FLUSH")

with psycopg.connect(url) as tx:
    cur = tx.cursor()
    cur.execute("DECLARE c CURSOR FOR SUBSCRIBE pos")
    cur.execute("FETCH ALL c WITH (timeout = '0s')")
    assert [d.name for d in cur.description] == ["_epoch", "_diff", "id", "v"], cur.description
    assert cur.fetchall() == [(1, 1, 1, 10)]
    admin.execute("UPDATE t SET v = 11 WHERE id = 1")
    admin.execute("FLUSH")
    cur.execute("FETCH 10 c WITH (timeout = '5s')")
    assert cur.fetchall() == [(2, -1, 1, 10), (2, 1, 1, 11)]

reader = psycopg.connect(url, autocommit=True)
got = []
failure = []


def read():
    try:
        with reader.cursor().copy("COPY (SUBSCRIBE pos) TO STDOUT") as copy:
            for row in copy.rows():
                got.append(row)
    except psycopg.errors.QueryCanceled:
        pass
    except Exception as e:  # anything else is a failure
        failure.append(e)


thread = threading.Thread(target=read)
thread.start()
deadline = time.monotonic() + 30
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
admin.execute("INSERT INTO t VALUES (2, 5)")
admin.execute("FLUSH")
while len(got) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
reader.cancel()
thread.join(30)
assert not failure, failure
assert got == [("2", "1", "1", "11"), ("3", "1", "2", "5")], got
# The stream wrote its frames itself: after the cancel the connection is
# still in step with the protocol.
assert reader.execute("SELECT count(*) FROM pos").fetchone() == (2,)
print("psycopg: ok")
