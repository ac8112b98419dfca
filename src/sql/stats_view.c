/*-------------------------------------------------------------------------
 *
 * stats_view.c
 *	  stats() and stats_reset(): the SQL view over the shard layer's
 *	  counters (shard/stats.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "utils/builtins.h"

#include "shard/stats.h"
#include "sql/sql.h"

PG_FUNCTION_INFO_V1(ps_stats);
PG_FUNCTION_INFO_V1(ps_stats_reset);

/* Adds one shard's counters to the result (a PsStatsVisitor). */
static void
put_counters(const char *shard, const PsCounters *counters, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[1 + PS_STATS_COUNTERS];
	bool		nulls[1 + PS_STATS_COUNTERS] = {0};
	const int64 *v = (const int64 *) counters;

	values[0] = CStringGetTextDatum(shard);
	for (size_t i = 0; i < PS_STATS_COUNTERS; i++)
		values[1 + i] = Int64GetDatum(v[i]);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* stats(): one row per shard with counters */
Datum
ps_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	ps_stats_foreach(put_counters, rsinfo);
	return (Datum) 0;
}

/* stats_reset(): zeroes every counter */
Datum
ps_stats_reset(PG_FUNCTION_ARGS)
{
	ps_stats_reset_all();
	PG_RETURN_VOID();
}
