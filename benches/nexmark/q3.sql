-- q3: local item suggestion (a regular join of persons and auctions, filtered).
CREATE MATERIALIZED VIEW q3 AS
SELECT p.name, p.city, p.state, a.id
FROM auction AS a JOIN person AS p ON a.seller = p.id
WHERE a.category = 10 AND (p.state = 'or' OR p.state = 'id' OR p.state = 'ca')
