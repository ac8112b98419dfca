/* persist_sink--0.5--0.6.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION persist_sink UPDATE TO '0.6'" to load this file. \quit

-- The blob table keeps a part in rows of 7864-byte chunks, stored in the
-- row, instead of one row whose bytes TOAST cuts into 2 kB chunks.  The
-- parts are copied into a new table of that shape, cut the way the
-- library cuts them, and the old table is dropped.  This rewrites every
-- part once: it takes about as long as copying the blob table.
-- (Every name is qualified: the script does not depend on the search_path.)
ALTER TABLE @extschema@.blob RENAME TO blob_0_5;
ALTER INDEX @extschema@.blob_pkey RENAME TO blob_0_5_pkey;

CREATE TABLE @extschema@.blob (
	key text COLLATE "C" NOT NULL,
	chunk integer NOT NULL,
	data bytea NOT NULL,
	PRIMARY KEY (key, chunk)
);
ALTER TABLE @extschema@.blob ALTER COLUMN key SET STORAGE PLAIN,
	ALTER COLUMN data SET STORAGE PLAIN;

INSERT INTO @extschema@.blob (key, chunk, data)
SELECT b.key, c, pg_catalog.substr(b.data, c * 7864 + 1, 7864)
FROM @extschema@.blob_0_5 b,
	 pg_catalog.generate_series(0, greatest(pg_catalog.length(b.data) - 1, 0) / 7864) AS c
ORDER BY b.key, c;

-- (dropped from the extension first, which also takes it off the list of
-- tables pg_dump dumps)
ALTER EXTENSION persist_sink DROP TABLE @extschema@.blob_0_5;
DROP TABLE @extschema@.blob_0_5;

SELECT pg_catalog.pg_extension_config_dump('@extschema@.blob', '');
REVOKE ALL ON @extschema@.blob FROM PUBLIC;
