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
