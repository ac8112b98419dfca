/*-------------------------------------------------------------------------
 *
 * reader_table.c
 *	  The reader table: each reader's position in a shard's times, its
 *	  owner and its lease.
 *
 * A reader's row is written only in its caller's transaction; the rules
 * that keep a shard's since at or below every live reader's position
 * (doc/architecture.md, "Readers and the since they hold") live in
 * shard/reader_since.c.  A reader is expired once last_active + lease is past;
 * a NULL lease never passes.  Every function here must be called between
 * SPI_connect and SPI_finish, and needs the table (PS_OBJ_READER).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "base/settings.h"
#include "store/store.h"

/*
 * SQL: the reader (of table alias t) has expired at the time in parameter
 * now.  A lease longer than PS_READER_LEASE_MAX_S (only a row written before
 * leases were bounded holds one) never passes: last_active + lease is not
 * computed for it, as the sum could leave timestamptz's range.
 */
#define READER_EXPIRED(t, now) \
	"(" t "lease IS NOT NULL AND CASE WHEN " READER_LEASE_TOO_LONG(t) " THEN false" \
	" ELSE " t "last_active OPERATOR(pg_catalog.+) " t "lease" \
	" OPERATOR(pg_catalog.<) " now " END)"

/* SQL: the reader's lease (of table alias t) is longer than the bound */
#define READER_LEASE_TOO_LONG(t) \
	t "lease OPERATOR(pg_catalog.>) pg_catalog.make_interval(secs => " \
	CppAsString2(PS_READER_LEASE_MAX_S) ")"

/* SQL: when the reader (of table alias t) expires; infinity past the bound */
#define READER_EXPIRES_AT(t) \
	"CASE WHEN " READER_LEASE_TOO_LONG(t) " THEN 'infinity'::pg_catalog.timestamptz" \
	" ELSE " t "last_active OPERATOR(pg_catalog.+) " t "lease END"

/* The arguments (shard, reader, now) of most statements below. */
static void
key_args(Datum *values, const char *shard, const char *reader, TimestampTz now)
{
	values[0] = CStringGetTextDatum(shard);
	values[1] = CStringGetTextDatum(reader);
	values[2] = TimestampTzGetDatum(now);
}

/* Fills out from row i of the last query: owner, position, expired, leased. */
static void
reader_from_row(PsReaderRow *out, uint64 i)
{
	HeapTuple	tuple = SPI_tuptable->vals[i];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;

	out->owner = DatumGetObjectId(SPI_getbinval(tuple, desc, 1, &isnull));
	out->position = DatumGetInt64(SPI_getbinval(tuple, desc, 2, &isnull));
	out->expired = DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull));
	(void) SPI_getbinval(tuple, desc, 4, &isnull);
	out->leased = !isnull;
}

/* SQL: a reader's row as PsReaderRow wants it */
#define READER_ROW_SQL \
	"SELECT owner, position, " READER_EXPIRED("", "$3") ", lease FROM persist_sink.reader" \
	" WHERE shard OPERATOR(pg_catalog.=) $1 AND reader OPERATOR(pg_catalog.=) $2"

