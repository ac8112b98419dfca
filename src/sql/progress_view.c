/*-------------------------------------------------------------------------
 *
 * progress_view.c
 *	  compaction_progress(): the SQL view over the merges in progress
 *	  (shard/progress.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shard/progress.h"
#include "sql/sql.h"

PG_FUNCTION_INFO_V1(ps_compaction_progress);

#define PROGRESS_COLUMNS	10

/* The name of a merge's command, as the view shows it. */
static const char *
command_name(PsProgressCommand command)
{
	return command == PS_PROGRESS_COMPACT ? "compact" : "background";
}

/* The name of a merge's phase, as the view shows it. */
static const char *
phase_name(PsProgressPhase phase)
{
	return phase == PS_PROGRESS_SWAPPING ? "swapping" : "merging";
}

/* Adds one merge in progress to the result (a PsProgressVisitor). */
static void
put_progress(const PsProgress *p, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[PROGRESS_COLUMNS];
	bool		nulls[PROGRESS_COLUMNS] = {0};

	values[0] = Int32GetDatum(p->pid);
	values[1] = ObjectIdGetDatum(p->database);
	values[2] = CStringGetTextDatum(p->shard);
	values[3] = CStringGetTextDatum(command_name(p->command));
	values[4] = CStringGetTextDatum(phase_name(p->phase));
	values[5] = TimestampTzGetDatum(p->started_at);
	values[6] = Int32GetDatum(p->batches);
	values[7] = Int64GetDatum(p->updates_merged);
	values[8] = Int64GetDatum(p->updates_total);
	values[9] = Int64GetDatum(p->bytes_written);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * compaction_progress(): one row per merge in progress, by the background
 * compactor or by a compact() call, in every database (as the
 * pg_stat_progress_* views show every database's commands).
 */
Datum
ps_compaction_progress(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	PS_READER("compaction_progress");

	InitMaterializedSRF(fcinfo, 0);
	if (rsinfo->setDesc->natts != PROGRESS_COLUMNS)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("compaction_progress() is declared with %d columns, but the library has %d",
						rsinfo->setDesc->natts, PROGRESS_COLUMNS),
				 errhint("Install the library of the extension's version.")));
	ps_progress_foreach(put_progress, rsinfo);
	return (Datum) 0;
}
