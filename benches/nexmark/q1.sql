-- q1: currency conversion (dollars to euros, in integer cents).
CREATE MATERIALIZED VIEW q1 AS
SELECT auction, bidder, price * 908 / 1000 AS price, date_time FROM bid