/* Runs plan (READER_ROW_SQL, and sql's end) into out; false if no row. */
static bool
fetch_reader(SPIPlanPtr *plan, const char *sql, const char *shard,
			 const char *reader, TimestampTz now, bool read_only,
			 PsReaderRow *out)
{
	Oid			types[3] = {TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[3];

	key_args(values, shard, reader, now);
	ps_spi_run(plan, sql, 3, types, values, read_only);
	if (SPI_processed == 0)
		return false;
	reader_from_row(out, 0);
	return true;
}

/*
 * Reads a reader's row (read_only: in the active snapshot; else as of
 * now, a new snapshot in READ COMMITTED); false if there is none.
 */
bool
ps_reader_read(const char *shard, const char *reader, TimestampTz now,
			   bool read_only, PsReaderRow *out)
{
	static SPIPlanPtr plan = NULL;

	return fetch_reader(&plan, READER_ROW_SQL, shard, reader, now, read_only, out);
}

/*
 * Locks a reader's row to the end of the transaction (FOR NO KEY UPDATE,
 * waiting for a transaction that holds it) and reads it as that
 * transaction left it; false if there is none.
 */
bool
ps_reader_lock(const char *shard, const char *reader, TimestampTz now,
			   PsReaderRow *out)
{
	static SPIPlanPtr plan = NULL;

	return fetch_reader(&plan, READER_ROW_SQL " FOR NO KEY UPDATE", shard, reader,
						now, false, out);
}

/*
 * Inserts a reader, or replaces an expired one of the same name; false if
 * a live one exists (it is left alone).  lease NULL never expires.
 */
bool
ps_reader_insert(const char *shard, const char *reader, Oid owner,
				 int64 position, Interval *lease, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[6] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, REGROLEOID,
	INT8OID, INTERVALOID};
	Datum		values[6];
	char		nulls[6] = "     n";

	key_args(values, shard, reader, now);
	values[3] = ObjectIdGetDatum(owner);
	values[4] = Int64GetDatum(position);
	values[5] = lease != NULL ? IntervalPGetDatum(lease) : (Datum) 0;
	if (lease != NULL)
		nulls[5] = ' ';
	ps_spi_run_nulls(&plan,
				   "INSERT INTO persist_sink.reader AS r"
				   " (shard, reader, owner, position, lease, last_active)"
				   " VALUES ($1, $2, $4, $5, $6, $3)"
				   " ON CONFLICT (shard, reader) DO UPDATE SET owner = EXCLUDED.owner,"
				   " position = EXCLUDED.position, lease = EXCLUDED.lease,"
				   " last_active = EXCLUDED.last_active"
				   " WHERE " READER_EXPIRED("r.", "$3") " RETURNING 1",
				   6, types, values, nulls, false);
	return SPI_processed > 0;
}

/* Sets a reader's position and renews its lease. */
void
ps_reader_set_position(const char *shard, const char *reader, int64 position,
					   TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[4] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, INT8OID};
	Datum		values[4];

	key_args(values, shard, reader, now);
	values[3] = Int64GetDatum(position);
	ps_spi_run(&plan,
			   "UPDATE persist_sink.reader SET position = $4, last_active = $3"
			   " WHERE shard OPERATOR(pg_catalog.=) $1 AND reader OPERATOR(pg_catalog.=) $2",
			   4, types, values, false);
}

/* Deletes a reader; false if it did not exist. */
bool
ps_reader_delete(const char *shard, const char *reader)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2] = {CStringGetTextDatum(shard), CStringGetTextDatum(reader)};

	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.reader"
			   " WHERE shard OPERATOR(pg_catalog.=) $1 AND reader OPERATOR(pg_catalog.=) $2",
			   2, types, values, false);
	return SPI_processed > 0;
}

/* Deletes every reader of a shard, if the table exists. */
void
ps_reader_delete_shard(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(shard)};

	if (!ps_sql_objects_have(PS_OBJ_READER))
		return;
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.reader WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}

/*
 * The lowest position of a shard's live readers (PG_INT64_MAX if it has
 * none), and in *holder the name of one reader there.  First locks
 * the rows of expired readers (FOR SHARE: waiting for a transaction that
 * renews one, after which it counts as live), so that no lease left out
 * here is renewed before the caller's transaction ends.
 */
int64
ps_reader_hold(const char *shard, TimestampTz now, char **holder)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr min_plan = NULL;
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2] = {CStringGetTextDatum(shard), TimestampTzGetDatum(now)};
	bool		isnull;

	*holder = NULL;
	if (!ps_sql_objects_have(PS_OBJ_READER))
		return PG_INT64_MAX;
	ps_spi_run(&lock_plan,
			   "SELECT 1 FROM persist_sink.reader"
			   " WHERE shard OPERATOR(pg_catalog.=) $1 AND " READER_EXPIRED("", "$2")
			   " FOR SHARE",
			   2, types, values, false);
	ps_spi_run(&min_plan,
			   "SELECT position, reader FROM persist_sink.reader"
			   " WHERE shard OPERATOR(pg_catalog.=) $1 AND NOT " READER_EXPIRED("", "$2")
			   " ORDER BY position LIMIT 1",
			   2, types, values, false);
	if (SPI_processed == 0)
		return PG_INT64_MAX;
	*holder = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Every reader, in (shard, reader) order, as rows of the last query:
 * shard, reader, owner, position, lease, last_active, expires_at,
 * expired.  Returns how many.
 */
uint64
ps_reader_list(TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1] = {TimestampTzGetDatum(now)};

	ps_spi_run(&plan,
			   "SELECT shard, reader, owner, position, lease, last_active,"
			   " " READER_EXPIRES_AT("") ", " READER_EXPIRED("", "$1")
			   " FROM persist_sink.reader ORDER BY shard, reader",
			   1, types, values, true);
	return SPI_processed;
}
