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

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
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

/*
 * Fetches a part's stored value into dest without its bytes when they are
 * stored out of line: then a TOAST pointer, whose bytes ps_blob_read
 * fetches a slice at a time.  A value stored in the row is copied whole
 * (it is small).  NULL if the row is missing.  The pointer stays valid
 * while the snapshot the row was read with is held.
 */
struct varlena *
ps_blob_get_ref(const char *key, MemoryContext dest, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	struct varlena *stored;
	struct varlena *result;

	values[0] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "SELECT data FROM persist_sink.blob WHERE key OPERATOR(pg_catalog.=) $1",
			   1, types, values, read_only);
	if (SPI_processed == 0)
		return NULL;
	stored = (struct varlena *)
		DatumGetPointer(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull));
	if (isnull)
		return NULL;
	if (VARATT_IS_EXTERNAL_ONDISK(stored))
	{
		result = MemoryContextAlloc(dest, VARSIZE_EXTERNAL(stored));
		memcpy(result, stored, VARSIZE_EXTERNAL(stored));
	}
	else
	{
		MemoryContext old = MemoryContextSwitchTo(dest);

		result = detoast_attr(stored);
		if (result == stored)
			result = (struct varlena *) pg_detoast_datum_copy(stored);
		MemoryContextSwitchTo(old);
	}
	SPI_freetuptable(SPI_tuptable);
	return result;
}

/* Bytes of the part behind a value of ps_blob_get_ref. */
uint64
ps_blob_ref_length(struct varlena *ref)
{
	if (VARATT_IS_EXTERNAL_ONDISK(ref))
		return toast_raw_datum_size(PointerGetDatum(ref)) - VARHDRSZ;
	return VARSIZE_ANY_EXHDR(ref);
}

/*
 * Reads up to len bytes at offset of the part behind a value of
 * ps_blob_get_ref, fetching only the TOAST chunks they are in; fewer at
 * the part's end.  Returns them palloc'd as a bytea.
 */
bytea *
ps_blob_read(struct varlena *ref, uint64 offset, uint64 len)
{
	bytea	   *slice;
	uint64		size = ps_blob_ref_length(ref);

	Assert(offset <= size && len <= PG_INT32_MAX);
	CHECK_FOR_INTERRUPTS();
	if (VARATT_IS_EXTERNAL_ONDISK(ref))
		return (bytea *) detoast_attr_slice(ref, (int32) offset, (int32) len);
	len = Min(len, size - offset);
	slice = palloc(VARHDRSZ + len);
	SET_VARSIZE(slice, VARHDRSZ + len);
	memcpy(VARDATA(slice), VARDATA_ANY(ref) + offset, len);
	return slice;
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
