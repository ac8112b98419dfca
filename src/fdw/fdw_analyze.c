/*-------------------------------------------------------------------------
 *
 * fdw_analyze.c
 *	  What the planner knows of a shard's foreign table: ANALYZE, and the
 *	  size it expects of a table never analyzed.
 *
 * ANALYZE reads the table's rows as a scan does (the shard's snapshot as
 * of persist_sink.as_of, else the option as_of, else upper - 1; a row of
 * diff n counts n times when the table has no column diff) through the
 * merge of the shard's parts, keeps a sample of them by reservoir
 * sampling (as postgres_fdw and file_fdw do), and counts them all: the
 * table's reltuples is that exact count, its relpages the shard's encoded
 * bytes in pages.  It needs what a scan needs (snapshot()'s rights), for
 * the role that runs it and for the table's owner, as whom PostgreSQL
 * samples a table: the statistics are as readable as the table.
 *
 * A table never analyzed (reltuples -1) is expected to hold as many rows
 * as its shard's state has updates (the sum of its parts' update counts):
 * cheap to know (this process's last copy of the state, kept by every read
 * of it, else the state read; no part), and an upper bound of the
 * snapshot's rows as a table with a column diff reads them, one per key
 * and val whose updates do not sum to zero.  A table without diff reads a
 * row of diff n as n rows, which may be more.  When the caller may not
 * read the shard, or it does not exist, or the table names none, the
 * estimate is a fixed number of rows, and planning raises nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "commands/defrem.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/sampling.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "base/settings.h"
#include "fdw/fdw.h"
#include "shard/read.h"
#include "sql/sql.h"
#include "store/store.h"

/* A sample of a table's rows being drawn (reservoir sampling) */
typedef struct Sample
{
	HeapTuple  *rows;
	int			targrows;
	int			numrows;
	double		samplerows;		/* rows read so far */
	double		rowstoskip;		/* before the next one kept; -1: draw it */
	ReservoirStateData rstate;
	MemoryContext cxt;			/* where the rows kept live */
} Sample;

/* A shard's size as its state tells it */
typedef struct ShardSize
{
	double		updates;		/* of its parts */
	double		bytes;			/* their encoded bytes */
} ShardSize;

/* Sets size to the sums of state's parts. */
static void
state_size(const PsState *state, ShardSize *size)
{
	size->updates = 0;
	size->bytes = 0;
	for (int i = 0; i < state->nbatches; i++)
		for (int j = 0; j < state->batches[i].nparts; j++)
		{
			size->updates += state->batches[i].parts[j].nupdates;
			size->bytes += state->batches[i].parts[j].encoded_size;
		}
}

/*
 * Sets size from this process's last copy of a shard's state, which may
 * be older than the shard's; false if it has none.
 */
static bool
cached_size(const char *shard, ShardSize *size)
{
	MemoryContext cxt;
	MemoryContext old;
	PsState		state;
	int64		seqno;
	TransactionId xmin;
	bool		found;

	if (!ps_state_cache_version(shard, &seqno, &xmin))
		return false;
	cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink cached size",
								ALLOCSET_DEFAULT_SIZES);
	found = ps_state_cache_get(shard, seqno, xmin, &state, cxt);
	if (found)
	{
		old = MemoryContextSwitchTo(cxt);
		state_size(&state, size);
		MemoryContextSwitchTo(old);
	}
	MemoryContextDelete(cxt);
	return found;
}

/*
 * Reads a shard's size from its state as the active snapshot sees it (one
 * is taken if none is): this process's copy if current, else the row;
 * false if the shard does not exist.
 */
static bool
shard_size(const char *shard, ShardSize *size)
{
	bool		pushed = !ActiveSnapshotSet();
	PsState		state;
	bool		found;

	if (pushed)
		PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
	found = ps_consensus_read(shard, &state, CurrentMemoryContext, true);
	if (found)
		state_size(&state, size);
	SPI_finish();
	if (pushed)
		PopActiveSnapshot();
	return found;
}

/* Pages of a shard of size, as relpages counts them. */
static BlockNumber
shard_pages(const ShardSize *size)
{
	double		pages = ceil(size->bytes / BLCKSZ);

	return pages >= MaxBlockNumber ? MaxBlockNumber : (BlockNumber) pages;
}

