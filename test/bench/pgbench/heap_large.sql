-- heap INSERT large load: each transaction inserts the next prebuilt chunk
SELECT nextval('bench.chunk_seq') AS n \gset
INSERT INTO bench.heap_target SELECT unnest(keys), unnest(vals), unnest(diffs) FROM bench.chunks WHERE id = :n;
