/*-------------------------------------------------------------------------
 *
 * idempotency.c
 *	  The idempotency table: the keys of committed appends, each with the
 *	  time it was written at and a digest of its content.
 *
 * A key is written in the transaction of the interval that commits its
 * append, so it exists exactly when the append does.  Keys older than
 * persist_sink.idempotency_window are deleted by the compactor.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "store/store.h"

/*
 * Looks up a shard's key; returns false if it is not there, else its time
 * and digest (digest_len bytes are compared by the caller).
 */
bool
ps_idempotency_get(const char *shard, const char *key, int64 *time,
				   char *digest, int digest_len, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	bytea	   *d;

	values[0] = CStringGetTextDatum(shard);
	values[1] = CStringGetTextDatum(key);
	ps_spi_run(&plan,
			   "SELECT time, digest FROM persist_sink.idempotency"
			   " WHERE shard OPERATOR(pg_catalog.=) $1 AND key OPERATOR(pg_catalog.=) $2",
			   2, types, values, read_only);
	if (SPI_processed == 0)
		return false;
	*time = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										1, &isnull));
	d = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  2, &isnull));
	memset(digest, 0, digest_len);
	memcpy(digest, VARDATA_ANY(d), Min(digest_len, VARSIZE_ANY_EXHDR(d)));
	return true;
}

/* Records a key of an append committed (by the current transaction) at time. */
void
ps_idempotency_put(const char *shard, const char *key, int64 time,
				   const char *digest, int digest_len)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[4] = {TEXTOID, TEXTOID, INT8OID, BYTEAOID};
	Datum		values[4];
	bytea	   *d = palloc(VARHDRSZ + digest_len);

	SET_VARSIZE(d, VARHDRSZ + digest_len);
	memcpy(VARDATA(d), digest, digest_len);
	values[0] = CStringGetTextDatum(shard);
	values[1] = CStringGetTextDatum(key);
	values[2] = Int64GetDatum(time);
	values[3] = PointerGetDatum(d);
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.idempotency (shard, key, time, digest, written_at)"
			   " VALUES ($1, $2, $3, $4, pg_catalog.now())",
			   4, types, values, false);
}

/* Deletes the keys written more than window_ms ago; returns how many. */
uint64
ps_idempotency_expire(int window_ms)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1];

	values[0] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																-(int64) window_ms));
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.idempotency WHERE written_at OPERATOR(pg_catalog.<) $1",
			   1, types, values, false);
	return SPI_processed;
}

/* Deletes every key of a shard (it is dropped). */
void
ps_idempotency_delete_shard(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.idempotency WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}