/* The shard a foreign table names, or NULL: never raises. */
static const char *
table_shard(Oid relid)
{
	ForeignTable *ft = GetForeignTable(relid);
	ListCell   *lc;

	foreach(lc, ft->options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, "shard") == 0)
			return defGetString(def);
	}
	return NULL;
}

/*
 * Sets baserel->tuples and pages, a shard table's size before its
 * conditions: as the planner read them from pg_class if the table was
 * analyzed (reltuples >= 0); else, if the caller may read the shard, the
 * update count of its state as this process last read it (a scan reads
 * it anew), or read now if it has no copy; else fallback rows and no page.
 */
void
ps_fdw_estimate_size(RelOptInfo *baserel, Oid foreigntableid, double fallback)
{
	const char *shard;
	ShardSize	size;

	if (baserel->tuples >= 0)
		return;
	baserel->tuples = fallback;
	baserel->pages = 0;
	shard = table_shard(foreigntableid);
	if (shard == NULL || !ps_has_privilege(false, true) ||
		!ps_has_shard_right(shard, PS_SHARD_READ) ||
		!(cached_size(shard, &size) || shard_size(shard, &size)))
		return;
	baserel->tuples = size.updates;
	baserel->pages = shard_pages(&size);
}

/* A copy of tuple in the sample's memory. */
static HeapTuple
kept(Sample *s, HeapTuple tuple)
{
	MemoryContext old = MemoryContextSwitchTo(s->cxt);
	HeapTuple	copy = heap_copytuple(tuple);

	MemoryContextSwitchTo(old);
	return copy;
}

/* Keeps the next row read, tuple, in the sample, or not (postgres_fdw's rule). */
static void
sample_one(Sample *s, HeapTuple tuple)
{
	int			pos;

	s->samplerows += 1;
	if (s->numrows < s->targrows)
	{
		s->rows[s->numrows++] = kept(s, tuple);
		return;
	}
	if (s->rowstoskip < 0)
		s->rowstoskip = reservoir_get_next_S(&s->rstate, s->samplerows, s->targrows);
	if (s->rowstoskip <= 0)
	{
		pos = (int) (s->targrows * sampler_random_fract(&s->rstate.randstate));
		Assert(pos >= 0 && pos < s->targrows);
		heap_freetuple(s->rows[pos]);
		s->rows[pos] = kept(s, tuple);
	}
	s->rowstoskip -= 1;
}

/*
 * Reads n rows alike, tuple, into the sample: the rows the rule skips
 * are passed over together, so a large diff costs no more than the rows
 * it has kept.
 */
static void
sample_rows(Sample *s, HeapTuple tuple, int64 n)
{
	while (n > 0)
	{
		CHECK_FOR_INTERRUPTS();
		if (s->numrows >= s->targrows && s->rowstoskip > 0)
		{
			double		k = Min(s->rowstoskip, (double) n);

			s->samplerows += k;
			s->rowstoskip -= k;
			n -= (int64) k;
			continue;
		}
		sample_one(s, tuple);
		n--;
	}
}

/* The time the table is read as of, as a scan reads it. */
static int64
table_as_of(PsShardTable *t, const PsState *state)
{
	int64		as_of;

	if (ps_table_as_of[0] && ps_parse_time(ps_table_as_of, &as_of))
		return ps_snapshot_as_of(t->shard, state, false, as_of);
	return ps_snapshot_as_of(t->shard, state, !t->has_as_of, t->as_of);
}

/*
 * Reads the rows of update u (u->diff of them without a column diff, as a
 * scan does: PS004 if negative) into the sample.  Allocates in the current
 * memory context, reset by the caller after each update.
 */
static void
sample_update(Sample *s, PsShardTable *t, const PsUpdate *u, int64 as_of,
			  StringInfo buf, Datum *values, bool *isnull)
{
	HeapTuple	tuple;

	ps_fdw_update_to_row(t, u, as_of, buf, values, isnull);
	tuple = heap_form_tuple(t->desc, values, isnull);
	if (t->has_diff)
	{
		sample_rows(s, tuple, 1);
		return;
	}
	if (u->diff < 0)
		ereport(ERROR,
				(errcode(ERRCODE_PS_NEGATIVE_MULTIPLICITY),
				 errmsg("a row of shard \"%s\" has negative multiplicity " INT64_FORMAT,
						t->shard, u->diff),
				 errhint("Declare a column diff (bigint) in the foreign table to read the diffs as they are.")));
	sample_rows(s, tuple, u->diff);
}

