-- q7_tumble: the windowed aggregate inside q7, the highest bid of each
-- 10-second window, emitted once when the window closes, as Flink's
-- windowed aggregation does.
CREATE MATERIALIZED VIEW q7_tumble AS
SELECT window_end, max(price) AS maxprice
FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
GROUP BY window_end
EMIT ON WINDOW CLOSE
