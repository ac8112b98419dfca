-- persist_sink: one prebuilt 1000-row batch per transaction through the sink
\set b random(1, :nbatches)
SELECT persist_sink.append(:shard, keys, vals, diffs) FROM bench.batches WHERE id = :b;
