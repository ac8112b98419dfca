/* persist_sink--0.16.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION persist_sink" to load this file. \quit

-- Every function runs as its caller: none runs with its owner's rights.  The C code
-- checks that the caller has the rights of persist_sink_writer or
-- persist_sink_reader, and takes the storage tables' owner's rights only
-- around its own statements on those tables, so no code a user can define
-- (type I/O, domain checks, operators, casts) ever runs with the owner's
-- rights.

-- Roles that govern who may write and who may read shards.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'persist_sink_writer') THEN
		CREATE ROLE persist_sink_writer NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'persist_sink_reader') THEN
		CREATE ROLE persist_sink_reader NOLOGIN;
	END IF;
END
$$;

GRANT USAGE ON SCHEMA @extschema@ TO persist_sink_writer, persist_sink_reader;

-- Storage: parts, and one consensus row per shard.  Reached only through
-- the functions below.
-- A part's bytes are cut into chunks of 7864 bytes (the last one shorter),
-- one row each, numbered from 0 and kept in the row itself: a row of the
-- longest key and a whole chunk fills a heap page.  (TOAST would cut them
-- into four times as many rows of 2 kB.)  Parts are already compressed.
CREATE TABLE blob (
	key text COLLATE "C" NOT NULL,
	chunk integer NOT NULL,
	data bytea NOT NULL,
	PRIMARY KEY (key, chunk)
);
ALTER TABLE blob ALTER COLUMN key SET STORAGE PLAIN,
	ALTER COLUMN data SET STORAGE PLAIN;

CREATE TABLE consensus (
	shard text PRIMARY KEY,
	seqno bigint NOT NULL,
	state bytea NOT NULL
);
-- state is the shard's last rollup: its whole state at some seqno up to the
-- row's seqno (the head).  It is rewritten only now and then, and holds
-- compressed parts: do not spend CPU compressing it again.
ALTER TABLE consensus ALTER COLUMN state SET STORAGE EXTERNAL;

-- The log of state diffs: what each compare-and-swap after the rollup
-- changed.  A CaS moves the consensus row's seqno from s to s + 1 and
-- inserts diff s + 1, in one transaction; the shard's state at its head is
-- the rollup with every later diff applied in order.
CREATE TABLE consensus_diff (
	shard text NOT NULL,
	seqno bigint NOT NULL,
	diff bytea NOT NULL,
	PRIMARY KEY (shard, seqno)
);
ALTER TABLE consensus_diff ALTER COLUMN diff SET STORAGE EXTERNAL;

-- The keys of committed appends (idempotency_key), written in the
-- transaction of the interval that committed them.
CREATE TABLE idempotency (
	shard text COLLATE "C" NOT NULL,
	key text COLLATE "C" NOT NULL,
	time bigint NOT NULL,
	digest bytea NOT NULL,
	written_at timestamptz NOT NULL,
	PRIMARY KEY (shard, key)
);
CREATE INDEX idempotency_written_at ON idempotency (written_at);

-- Each shard's owner (the role that created it) and the privileges granted
-- on it: a (append) and r (read), as grant_shard() and revoke_shard() set
-- them.  A shard without a row (made before 0.9, restored from an older
-- dump, replicated from a publisher that does not publish this table) is
-- owned by this table's owner, append granted to persist_sink_writer and
-- read to persist_sink_reader.
CREATE TABLE shard_acl (
	shard text PRIMARY KEY,
	owner regrole NOT NULL,
	acl aclitem[] NOT NULL
);

SELECT pg_catalog.pg_extension_config_dump('blob', '');
SELECT pg_catalog.pg_extension_config_dump('consensus', '');
SELECT pg_catalog.pg_extension_config_dump('consensus_diff', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency', '');
SELECT pg_catalog.pg_extension_config_dump('shard_acl', '');
REVOKE ALL ON blob, consensus, consensus_diff, idempotency, shard_acl FROM PUBLIC;

-- Shards

CREATE FUNCTION create_shard(name text, row_type regtype DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_create_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION drop_shard(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_drop_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION shard_upper(shard text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_shard_upper'
LANGUAGE C STABLE;

CREATE FUNCTION shard_since(shard text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_shard_since'
LANGUAGE C STABLE;

CREATE FUNCTION downgrade_since(shard text, since bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_downgrade_since'
LANGUAGE C VOLATILE;

CREATE FUNCTION shard_info(
	OUT name text, OUT seqno bigint, OUT upper bigint, OUT since bigint,
	OUT batches bigint, OUT parts bigint, OUT inline_bytes bigint,
	OUT blob_bytes bigint, OUT updates bigint, OUT debt_batches bigint,
	OUT runs bigint, OUT blob_store text, OUT objects_owned boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_shard_info'
LANGUAGE C STABLE;

-- shard_info() and each shard's owner and privileges (blob_store, new in
-- 0.13, then objects_owned, new in 0.16, last)
CREATE VIEW shards AS
SELECT i.name, i.seqno, i.upper, i.since, i.batches, i.parts, i.inline_bytes,
	   i.blob_bytes, i.updates, i.debt_batches, i.runs,
	   COALESCE(a.owner, d.owner) AS owner,
	   COALESCE(a.acl, d.acl) AS privileges,
	   i.blob_store, i.objects_owned
FROM shard_info() i
	 LEFT JOIN shard_acl a ON a.shard OPERATOR(pg_catalog.=) i.name
	 CROSS JOIN (SELECT relowner::regrole AS owner,
						ARRAY[pg_catalog.makeaclitem(pg_catalog.to_regrole('persist_sink_writer'), relowner, 'INSERT', false),
							  pg_catalog.makeaclitem(pg_catalog.to_regrole('persist_sink_reader'), relowner, 'SELECT', false)] AS acl
				 FROM pg_catalog.pg_class
				 WHERE oid = '@extschema@.consensus'::regclass) d;

CREATE FUNCTION grant_shard(shard text, role text, privilege text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_grant_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION revoke_shard(shard text, role text, privilege text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_revoke_shard'
LANGUAGE C VOLATILE;

CREATE FUNCTION alter_shard_owner(shard text, new_owner text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_alter_shard_owner'
LANGUAGE C VOLATILE;

CREATE FUNCTION batches(shard text)
RETURNS TABLE(lower bigint, upper bigint, since bigint, parts int,
			  updates bigint, encoded_bytes bigint, inline boolean)
AS 'MODULE_PATHNAME', 'ps_batches'
LANGUAGE C STABLE;

-- Writes

CREATE FUNCTION compare_and_append(shard text, keys bytea[], vals bytea[],
								   times bigint[], diffs bigint[],
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append'
LANGUAGE C VOLATILE;

CREATE FUNCTION compare_and_append(shard text, keys text[], vals text[],
								   times bigint[], diffs bigint[],
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append'
LANGUAGE C VOLATILE;

-- Writes through the sink, with optional idempotency keys

CREATE FUNCTION append(shard text, keys bytea[], vals bytea[], diffs bigint[],
					   idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append'
LANGUAGE C VOLATILE;

CREATE FUNCTION append(shard text, keys text[], vals text[], diffs bigint[],
					   idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append'
LANGUAGE C VOLATILE;

-- Untyped arguments (a literal '{a,b}', a driver's unknown-typed $1):
-- PostgreSQL resolves an unknown argument to the string category when a
-- candidate takes one there, so these take them, as text arrays, where
-- the text[] and bytea[] overloads alone would be ambiguous (42725).
-- Typed arrays still go to those overloads.
CREATE FUNCTION compare_and_append(shard text, keys text, vals text,
								   times text, diffs text,
								   expected_upper bigint, new_upper bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$SELECT @extschema@.compare_and_append($1, $2::pg_catalog.text[], $3::pg_catalog.text[],
	$4::pg_catalog.int8[], $5::pg_catalog.int8[], $6, $7)$$;

CREATE FUNCTION append(shard text, keys text, vals text, diffs text,
					   idempotency_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$SELECT @extschema@.append($1, $2::pg_catalog.text[], $3::pg_catalog.text[],
	$4::pg_catalog.int8[], $5)$$;

CREATE FUNCTION wait_upper(shard text, past bigint, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_wait_upper'
LANGUAGE C VOLATILE;
-- Reads

CREATE FUNCTION snapshot(shard text, as_of bigint DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_snapshot'
LANGUAGE C STABLE
ROWS 1000;

CREATE FUNCTION listen(shard text, as_of bigint, until bigint DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_listen'
LANGUAGE C STABLE
ROWS 1000;

-- Maintenance

CREATE FUNCTION compact(shard text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_compact'
LANGUAGE C VOLATILE;

CREATE FUNCTION verify(shard text)
RETURNS TABLE(problem text)
AS 'MODULE_PATHNAME', 'ps_verify'
LANGUAGE C STABLE;

-- Observability

CREATE FUNCTION stats(
	OUT shard text, OUT appends bigint, OUT updates bigint,
	OUT shared_writes bigint, OUT own_writes bigint, OUT parts_written bigint,
	OUT blob_puts bigint, OUT blob_bytes bigint, OUT inline_batches bigint,
	OUT state_bytes bigint, OUT cas_attempts bigint, OUT cas_mismatches bigint,
	OUT compactions bigint, OUT compacted_updates bigint,
	OUT slowed_ms bigint, OUT stalled_ms bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_stats'
LANGUAGE C VOLATILE;

CREATE VIEW stats AS SELECT * FROM stats() ORDER BY shard;

CREATE FUNCTION compaction_failures(
	OUT shard text, OUT failures bigint, OUT last_failed_at timestamptz,
	OUT last_error text, OUT failing_in_a_row integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_compaction_failures'
LANGUAGE C VOLATILE;

-- One row per shard whose background compaction failed, as pg_stat_archiver
CREATE VIEW compaction_failures AS
SELECT * FROM compaction_failures() ORDER BY shard;

CREATE FUNCTION compaction_progress(
	OUT pid integer, OUT datid oid, OUT shard text, OUT command text,
	OUT phase text, OUT started_at timestamptz, OUT batches integer,
	OUT updates_merged bigint, OUT updates_total bigint, OUT bytes_written bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_compaction_progress'
LANGUAGE C VOLATILE;

-- One row per merge in progress, in every database, as pg_stat_progress_*
CREATE VIEW compaction_progress AS
SELECT p.pid, p.datid, d.datname, p.shard, p.command, p.phase, p.started_at,
	   p.batches, p.updates_merged, p.updates_total, p.bytes_written
FROM compaction_progress() p
	 LEFT JOIN pg_catalog.pg_database d ON d.oid = p.datid;

CREATE FUNCTION sink_memory(OUT budget_bytes bigint, OUT small_bytes bigint,
							OUT part_bytes bigint, OUT intervals int,
							OUT blocked_intervals int)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_sink_memory'
LANGUAGE C VOLATILE STRICT;
CREATE FUNCTION stats_info(OUT entries integer, OUT stats_max integer,
						   OUT uncounted bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_stats_info'
LANGUAGE C VOLATILE;

CREATE FUNCTION stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'ps_stats_reset'
LANGUAGE C VOLATILE;

-- Typed rows

CREATE FUNCTION append_rows(shard text, rows anyarray, diffs bigint[] DEFAULT NULL,
							idempotency_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_append_rows'
LANGUAGE C VOLATILE;

CREATE FUNCTION compare_and_append_rows(shard text, rows anyarray, times bigint[],
										diffs bigint[], expected_upper bigint,
										new_upper bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_compare_and_append_rows'
LANGUAGE C VOLATILE;

CREATE FUNCTION snapshot_rows(shard text, row_type anyelement, as_of bigint DEFAULT NULL)
RETURNS SETOF anyelement
AS 'MODULE_PATHNAME', 'ps_snapshot_rows'
LANGUAGE C STABLE
ROWS 1000;

CREATE FUNCTION listen_rows(shard text, row_type anyelement, as_of bigint,
							until bigint DEFAULT NULL)
RETURNS TABLE("row" anyelement, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_listen_rows'
LANGUAGE C STABLE
ROWS 1000;

-- Privileges: nothing for PUBLIC.  Both roles may call every function but
-- stats_reset(); each function checks the role it needs (so a reader
-- calling append() is told it lacks persist_sink_writer) and then the
-- shard's owner and grants.

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @extschema@ FROM PUBLIC;
REVOKE ALL ON shards, stats, compaction_progress, compaction_failures FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	create_shard(text, regtype), drop_shard(text), downgrade_since(text, bigint),
	compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint),
	compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint),
	compare_and_append(text, text, text, text, text, bigint, bigint),
	append(text, bytea[], bytea[], bigint[], text), append(text, text[], text[], bigint[], text),
	append(text, text, text, text, text),
	compact(text), shard_upper(text), shard_since(text),
	append_rows(text, anyarray, bigint[], text),
	compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint),
	wait_upper(text, bigint, interval),
	shard_info(), batches(text),
	snapshot(text, bigint), listen(text, bigint, bigint), verify(text), stats(),
	snapshot_rows(text, anyelement, bigint), listen_rows(text, anyelement, bigint, bigint),
	sink_memory(), stats_info(), compaction_progress(), compaction_failures(),
	grant_shard(text, text, text), revoke_shard(text, text, text),
	alter_shard_owner(text, text)
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON shards, stats, compaction_progress, compaction_failures TO persist_sink_reader;

-- What \df+, \dv+ and \dt+ say about each object
COMMENT ON FUNCTION @extschema@.create_shard(text, regtype) IS
	'Creates an empty shard (upper 0, since 0), optionally recording the row type its typed functions use; 42710 if the name is taken';
COMMENT ON FUNCTION @extschema@.drop_shard(text) IS
	'Drops a shard: its state, its parts and its idempotency keys (objects in an object store are deleted once the drop has committed)';
COMMENT ON FUNCTION @extschema@.shard_upper(text) IS
	'The shard''s write frontier: every time below it is complete';
COMMENT ON FUNCTION @extschema@.shard_since(text) IS
	'The shard''s read frontier: reads as of an earlier time are refused (PS003)';
COMMENT ON FUNCTION @extschema@.downgrade_since(text, bigint) IS
	'Moves the shard''s since forward (never back, never past upper), allowing history before it to be compacted';
COMMENT ON FUNCTION @extschema@.shard_info() IS
	'One row per shard of this database (what the view shards shows)';
COMMENT ON VIEW @extschema@.shards IS
	'Every shard of this database: seqno, upper, since, batches, parts, bytes, updates, batches in flight, sorted runs, owner, privileges (a: append, r: read), where its parts are (table, or an object store''s URL) and whether this database owns them (false: another database''s store, read here and never deleted here; null: the store has no owner marker yet or could not be asked)';
COMMENT ON FUNCTION @extschema@.grant_shard(text, text, text) IS
	'Grants append, read or all on a shard to a role (or PUBLIC); only its owner or a member of that role may';
COMMENT ON FUNCTION @extschema@.revoke_shard(text, text, text) IS
	'Revokes append, read or all on a shard from a role (or PUBLIC); only its owner or a member of that role may';
COMMENT ON FUNCTION @extschema@.alter_shard_owner(text, text) IS
	'Gives a shard, and its grants, to another role; only a member of both the owner''s and the new owner''s roles may';
COMMENT ON FUNCTION @extschema@.batches(text) IS
	'The shard''s batches: interval, since, parts, updates, encoded bytes, whether inline';
COMMENT ON FUNCTION @extschema@.compare_and_append(text, bytea[], bytea[], bigint[], bigint[], bigint, bigint) IS
	'Appends updates as the batch [expected_upper, new_upper) in the caller''s transaction; PS001 if the upper is not expected_upper; returns the new seqno';
COMMENT ON FUNCTION @extschema@.compare_and_append(text, text[], text[], bigint[], bigint[], bigint, bigint) IS
	'compare_and_append with text keys and vals';
COMMENT ON FUNCTION @extschema@.append(text, bytea[], bytea[], bigint[], text) IS
	'Appends updates through the shared-batch sink, outside the caller''s transaction; returns the time they were written at once durable. 40003 means maybe written: retry with the same idempotency key';
COMMENT ON FUNCTION @extschema@.append(text, text[], text[], bigint[], text) IS
	'append with text keys and vals';
COMMENT ON FUNCTION @extschema@.append(text, text, text, text, text) IS
	'append with untyped arguments (array literals, a driver''s unknown-typed parameters), read as text keys and vals';
COMMENT ON FUNCTION @extschema@.compare_and_append(text, text, text, text, text, bigint, bigint) IS
	'compare_and_append with untyped arguments (array literals, a driver''s unknown-typed parameters), read as text keys and vals';
COMMENT ON FUNCTION @extschema@.wait_upper(text, bigint, interval) IS
	'Waits until the shard''s upper passes a time (or the timeout) and returns it';
COMMENT ON FUNCTION @extschema@.snapshot(text, bigint) IS
	'The collection as of a time (default upper - 1), consolidated, every time advanced to it';
COMMENT ON FUNCTION @extschema@.listen(text, bigint, bigint) IS
	'The updates with as_of < time < until (default upper), consolidated per (key, val, time); as_of = since - 1 reads everything';
COMMENT ON FUNCTION @extschema@.compact(text) IS
	'Merges every batch of the shard into one, now, in the caller''s transaction';
COMMENT ON FUNCTION @extschema@.verify(text) IS
	'Checks that every part the shard''s state references exists and decodes and that no blob row is unreferenced; no rows means healthy';
COMMENT ON FUNCTION @extschema@.stats() IS
	'Counters per shard, in shared memory (what the view stats shows)';
COMMENT ON VIEW @extschema@.stats IS
	'Counters per shard of this database: appends, updates, shared and own writes, parts, blob puts and bytes, CaS attempts and mismatches, compactions, time slowed and stalled';
COMMENT ON FUNCTION @extschema@.compaction_failures() IS
	'One row per shard whose background compaction failed (what the view compaction_failures shows)';
COMMENT ON VIEW @extschema@.compaction_failures IS
	'Shards of this database whose background compaction failed since stats_reset(): how many times, the last one''s time and error, and how many in a row until now (0 once a merge succeeded)';
COMMENT ON FUNCTION @extschema@.compaction_progress() IS
	'One row per merge in progress (what the view compaction_progress shows)';
COMMENT ON VIEW @extschema@.compaction_progress IS
	'Every merge in progress: the process, the shard, its phase and how far it got';
COMMENT ON FUNCTION @extschema@.sink_memory() IS
	'What the sink''s staging arena holds now: bytes of small writes and of parts, intervals in use and intervals waiting for a held state row';
COMMENT ON FUNCTION @extschema@.stats_info() IS
	'Entries of the stats table, its bound (persist_sink.stats_max) and the updates left uncounted because it was full';
COMMENT ON FUNCTION @extschema@.stats_reset() IS
	'Resets the counters of every shard of this database';
COMMENT ON FUNCTION @extschema@.append_rows(text, anyarray, bigint[], text) IS
	'append of typed rows (each stored as its binary send form); the array''s element type must be the shard''s row type';
COMMENT ON FUNCTION @extschema@.compare_and_append_rows(text, anyarray, bigint[], bigint[], bigint, bigint) IS
	'compare_and_append of typed rows';
COMMENT ON FUNCTION @extschema@.snapshot_rows(text, anyelement, bigint) IS
	'The typed rows of the collection as of a time, each diff times; PS004 for a negative multiplicity';
COMMENT ON FUNCTION @extschema@.listen_rows(text, anyelement, bigint, bigint) IS
	'The typed rows with as_of < time < until, with their time and diff';
COMMENT ON TABLE @extschema@.blob IS
	'Storage: the parts of every shard, as rows of 7864-byte chunks (written only by the extension)';
COMMENT ON TABLE @extschema@.consensus IS
	'Storage: one row per shard, its seqno and state rollup, changed only by compare-and-swap on seqno';
COMMENT ON TABLE @extschema@.consensus_diff IS
	'Storage: the state diffs logged after each shard''s rollup';
COMMENT ON TABLE @extschema@.shard_acl IS
	'Storage: each shard''s owner and the privileges granted on it (a: append, r: read); a shard without a row has those of shards made before 0.9';
COMMENT ON TABLE @extschema@.idempotency IS
	'Storage: the idempotency keys of committed appends, with the SHA-256 of their content and their time';

-- Readers (the same objects as persist_sink--0.9--0.10.sql makes)
-- Readers: a named position in a shard's times (the last time its
-- consumer processed), its owner and lease.  Written only in the caller's
-- transaction by create_reader, read_next, advance_reader and
-- drop_reader; a live reader (lease NULL, or last_active + lease not yet
-- past) holds the shard's since at or below its position.
CREATE TABLE reader (
	shard text COLLATE "C" NOT NULL,
	reader text COLLATE "C" NOT NULL,
	owner regrole NOT NULL,
	position bigint NOT NULL,
	lease interval,
	last_active timestamptz NOT NULL,
	PRIMARY KEY (shard, reader)
);
SELECT pg_catalog.pg_extension_config_dump('reader', '');
REVOKE ALL ON reader FROM PUBLIC;

CREATE FUNCTION create_reader(shard text, reader text,
	"position" bigint DEFAULT NULL, lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'ps_create_reader'
LANGUAGE C VOLATILE;

CREATE FUNCTION drop_reader(shard text, reader text)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_drop_reader'
LANGUAGE C VOLATILE;

CREATE FUNCTION read_next(shard text, reader text,
	max_updates bigint DEFAULT 100000, timeout interval DEFAULT NULL)
RETURNS TABLE(key bytea, val bytea, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_read_next'
LANGUAGE C VOLATILE
ROWS 1000;

CREATE FUNCTION read_next_rows(shard text, reader text, row_type anyelement,
	max_updates bigint DEFAULT 100000, timeout interval DEFAULT NULL)
RETURNS TABLE("row" anyelement, "time" bigint, diff bigint)
AS 'MODULE_PATHNAME', 'ps_read_next_rows'
LANGUAGE C VOLATILE
ROWS 1000;

CREATE FUNCTION advance_reader(shard text, reader text, "position" bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'ps_advance_reader'
LANGUAGE C VOLATILE;

CREATE FUNCTION reader_info(
	OUT shard text, OUT reader text, OUT owner regrole, OUT "position" bigint,
	OUT lag_ms bigint, OUT lag_updates bigint, OUT lease interval,
	OUT last_active timestamptz, OUT expires_at timestamptz, OUT expired boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_reader_info'
LANGUAGE C STABLE;

CREATE VIEW readers AS SELECT * FROM reader_info();

REVOKE ALL ON FUNCTION create_reader(text, text, bigint, interval),
	drop_reader(text, text),
	read_next(text, text, bigint, interval),
	read_next_rows(text, text, anyelement, bigint, interval),
	advance_reader(text, text, bigint),
	reader_info() FROM PUBLIC;
REVOKE ALL ON readers FROM PUBLIC;
GRANT EXECUTE ON FUNCTION create_reader(text, text, bigint, interval),
	drop_reader(text, text),
	read_next(text, text, bigint, interval),
	read_next_rows(text, text, anyelement, bigint, interval),
	advance_reader(text, text, bigint),
	reader_info()
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON readers TO persist_sink_reader;

COMMENT ON TABLE @extschema@.reader IS
	'Storage: each reader''s position in its shard, owner and lease (written only by the reader functions)';
COMMENT ON FUNCTION @extschema@.create_reader(text, text, bigint, interval) IS
	'Registers a named reader of a shard at a position (default since - 1: it reads everything); the shard''s since stays at or below its position while its lease lasts; 42710 if a live reader of that name exists';
COMMENT ON FUNCTION @extschema@.drop_reader(text, text) IS
	'Drops a reader, releasing its hold on the shard''s since; by its owner or the shard''s';
COMMENT ON FUNCTION @extschema@.read_next(text, text, bigint, interval) IS
	'The updates after the reader''s position, consolidated per (key, val, time), whole times up to about max_updates; waits up to timeout for some; locks the reader to the end of the transaction and renews its lease, but does not move it';
COMMENT ON FUNCTION @extschema@.read_next_rows(text, text, anyelement, bigint, interval) IS
	'read_next of a typed shard: its rows (the row type given as a NULL of that type), with their time and diff';
COMMENT ON FUNCTION @extschema@.advance_reader(text, text, bigint) IS
	'Moves the reader''s position forward (never back, never to or past upper) in the caller''s transaction, and renews its lease';
COMMENT ON FUNCTION @extschema@.reader_info() IS
	'One row per reader the caller owns or whose shard it owns (what the view readers shows)';
COMMENT ON VIEW @extschema@.readers IS
	'Readers the caller owns or whose shard it owns: position, lag in times (milliseconds for sink times) and in updates (an estimate from batch counts), lease, last activity, when and whether it expires';

-- Shards as tables: the foreign data wrapper persist_sink and its server.
-- A foreign table of the server, with option shard, takes INSERT and COPY
-- FROM (each statement one append) and answers SELECT from the snapshot.
CREATE FUNCTION fdw_handler() RETURNS fdw_handler
AS 'MODULE_PATHNAME', 'ps_fdw_handler'
LANGUAGE C STRICT;

CREATE FUNCTION fdw_validator(text[], oid) RETURNS void
AS 'MODULE_PATHNAME', 'ps_fdw_validator'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER persist_sink
	HANDLER fdw_handler VALIDATOR fdw_validator;
CREATE SERVER persist_sink FOREIGN DATA WRAPPER persist_sink;

REVOKE ALL ON FUNCTION fdw_handler(), fdw_validator(text[], oid) FROM PUBLIC;
GRANT USAGE ON FOREIGN SERVER persist_sink TO persist_sink_writer, persist_sink_reader;

COMMENT ON FUNCTION @extschema@.fdw_handler() IS
	'Handler of the foreign data wrapper persist_sink';
COMMENT ON FUNCTION @extschema@.fdw_validator(text[], oid) IS
	'Validator of the options of persist_sink''s foreign tables: shard (required) and as_of';
COMMENT ON FOREIGN DATA WRAPPER persist_sink IS
	'Shards as tables: INSERT and COPY FROM append (one statement, one append), SELECT reads the snapshot';
COMMENT ON SERVER persist_sink IS
	'The server of every shard''s foreign table: CREATE FOREIGN TABLE t (key bytea, val bytea, diff bigint) SERVER persist_sink OPTIONS (shard ''name'')';

-- Garbage (the same objects as persist_sink--0.11--0.12.sql makes)
-- Garbage: the parts a background merge replaced, one row per merge (its
-- shard and the seqno its CaS made), written in the merge's transaction
-- and deleted with the parts' blob rows by a compactor once it committed.
CREATE TABLE garbage (
	shard text COLLATE "C" NOT NULL,
	seqno bigint NOT NULL,
	keys text[] COLLATE "C" NOT NULL,
	PRIMARY KEY (shard, seqno)
);
SELECT pg_catalog.pg_extension_config_dump('garbage', '');
REVOKE ALL ON garbage FROM PUBLIC;
COMMENT ON TABLE @extschema@.garbage IS
	'Storage: the blob keys of the parts each background merge replaced, deleted with their blob rows by a compactor after the merge commits';

-- An object store, checked: one PUT, GET, ranged GET, listing and DELETE of
-- a probe object with the server's persist_sink.s3_* settings.
CREATE FUNCTION @extschema@.check_object_store(url text,
	OUT bucket text, OUT prefix text, OUT put_ms float8, OUT get_ms float8,
	OUT range_get_ms float8, OUT list_ms float8, OUT delete_ms float8)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_check_object_store'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.check_object_store(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.check_object_store(text) IS
	'Checks an object store (s3://bucket[/prefix]) with the server''s persist_sink.s3_* settings: puts, reads, lists and deletes a probe object and returns each request''s milliseconds';

-- Makes this database the owner of an object store's prefix (its owner
-- marker), to write and collect under it after the database that owned it
-- is gone: a promoted logical replica, a restored dump.
CREATE FUNCTION @extschema@.take_object_store(url text)
RETURNS text
AS 'MODULE_PATHNAME', 'ps_take_object_store'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION @extschema@.take_object_store(text) FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.take_object_store(text) IS
	'Makes this database the owner of an object store (s3://bucket[/prefix]), to write and collect under it once its owner is gone; returns the database that owned it, or NULL';

-- The object store's requests, failures and latency, one row per kind of
-- request, as pg_stat_archiver shows archiving: read as the stats view is
-- (members of persist_sink_reader), reset by superusers unless granted.
CREATE FUNCTION @extschema@.object_store_stats(
	OUT kind text, OUT requests bigint, OUT failed bigint, OUT retries bigint,
	OUT bytes bigint, OUT total_ms float8, OUT max_ms float8,
	OUT p50_ms float8, OUT p99_ms float8, OUT last_failure_at timestamptz,
	OUT last_failure text, OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'ps_object_store_stats'
LANGUAGE C VOLATILE;
CREATE VIEW @extschema@.object_store_stats AS
SELECT * FROM @extschema@.object_store_stats();
CREATE FUNCTION @extschema@.object_store_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'ps_object_store_stats_reset'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION @extschema@.object_store_stats(),
	@extschema@.object_store_stats_reset() FROM PUBLIC;
REVOKE ALL ON @extschema@.object_store_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.object_store_stats()
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON @extschema@.object_store_stats TO persist_sink_reader;
COMMENT ON FUNCTION @extschema@.object_store_stats() IS
	'One row per kind of object store request (what the view object_store_stats shows)';
COMMENT ON VIEW @extschema@.object_store_stats IS
	'The object store requests of the whole server since it started or object_store_stats_reset(), per kind (put, get, delete, list): requests, failed, retries, bytes, total, longest, median and 99th percentile milliseconds, the last failure''s time and message';
COMMENT ON FUNCTION @extschema@.object_store_stats_reset() IS
	'Resets the object store''s figures (object_store_stats), for the whole server';
CREATE FUNCTION @extschema@.object_disk_cache_stats(
	OUT size bigint, OUT windows bigint, OUT hits bigint, OUT misses bigint,
	OUT writes bigint, OUT replaced bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'ps_object_disk_cache_stats'
LANGUAGE C VOLATILE;
CREATE VIEW @extschema@.object_disk_cache_stats AS
SELECT * FROM @extschema@.object_disk_cache_stats();
REVOKE ALL ON FUNCTION @extschema@.object_disk_cache_stats() FROM PUBLIC;
REVOKE ALL ON @extschema@.object_disk_cache_stats FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.object_disk_cache_stats()
TO persist_sink_writer, persist_sink_reader;
GRANT SELECT ON @extschema@.object_disk_cache_stats TO persist_sink_reader;
COMMENT ON FUNCTION @extschema@.object_disk_cache_stats() IS
	'The disk cache of objects'' figures (what the view object_disk_cache_stats shows)';
COMMENT ON VIEW @extschema@.object_disk_cache_stats IS
	'The disk cache of objects the server''s processes share (persist_sink.object_disk_cache_size): its size in bytes, the windows of 256kB it holds, and the windows found, not found, written and replaced since the server started';
