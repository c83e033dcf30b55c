-- q0: pass-through.
CREATE MATERIALIZED VIEW q0 AS
SELECT auction, bidder, price, date_time FROM bid
