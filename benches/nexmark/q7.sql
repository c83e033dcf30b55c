-- q7: the highest bid of each 10-second window.
CREATE MATERIALIZED VIEW q7 AS
SELECT b.auction, b.price, b.bidder, b.date_time
FROM bid AS b
JOIN (
    SELECT window_end, max(price) AS maxprice
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_end
) AS m ON b.price = m.maxprice
WHERE b.date_time >= m.window_end - INTERVAL '10' SECOND AND b.date_time < m.window_end
