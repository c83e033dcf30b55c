-- q4: average closing price per category (sum and count, so that batch and
-- incremental agree to the last digit).
CREATE MATERIALIZED VIEW q4 AS
SELECT q.category, sum(q.final) AS total, count(*) AS auctions
FROM (
    SELECT a.id, a.category, max(b.price) AS final
    FROM auction AS a JOIN bid AS b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
) AS q
GROUP BY q.category