/*
 * Reads every row of rel, a table of t->shard (options read), as a scan
 * would, into the sample.  Caller is connected to SPI, with an active
 * snapshot.
 */
static void
read_sample(Sample *s, Relation rel, PsShardTable *t, MemoryContext row_cxt)
{
	int			natts = RelationGetDescr(rel)->natts;
	Datum	   *values = palloc(sizeof(Datum) * Max(natts, 1));
	bool	   *isnull = palloc(sizeof(bool) * Max(natts, 1));
	StringInfoData buf;
	PsState		state;
	PsMerge    *m;
	PsUpdate	u;
	int64		as_of;

	initStringInfo(&buf);
	ps_consensus_read_or_error(t->shard, &state, CurrentMemoryContext, true);
	ps_fdw_table_bind(t, rel, &state, CurrentMemoryContext);
	as_of = table_as_of(t, &state);
	m = ps_merge_begin(t->shard, &state, PG_INT64_MIN, as_of, true);
	while (ps_merge_next_consolidated(m, false, PG_INT64_MIN, &u))
	{
		MemoryContext old = MemoryContextSwitchTo(row_cxt);

		sample_update(s, t, &u, as_of, &buf, values, isnull);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
	}
	ps_merge_end(m);
}

/*
 * The AcquireSampleRowsFunc: up to targrows rows of rel into rows, in the
 * caller's memory context, and the count of all its rows; none dead.
 * PostgreSQL runs it as the table's owner, whose snapshot() rights it
 * checks too: whoever may SELECT the table may read the statistics.
 */
static int
acquire_sample(Relation rel, int elevel, HeapTuple *rows, int targrows,
			   double *totalrows, double *totaldeadrows)
{
	Sample		s;
	PsShardTable t;
	bool		pushed = !ActiveSnapshotSet();
	MemoryContext row_cxt;

	ps_fdw_table_options(RelationGetRelid(rel), &t);
	ps_require_privilege(false, true, "snapshot");
	ps_require_shard_right(t.shard, PS_SHARD_READ, "snapshot");
	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink analyze row",
									ALLOCSET_DEFAULT_SIZES);
	memset(&s, 0, sizeof(Sample));
	s.rows = rows;
	s.targrows = targrows;
	s.rowstoskip = -1;
	s.cxt = CurrentMemoryContext;
	reservoir_init_selection_state(&s.rstate, targrows);
	if (pushed)
		PushActiveSnapshot(GetTransactionSnapshot());
	SPI_connect();
	read_sample(&s, rel, &t, row_cxt);
	SPI_finish();
	if (pushed)
		PopActiveSnapshot();
	MemoryContextDelete(row_cxt);
	*totalrows = s.samplerows;
	*totaldeadrows = 0;
	ereport(elevel,
			(errmsg("\"%s\": table contains %.0f rows, %d rows in sample",
					RelationGetRelationName(rel), s.samplerows, s.numrows)));
	return s.numrows;
}

/*
 * AnalyzeForeignTable: checks the caller's snapshot() rights on the
 * table's shard (42501, 42704) and gives its size in pages and the
 * sampling function.
 */
static bool
analyze_table(Relation rel, AcquireSampleRowsFunc *func, BlockNumber *totalpages)
{
	PsShardTable t;
	ShardSize	size;

	ps_fdw_table_options(RelationGetRelid(rel), &t);
	ps_require_privilege(false, true, "snapshot");
	ps_require_shard_right(t.shard, PS_SHARD_READ, "snapshot");
	*totalpages = shard_size(t.shard, &size) ? shard_pages(&size) : 0;
	*func = acquire_sample;
	return true;
}

/* Fills in the wrapper's routine that analyzes. */
void
ps_fdw_analyze_routine(FdwRoutine *routine)
{
	routine->AnalyzeForeignTable = analyze_table;
}
