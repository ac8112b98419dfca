-- heap INSERT sustained, spread keys: the same arrays as
-- sink_sustained_spread.sql (every key behind 8 pseudo-random bytes of its
-- own) into an unindexed table
\set b random(1, :nbatches)
\set p random(0, 9223372036854775806)
INSERT INTO bench.sustained_heap SELECT unnest(array(SELECT int8send(hashint8extended(o, :p)) || k FROM unnest(keys) WITH ORDINALITY AS u(k, o))), unnest(vals), unnest(diffs) FROM bench.sbatches WHERE id = :b;
