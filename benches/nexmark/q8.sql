-- q8: people who opened auctions in the same 10-second window they joined,
-- with how many (the count keeps the planner from a semi join).
CREATE MATERIALIZED VIEW q8 AS
SELECT p.id, p.name, p.window_start, a.auctions
FROM (
    SELECT id, name, window_start, window_end
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
) AS p
JOIN (
    SELECT seller, window_start, window_end, count(*) AS auctions
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
) AS a ON p.id = a.seller AND p.window_start = a.window_start AND p.window_end = a.window_end
