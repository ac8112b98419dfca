--
-- object_store: check_object_store(url)'s errors that need no object store
-- (test/t/036_object_store.pl runs it against a real one): a URL that is
-- not s3://bucket[/prefix], the settings not made, and the privilege.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/err.psql

-- not an object store URL
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('http://example.com/b')$$);
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://')$$);
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://ab')$$);
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://Upper')$$);
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://under_score/x')$$);
SELECT persist_sink.check_object_store(NULL) IS NULL AS strict;

-- the settings: empty by default, so the store is not configured
SELECT name, setting, context FROM pg_settings
WHERE name LIKE 'persist\_sink.s3\_%' ORDER BY name;
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://a-bucket/a/prefix/')$$);
-- set in postgresql.conf or ALTER SYSTEM only (reload)
SET persist_sink.s3_timeout = '1s';

-- not for PUBLIC, nor for the writer and reader roles
CREATE ROLE regress_os_nobody IN ROLE persist_sink_writer, persist_sink_reader;
SET ROLE regress_os_nobody;
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://a-bucket')$$);
RESET ROLE;
DROP ROLE regress_os_nobody;

--
-- persist_sink.blob_store: where new shards keep their parts
--
SHOW persist_sink.blob_store;
SELECT context FROM pg_settings WHERE name = 'persist_sink.blob_store';
-- set in postgresql.conf or ALTER SYSTEM only (reload)
SET persist_sink.blob_store = 's3://a-bucket';
-- refused unless "table" or an object store's URL
ALTER SYSTEM SET persist_sink.blob_store = 'disk';
ALTER SYSTEM SET persist_sink.blob_store = 's3://UP';
-- a shard made under "table" keeps its parts in the blob table
SELECT persist_sink.create_shard('os_table');
SELECT persist_sink.append('os_table', '{a}'::text[], '{1}'::text[], '{1}') > 0 AS appended;
-- the store is read when a shard is created and recorded in its state
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/some/prefix/';
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SHOW persist_sink.blob_store;
SELECT persist_sink.create_shard('os_s3');
SELECT name, blob_store, parts FROM persist_sink.shards
WHERE name LIKE 'os\_%' ORDER BY name;
-- small batches stay inline in the state: no object is needed
SELECT persist_sink.append('os_s3', '{a}'::text[], '{1}'::text[], '{1}') AS t1 \gset
SELECT key, val, time = :t1 AS at_t1, diff FROM persist_sink.snapshot('os_s3');
-- the store is not configured here: a batch that needs an object fails
-- with the store's error and writes nothing, through the sink and in the
-- caller's transaction
SELECT pg_temp.err($$SELECT persist_sink.append('os_s3', ARRAY(SELECT md5(i::text) FROM generate_series(1, 20000) i), ARRAY(SELECT 'v' FROM generate_series(1, 20000)), ARRAY(SELECT 1::bigint FROM generate_series(1, 20000)))$$);
SELECT pg_temp.err(format($$SELECT persist_sink.compare_and_append('os_s3', ARRAY(SELECT md5(i::text) FROM generate_series(1, 20000) i), ARRAY(SELECT 'v' FROM generate_series(1, 20000)), ARRAY(SELECT %s::bigint FROM generate_series(1, 20000)), ARRAY(SELECT 1::bigint FROM generate_series(1, 20000)), %s, %s)$$, :t1 + 1, :t1 + 1, :t1 + 2));
SELECT upper = :t1 + 1 AS upper_unchanged, parts FROM persist_sink.shards WHERE name = 'os_s3';
SELECT * FROM persist_sink.verify('os_s3');
SELECT * FROM persist_sink.verify('os_table');
-- a shard made before keeps its store
SELECT persist_sink.append('os_table', '{b}'::text[], '{2}'::text[], '{1}') > 0 AS appended;
SELECT name, blob_store FROM persist_sink.shards WHERE name LIKE 'os\_%' ORDER BY name;
SELECT persist_sink.drop_shard('os_s3');
SELECT persist_sink.drop_shard('os_table');
ALTER SYSTEM RESET persist_sink.blob_store;
SELECT pg_reload_conf();
