-- heap INSERT: one prebuilt 1000-row batch per transaction into an unindexed table
\set b random(1, :nbatches)
INSERT INTO bench.heap_target SELECT unnest(keys), unnest(vals), unnest(diffs) FROM bench.batches WHERE id = :b;
