/*-------------------------------------------------------------------------
 *
 * stats_view.c
 *	  stats(), stats_reset() and stats_info(): the SQL view over the shard
 *	  layer's counters (shard/stats.c); compaction_failures(): its failed
 *	  background compactions; sink_memory(): what the sink holds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shard/debt.h"
#include "shard/stats.h"
#include "sink/sink.h"
#include "sql/sql.h"

PG_FUNCTION_INFO_V1(ps_stats);
PG_FUNCTION_INFO_V1(ps_stats_reset);
PG_FUNCTION_INFO_V1(ps_sink_memory);
PG_FUNCTION_INFO_V1(ps_stats_info);
PG_FUNCTION_INFO_V1(ps_compaction_failures);

/*
 * Adds one shard's counters to the result (a PsStatsVisitor).  A stats()
 * of an older version of the extension's SQL has fewer columns: the
 * counters added since are left out until ALTER EXTENSION ... UPDATE.
 */
static void
put_counters(const char *shard, const PsCounters *counters,
			 const PsCompactionFailures *failures, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[1 + PS_STATS_COUNTERS];
	bool		nulls[1 + PS_STATS_COUNTERS] = {0};
	const int64 *v = (const int64 *) counters;
	int			ncounters = rsinfo->setDesc->natts - 1;

	values[0] = CStringGetTextDatum(shard);
	for (int i = 0; i < ncounters; i++)
		values[1 + i] = Int64GetDatum(v[i]);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* stats(): one row per shard of the current database with counters */
Datum
ps_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			natts;

	PS_READER("stats");

	InitMaterializedSRF(fcinfo, 0);
	natts = rsinfo->setDesc->natts;
	if (natts < 2 || natts > 1 + PS_STATS_COUNTERS)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("stats() is declared with %d columns, but the library has %d",
						natts, (int) (1 + PS_STATS_COUNTERS)),
				 errhint("Install the library of the extension's version.")));
	ps_stats_foreach(put_counters, rsinfo);
	return (Datum) 0;
}

/* stats_reset(): forgets the counters of the current database's shards */
Datum
ps_stats_reset(PG_FUNCTION_ARGS)
{
	ps_stats_reset_database();
	PG_RETURN_VOID();
}

/*
 * sink_memory(): the staging arena's budget per kind of chunk, the bytes of
 * small writes and of large writes' parts it holds, the interval slots in
 * use, and of them those waiting for a state row another transaction holds.
 * All zero when no append is in flight.
 */
Datum
ps_sink_memory(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	SinkUsage	usage;
	Datum		values[5];
	bool		nulls[5] = {0};

	PS_READER("sink_memory");
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	ps_sink_usage(&usage);
	values[0] = Int64GetDatum((int64) usage.budget);
	values[1] = Int64GetDatum((int64) usage.small_used);
	values[2] = Int64GetDatum((int64) usage.parts_used);
	values[3] = Int32GetDatum(usage.intervals);
	values[4] = Int32GetDatum(usage.blocked);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/*
 * stats_info(): how full the counters' table is, over every database:
 * entries in use, persist_sink.stats_max, and the additions to counters
 * lost because the table was full.
 */
Datum
ps_stats_info(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	PsStatsInfo info;
	Datum		values[3];
	bool		nulls[3] = {0};

	PS_READER("stats_info");
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	ps_stats_get_info(&info);
	values[0] = Int32GetDatum(info.entries);
	values[1] = Int32GetDatum(info.max);
	values[2] = Int64GetDatum(info.uncounted);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/* A shard's failed compactions, copied out of the stats table */
typedef struct FailedShard
{
	char		shard[PS_MAX_SHARD_NAME + 1];
	PsCompactionFailures failures;
} FailedShard;

/* Keeps a shard whose compactions failed (a PsStatsVisitor); arg is a List **. */
static void
collect_failed(const char *shard, const PsCounters *counters,
			   const PsCompactionFailures *failures, void *arg)
{
	List	  **list = (List **) arg;
	FailedShard *f;

	if (failures->count == 0)
		return;
	f = palloc(sizeof(FailedShard));
	strlcpy(f->shard, shard, sizeof(f->shard));
	f->failures = *failures;
	*list = lappend(*list, f);
}

/* The failing shard named shard in failed (a List of FailedShard), or NULL. */
static FailedShard *
find_failed(List *failed, const char *shard)
{
	ListCell   *lc;

	foreach(lc, failed)
	{
		FailedShard *f = lfirst(lc);

		if (strcmp(f->shard, shard) == 0)
			return f;
	}
	return NULL;
}

/*
 * Adds to *failed the shards whose compactions the debt table has failing
 * but the stats table does not count (it had no room for them): their
 * failures are those in a row.
 */
static void
add_uncounted_failing(List **failed)
{
	ListCell   *lc;

	foreach(lc, ps_debt_failing_shards())
	{
		PsDebtFailure *d = lfirst(lc);
		FailedShard *f;

		if (find_failed(*failed, d->shard) != NULL)
			continue;
		f = palloc0(sizeof(FailedShard));
		strlcpy(f->shard, d->shard, sizeof(f->shard));
		f->failures.count = d->failures;
		f->failures.last_at = d->failed_at;
		strlcpy(f->failures.last_error, d->error, sizeof(f->failures.last_error));
		*failed = lappend(*failed, f);
	}
}

/*
 * compaction_failures(): one row per shard of the current database whose
 * background compaction failed since the counters were last reset: how
 * many times, the last one's time and error, and how many in a row until
 * now (0 once a merge of it succeeded; the compactor backs off from it
 * meanwhile).  A shard failing now has a row even when the stats table
 * had no room for its counters (its failures are then those in a row).
 * The stats lock is let go before the debt table is read.
 */
Datum
ps_compaction_failures(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *failed = NIL;
	ListCell   *lc;

	PS_READER("compaction_failures");
	InitMaterializedSRF(fcinfo, 0);
	ps_stats_foreach(collect_failed, &failed);
	add_uncounted_failing(&failed);
	foreach(lc, failed)
	{
		FailedShard *f = lfirst(lc);
		Datum		values[5];
		bool		nulls[5] = {0};
		TimestampTz at;

		values[0] = CStringGetTextDatum(f->shard);
		values[1] = Int64GetDatum(f->failures.count);
		values[2] = TimestampTzGetDatum(f->failures.last_at);
		values[3] = CStringGetTextDatum(f->failures.last_error);
		values[4] = Int32GetDatum(ps_debt_compaction_failures(f->shard, &at, NULL));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
