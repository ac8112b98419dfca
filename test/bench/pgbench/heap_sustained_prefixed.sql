-- heap INSERT sustained, prefixed keys: the same arrays as
-- sink_sustained_prefixed.sql (every key behind the call's own random
-- 8-byte prefix) into an unindexed table
\set b random(1, :nbatches)
\set p random(0, 9223372036854775806)
INSERT INTO bench.sustained_heap SELECT unnest(array(SELECT int8send(:p) || k FROM unnest(keys) AS k)), unnest(vals), unnest(diffs) FROM bench.sbatches WHERE id = :b;
