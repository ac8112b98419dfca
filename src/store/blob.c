/*-------------------------------------------------------------------------
 *
 * blob.c
 *	  The blob table: one row per part, keyed "<shard>/<random hex>".
 *
 * Shard names cannot contain '/', so a shard's keys are exactly those in
 * ["<shard>/", "<shard>0") under the key column's "C" collation.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "store/store.h"

/* Makes a fresh blob key for a part of shard. */
char *
ps_blob_new_key(const char *shard)
{
	uint8		rnd[16];
	char		hex[33];

	if (!pg_strong_random(rnd, sizeof(rnd)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random blob key")));
	hex_encode((const char *) rnd, sizeof(rnd), hex);
	hex[32] = '\0';
	return psprintf("%s/%s", shard, hex);
}

/* Inserts one part's bytes under key. */
void
ps_blob_put(const char *key, const char *data, uint64 len)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, BYTEAOID};
	bytea	   *b = palloc(VARHDRSZ + len);
	Datum		values[2];

	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	values[0] = CStringGetTextDatum(key);
	values[1] = PointerGetDatum(b);
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.blob (key, data) VALUES ($1, $2)",
			   2, types, values, false);
	pfree(b);
}

/* Fetches a part's bytes into dest, detoasted; NULL if the row is missing. */
bytea *
ps_blob_get(const char *key, MemoryContext dest, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	Datum		d;
	MemoryContext old;
	bytea	   *result;

	values[0] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "SELECT data FROM persist_sink.blob WHERE key OPERATOR(pg_catalog.=) $1",
			   1, types, values, read_only);
	if (SPI_processed == 0)
		return NULL;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return NULL;
	old = MemoryContextSwitchTo(dest);
	result = (bytea *) PG_DETOAST_DATUM_COPY(d);
	MemoryContextSwitchTo(old);
	SPI_freetuptable(SPI_tuptable);
	return result;
}

/* Deletes one part's row. */
void
ps_blob_delete(const char *key)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.blob WHERE key OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}

/* Fills the key range of a shard's blob rows. */
static void
shard_range(const char *shard, Datum *values)
{
	values[0] = CStringGetTextDatum(psprintf("%s/", shard));
	values[1] = CStringGetTextDatum(psprintf("%s0", shard));
}

/* Deletes every blob row of shard; returns how many. */
uint64
ps_blob_delete_shard(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	shard_range(shard, values);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.>=) $1 AND key OPERATOR(pg_catalog.<) $2",
			   2, types, values, false);
	return SPI_processed;
}

/* Lists the keys of every blob row of shard, palloc'd in the caller's context. */
List *
ps_blob_shard_keys(const char *shard, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	List	   *keys = NIL;

	shard_range(shard, values);
	ps_spi_run(&plan,
			   "SELECT key FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.>=) $1 AND key OPERATOR(pg_catalog.<) $2",
			   2, types, values, read_only);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		keys = lappend(keys, key);
	}
	return keys;
}
