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
SELECT pg_temp.err($$SELECT persist_sink.take_object_store('s3://a-bucket')$$);
RESET ROLE;

-- take_object_store(url): not an object store URL; the store not configured
SELECT pg_temp.err($$SELECT persist_sink.take_object_store('http://example.com/b')$$);
SELECT pg_temp.err($$SELECT persist_sink.take_object_store('s3://a-bucket/p')$$);
SELECT persist_sink.take_object_store(NULL) IS NULL AS strict;
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
-- and a prefix a client, proxy or store might rewrite: an empty, "." or
-- ".." segment, a byte other than letters, digits, '.', '_' and '-'
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/a/../b';
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/./b';
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/a//b';
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/a%2eb';
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/a b';
-- a shard made under "table" keeps its parts in the blob table
SELECT persist_sink.create_shard('os_table');
SELECT persist_sink.append('os_table', '{a}'::text[], '{1}'::text[], '{1}') > 0 AS appended;
-- the store is read when a shard is created and recorded in its state
ALTER SYSTEM SET persist_sink.blob_store = 's3://a-bucket/some/prefix/';
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SHOW persist_sink.blob_store;
SELECT persist_sink.create_shard('os_s3');
-- objects_owned: true in the blob table; null where the store's owner
-- marker cannot be read (here the store is not configured)
SELECT name, blob_store, parts, objects_owned FROM persist_sink.shards
WHERE name LIKE 'os\_%' ORDER BY name;
-- small batches stay inline in the state: no object is needed
SELECT persist_sink.append('os_s3', '{a}'::text[], '{1}'::text[], '{1}') AS t1 \gset
SELECT key, val, time = :t1 AS at_t1, diff FROM persist_sink.snapshot('os_s3');
-- the object store's figures before the failures below (see
-- object_store_stats at the end)
SELECT sum(requests) AS all_requests, sum(failed) AS all_failed,
	   sum(bytes) AS all_bytes, clock_timestamp() AS before_failures
FROM persist_sink.object_store_stats \gset
-- the store is not configured here: a batch that needs an object fails
-- with the store's error and writes nothing, through the sink and in the
-- caller's transaction
SELECT pg_temp.err($$SELECT persist_sink.append('os_s3', ARRAY(SELECT md5(i::text) FROM generate_series(1, 20000) i), ARRAY(SELECT 'v' FROM generate_series(1, 20000)), ARRAY(SELECT 1::bigint FROM generate_series(1, 20000)))$$);
SELECT pg_temp.err(format($$SELECT persist_sink.compare_and_append('os_s3', ARRAY(SELECT md5(i::text) FROM generate_series(1, 20000) i), ARRAY(SELECT 'v' FROM generate_series(1, 20000)), ARRAY(SELECT %s::bigint FROM generate_series(1, 20000)), ARRAY(SELECT 1::bigint FROM generate_series(1, 20000)), %s, %s)$$, :t1 + 1, :t1 + 1, :t1 + 2));
SELECT upper = :t1 + 1 AS upper_unchanged, parts FROM persist_sink.shards WHERE name = 'os_s3';
-- the request each failed append made is counted as failed, with its
-- error, and moved no bytes (at least two: the compactor's listings of the
-- store may fail meanwhile too)
SELECT sum(requests) - :all_requests >= 2 AS requests,
	   sum(failed) - :all_failed >= 2 AS failed, sum(bytes) = :all_bytes AS no_bytes
FROM persist_sink.object_store_stats;
SELECT last_failure,
	   last_failure_at BETWEEN :'before_failures' AND clock_timestamp() AS failed_since
FROM persist_sink.object_store_stats ORDER BY last_failure_at DESC NULLS LAST LIMIT 1;
SELECT * FROM persist_sink.verify('os_s3');
SELECT * FROM persist_sink.verify('os_table');
-- a shard made before keeps its store
SELECT persist_sink.append('os_table', '{b}'::text[], '{2}'::text[], '{1}') > 0 AS appended;
SELECT name, blob_store FROM persist_sink.shards WHERE name LIKE 'os\_%' ORDER BY name;
SELECT persist_sink.drop_shard('os_s3');
SELECT persist_sink.drop_shard('os_table');
ALTER SYSTEM RESET persist_sink.blob_store;
SELECT pg_reload_conf();

--
-- object_store_stats: the object store's requests, failures and latency,
-- one row per kind of request
--
SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute
WHERE attrelid = 'persist_sink.object_store_stats'::regclass AND attnum > 0
ORDER BY attnum;
SELECT kind FROM persist_sink.object_store_stats;
-- a store that refuses connections (nothing listens on port 1): each
-- attempt fails at once, and is retried until persist_sink.s3_timeout is
-- spent.  (The credentials file is written as the server's user, readable
-- by it only.)
SELECT current_setting('data_directory') || '/regress_s3_credentials' AS creds,
	   format('umask 077 && cat > %s/regress_s3_credentials',
			  current_setting('data_directory')) AS write_creds,
	   format('rm -f %s/regress_s3_credentials',
			  current_setting('data_directory')) AS rm_creds \gset
