-- persist_sink sustained, prefixed keys: one prebuilt 1000-row batch per
-- call through the sink, every key behind the call's own random 8-byte
-- prefix (the keys of a call share it and sort together; keys never repeat
-- across calls), diff 1
\set b random(1, :nbatches)
\set p random(0, 9223372036854775806)
SELECT persist_sink.append(:shard, array(SELECT int8send(:p) || k FROM unnest(keys) AS k), vals, diffs) FROM bench.sbatches WHERE id = :b;
