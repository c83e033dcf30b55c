-- q5: hot items: bids per auction per sliding window.
CREATE MATERIALIZED VIEW q5 AS
SELECT auction, window_start, window_end, count(*) AS bids
FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
GROUP BY auction, window_start, window_end
