/*-------------------------------------------------------------------------
 *
 * object_store_view.c
 *	  object_store_stats() and object_store_stats_reset(): the SQL view
 *	  over the object store's requests, failures and latency
 *	  (objstore/store_stats.c), one row per kind of request; and
 *	  object_disk_cache_stats(), the view over the disk cache of objects
 *	  (objstore/object_disk_cache.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "store/store.h"
#include "sql/sql.h"

PG_FUNCTION_INFO_V1(ps_object_store_stats);
PG_FUNCTION_INFO_V1(ps_object_store_stats_reset);
PG_FUNCTION_INFO_V1(ps_object_disk_cache_stats);

/* Columns of object_store_stats() */
#define OBJECT_STORE_STATS_COLS	12

/* Columns of object_disk_cache_stats() */
#define DISK_CACHE_STATS_COLS	6

/* Microseconds as float8 milliseconds. */
static Datum
ms_datum(int64 us)
{
	return Float8GetDatum((double) us / 1000.0);
}

/* Adds the row of one kind of request to the result; takes the kind's spinlock. */
static void
put_kind(ReturnSetInfo *rsinfo, PsStoreRequest kind)
{
	PsStoreStats s;
	Datum		values[OBJECT_STORE_STATS_COLS];
	bool		nulls[OBJECT_STORE_STATS_COLS] = {0};

	ps_store_stats_get(kind, &s);
	values[0] = CStringGetTextDatum(ps_store_request_name(kind));
	values[1] = Int64GetDatum(s.requests);
	values[2] = Int64GetDatum(s.failed);
	values[3] = Int64GetDatum(s.retries);
	values[4] = Int64GetDatum(s.bytes);
	values[5] = ms_datum(s.total_us);
	values[6] = ms_datum(s.max_us);
	values[7] = ms_datum(s.p50_us);
	values[8] = ms_datum(s.p99_us);
	nulls[7] = nulls[8] = (s.recent == 0);
	values[9] = TimestampTzGetDatum(s.last_failure_at);
	values[10] = CStringGetTextDatum(s.last_failure);
	nulls[9] = nulls[10] = (s.last_failure_at == 0);
	values[11] = TimestampTzGetDatum(s.stats_reset);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * object_store_stats(): one row per kind of request (put, get, delete,
 * list) made to any object store by any database since the server started
 * or object_store_stats_reset(): requests, failed, retries, bytes, total
 * and longest milliseconds, the median and 99th percentile of the last
 * requests' milliseconds, the last failure's time and message, and when
 * the figures were reset.
 */
Datum
ps_object_store_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	PS_READER("object_store_stats");
	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != OBJECT_STORE_STATS_COLS)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("object_store_stats() is declared with %d columns, but the library has %d",
						rsinfo->setDesc->natts, OBJECT_STORE_STATS_COLS),
				 errhint("Install the library of the extension's version.")));
	for (int kind = 0; kind < PS_STORE_REQUEST_KINDS; kind++)
		put_kind(rsinfo, (PsStoreRequest) kind);
	return (Datum) 0;
}

/*
 * object_store_stats_reset(): empties the object store's figures, for the
 * whole server (EXECUTE is the superuser's unless granted)
 */
Datum
ps_object_store_stats_reset(PG_FUNCTION_ARGS)
{
	ps_store_stats_reset();
	PG_RETURN_VOID();
}

/*
 * object_disk_cache_stats(): the disk cache's size in bytes, the windows
 * it holds, and the windows found, not found, written and replaced since
 * the server started (all 0 with persist_sink.object_disk_cache_size 0).
 */
Datum
ps_object_disk_cache_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	PsDiskCacheStats s;
	Datum		values[DISK_CACHE_STATS_COLS];
	bool		nulls[DISK_CACHE_STATS_COLS] = {0};

	PS_READER("object_disk_cache_stats");
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE ||
		desc->natts != DISK_CACHE_STATS_COLS)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("object_disk_cache_stats() is not declared with %d columns",
						DISK_CACHE_STATS_COLS),
				 errhint("Install the library of the extension's version.")));
	ps_object_disk_cache_get_stats(&s);
	values[0] = Int64GetDatum((int64) s.size);
	values[1] = Int64GetDatum((int64) s.windows);
	values[2] = Int64GetDatum((int64) s.hits);
	values[3] = Int64GetDatum((int64) s.misses);
	values[4] = Int64GetDatum((int64) s.writes);
	values[5] = Int64GetDatum((int64) s.replaced);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}