COPY (VALUES ('AKIDREGRESS'), ('regress-secret')) TO PROGRAM :'write_creds';
ALTER SYSTEM SET persist_sink.s3_endpoint = 'http://127.0.0.1:1';
ALTER SYSTEM SET persist_sink.s3_credentials_file = :'creds';
ALTER SYSTEM SET persist_sink.s3_timeout = '600ms';
SELECT pg_reload_conf();
SELECT pg_sleep(0.2);
SHOW persist_sink.s3_timeout;
SELECT requests AS put_requests, failed AS put_failed, retries AS put_retries,
	   stats_reset AS reset_at, clock_timestamp() AS t0
FROM persist_sink.object_store_stats WHERE kind = 'put' \gset
SELECT pg_temp.err($$SELECT persist_sink.check_object_store('s3://a-bucket/p')$$)
	   ~ '^58030: could not PUT object "p/persist_sink-check/[0-9a-f]+" to bucket "a-bucket": .*(connect|refused)' AS refused;
SELECT extract(epoch FROM clock_timestamp() - :'t0') AS took \gset
-- one request, failed, after retries; as long as the timeout, no longer
SELECT requests - :put_requests AS requests, failed - :put_failed AS failed,
	   retries - :put_retries >= 2 AS retried,
	   max_ms >= 500 AS max_ms_near_timeout, :took >= 0.5 AS took_the_timeout,
	   :took < 5 AS bounded, p50_ms <= max_ms AND p99_ms <= max_ms AS percentiles,
	   last_failure ~ '^could not PUT object "p/persist_sink-check/[0-9a-f]+" to bucket "a-bucket": ' AS last_failure,
	   last_failure !~ 'regress-secret|AKIDREGRESS' AS no_credentials,
	   last_failure_at > :'t0' AS failed_since, stats_reset = :'reset_at' AS not_reset
FROM persist_sink.object_store_stats WHERE kind = 'put';
-- reset: by a superuser, for every kind
SELECT persist_sink.object_store_stats_reset();
SELECT kind, requests, failed, retries, bytes, total_ms, max_ms, p50_ms, p99_ms,
	   last_failure_at, last_failure, stats_reset > :'reset_at' AS reset
FROM persist_sink.object_store_stats WHERE kind = 'put';
SELECT count(*) AS kinds_reset FROM persist_sink.object_store_stats
WHERE stats_reset > :'reset_at';
-- read as the stats view is, by members of persist_sink_reader; reset
-- only by superusers and the roles granted it
CREATE ROLE regress_os_stats IN ROLE persist_sink_reader;
CREATE ROLE regress_os_nobody;
SET ROLE regress_os_stats;
SELECT count(*) AS kinds FROM persist_sink.object_store_stats;
SELECT pg_temp.err($$SELECT persist_sink.object_store_stats_reset()$$);
SET ROLE regress_os_nobody;
SELECT pg_temp.err($$SELECT * FROM persist_sink.object_store_stats$$);
SELECT pg_temp.err($$SELECT persist_sink.object_store_stats_reset()$$);
RESET ROLE;
SELECT stats_reset AS reset_at FROM persist_sink.object_store_stats WHERE kind = 'put' \gset
GRANT EXECUTE ON FUNCTION persist_sink.object_store_stats_reset() TO regress_os_stats;
SET ROLE regress_os_stats;
SELECT pg_temp.err($$SELECT persist_sink.object_store_stats_reset()$$);
RESET ROLE;
SELECT count(*) AS kinds_reset FROM persist_sink.object_store_stats
WHERE stats_reset > :'reset_at';
REVOKE EXECUTE ON FUNCTION persist_sink.object_store_stats_reset() FROM regress_os_stats;
--
-- object_disk_cache_stats: the disk cache of objects; off by default
-- (persist_sink.object_disk_cache_size 0), so one row of zeros; read as
-- object_store_stats is
--
SHOW persist_sink.object_disk_cache_size;
SELECT pg_temp.err($$SET persist_sink.object_disk_cache_size = '1MB'$$);
SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute
WHERE attrelid = 'persist_sink.object_disk_cache_stats'::regclass AND attnum > 0
ORDER BY attnum;
SELECT * FROM persist_sink.object_disk_cache_stats;
SET ROLE regress_os_stats;
SELECT count(*) AS rows FROM persist_sink.object_disk_cache_stats;
SET ROLE regress_os_nobody;
SELECT pg_temp.err($$SELECT * FROM persist_sink.object_disk_cache_stats$$);
RESET ROLE;
DROP ROLE regress_os_stats, regress_os_nobody;
ALTER SYSTEM RESET persist_sink.s3_endpoint;
ALTER SYSTEM RESET persist_sink.s3_credentials_file;
ALTER SYSTEM RESET persist_sink.s3_timeout;
SELECT pg_reload_conf();
COPY (SELECT 1 WHERE false) TO PROGRAM :'rm_creds';
