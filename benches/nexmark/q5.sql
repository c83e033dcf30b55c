-- q5: hot items: bids per auction per sliding window.
-- Each window's counts are final once the watermark passes its end, as in
-- Flink's windowed aggregation, which emits a window when it closes.
CREATE MATERIALIZED VIEW q5 AS
SELECT auction, window_start, window_end, count(*) AS bids
FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
GROUP BY auction, window_start, window_end
EMIT ON WINDOW CLOSE
