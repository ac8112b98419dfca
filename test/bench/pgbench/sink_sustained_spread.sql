-- persist_sink sustained, spread keys: one prebuilt 1000-row batch per call
-- through the sink, every key behind 8 pseudo-random bytes of its own (a
-- hash of its position in the batch, seeded by the call's random number),
-- so a call's keys spread over the whole key space, as keys that start
-- with a hash or a user id do; keys never repeat across calls; diff 1
\set b random(1, :nbatches)
\set p random(0, 9223372036854775806)
SELECT persist_sink.append(:shard, array(SELECT int8send(hashint8extended(o, :p)) || k FROM unnest(keys) WITH ORDINALITY AS u(k, o)), vals, diffs) FROM bench.sbatches WHERE id = :b;
