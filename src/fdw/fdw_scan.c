/*-------------------------------------------------------------------------
 *
 * fdw_scan.c
 *	  Reads of a shard's foreign table: its snapshot, with conditions on
 *	  the key pushed down into the merge of the shard's parts.
 *
 * A scan reads the shard's snapshot as of persist_sink.as_of if set, else
 * the table's option as_of, else the shard's upper - 1 (as snapshot()
 * does).  It streams: its first row reads the shard's state and opens the
 * merge of its parts, and each row after is pulled from the merge as the
 * executor asks for it, so a LIMIT, an EXISTS or a cursor stops reading
 * where the query does, and memory holds a block of each part being
 * merged, whatever the shard's size.  The merge reads blocks with the
 * statement's snapshot, connecting to SPI only to read one.  A row whose
 * diff is n reads as n rows when the table has no column diff (a negative
 * diff then raises PS004), as one row with its diff when it has.
 *
 * For an untyped shard's table whose column key is bytea, the planner
 * pushes down the conditions key = x, key < x, key <= x, key > x and
 * key >= x (BETWEEN is two of them; x a constant or a parameter): the
 * merge then never opens a part whose keys all sort past the range, and
 * leaves each part once its keys pass it (PsKeyRange).  Every condition
 * is also checked on each row, so the pushdown only saves reading.
 * EXPLAIN shows the pushed conditions; EXPLAIN ANALYZE also the parts
 * opened, skipped and left early.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_type.h"
#include "commands/explain.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/cost.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/paths.h"
#include "optimizer/planmain.h"
#include "optimizer/restrictinfo.h"
#include "port/atomics.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "base/base.h"
#include "base/settings.h"
#include "fdw/fdw.h"
#include "shard/read.h"
#include "sql/sql.h"
#include "store/store.h"

/* Rows the planner expects of a scan before its conditions, size unknown */
#define EXPECTED_ROWS	100000

/* What the plan passes to the scan (fdw_private): the pushed conditions */
enum PlanItem
{
	PLAN_STRATEGIES,			/* List of btree strategies, one per fdw_exprs
								 * item (its comparison value) */
	PLAN_SHOWN,					/* String: the conditions, for EXPLAIN */
	PLAN_COLUMNS				/* int List: the 0-based columns the query
								 * uses (NIL with a whole-row reference: all) */
};

/* A scan of a shard's foreign table */
typedef struct TableScan
{
	PsShardTable table;
	Relation	rel;
	List	   *strategies;
	List	   *values;			/* ExprState of each comparison value */
	List	   *columns;		/* the columns the query uses (PLAN_COLUMNS) */
	MemoryContext scan_cxt;		/* the state and the merge; reset by rescan */
	MemoryContext row_cxt;		/* the row being returned */
	PsMerge    *merge;			/* NULL before the first row, and at the end */
	bool		started;
	const PsState *state;		/* the state read, lent to scan_cxt or in it */
	bool		any;			/* the pushed conditions may match */
	PsKeyRange	range;			/* the keys they allow */
	/* a parallel scan's ranges of keys, taken in turn by every process */
	pg_atomic_uint32 *next_split;	/* in shared memory; NULL if not parallel */
	int			ncuts;
	char	  **cuts;
	uint32	   *cut_lens;
	int			ranges_read;	/* by this process */
	Datum	   *row_values;		/* the row being returned, in row_cxt */
	bool	   *row_isnull;
	int64		repeats_left;	/* times it is yet to be returned */
	StringInfoData buf;
	StringInfoData row_bytes;	/* the row's key and val */
	int64		as_of;
	uint64		parts;			/* of the state read */
	PsMergeParts read;
} TableScan;

/*
 * The btree strategy of `key op value` if clause is one on rel's column
 * key (bytea), with value a constant or a parameter; 0 otherwise.
 */
static int
key_condition(Expr *clause, Index relid, int key_attno, Expr **value)
{
	OpExpr	   *op;
	Expr	   *left;
	Expr	   *right;
	Oid			opno;
	int			strategy;

	if (!IsA(clause, OpExpr) || list_length(((OpExpr *) clause)->args) != 2)
		return 0;
	op = (OpExpr *) clause;
	left = linitial(op->args);
	right = lsecond(op->args);
	opno = op->opno;
	if (!(IsA(left, Var) && ((Var *) left)->varno == relid &&
		  ((Var *) left)->varattno == key_attno))
	{
		Expr	   *swap = left;

		left = right;
		right = swap;
		opno = get_commutator(opno);
		if (!OidIsValid(opno) || !IsA(left, Var) ||
			((Var *) left)->varno != relid || ((Var *) left)->varattno != key_attno)
			return 0;
	}
	if (((Var *) left)->varlevelsup != 0 || !(IsA(right, Const) || IsA(right, Param)))
		return 0;
	strategy = get_op_opfamily_strategy(opno, BYTEA_BTREE_FAM_OID);
	if (strategy < BTLessStrategyNumber || strategy > BTGreaterStrategyNumber)
		return 0;
	*value = right;
	return strategy;
}

/* GetForeignRelSize: the shard's size (fdw_analyze.c), narrowed by the conditions. */
static void
rel_size(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	ps_fdw_estimate_size(baserel, foreigntableid, EXPECTED_ROWS);
	baserel->rows = clamp_row_est(baserel->tuples *
								  clauselist_selectivity(root, baserel->baserestrictinfo,
														 0, JOIN_INNER, NULL));
}

/* Cost of a scan's row: the merge's and the row's making */
#define ROW_COST	(cpu_tuple_cost * 10)

/*
 * GetForeignPaths: a scan of the snapshot, and, where the query may run in
 * parallel, a scan whose processes take ranges of keys in turn.
 */
static void
paths(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid)
{
	Cost		startup = 10;
	Cost		total = startup + baserel->rows * ROW_COST;
	int			workers;

	add_path(baserel, (Path *) create_foreignscan_path(root, baserel, NULL,
													   baserel->rows, startup, total,
													   NIL, NULL, NULL, NIL));
	if (!baserel->consider_parallel)
		return;
	workers = compute_parallel_worker(baserel, baserel->pages, -1,
									  max_parallel_workers_per_gather);
	if (workers > 0)
	{
		double		share = workers + (parallel_leader_participation ? 1 : 0);
		ForeignPath *path = create_foreignscan_path(root, baserel, NULL,
													clamp_row_est(baserel->rows / share),
													startup, startup + baserel->rows * ROW_COST / share,
													NIL, NULL, NULL, NIL);

		path->path.parallel_aware = true;
		path->path.parallel_safe = true;
		path->path.parallel_workers = workers;
		add_partial_path(baserel, (Path *) path);
	}
}

/* IsForeignScanParallelSafe: a scan reads with the statement's snapshot only. */
static bool
parallel_safe(PlannerInfo *root, RelOptInfo *rel, RangeTblEntry *rte)
{
	return true;
}

/* EstimateDSMForeignScan: the counter of ranges taken. */
static Size
parallel_size(ForeignScanState *node, ParallelContext *pcxt)
{
	return sizeof(pg_atomic_uint32);
}

/* InitializeDSMForeignScan: no range taken yet. */
static void
parallel_start(ForeignScanState *node, ParallelContext *pcxt, void *coordinate)
{
	TableScan  *ts = (TableScan *) node->fdw_state;

	ts->next_split = (pg_atomic_uint32 *) coordinate;
	pg_atomic_init_u32(ts->next_split, 0);
}

/* ReInitializeDSMForeignScan: a rescan takes the ranges from the first again. */
static void
parallel_restart(ForeignScanState *node, ParallelContext *pcxt, void *coordinate)
{
	pg_atomic_write_u32((pg_atomic_uint32 *) coordinate, 0);
}

/* InitializeWorkerForeignScan: the worker takes ranges with the others. */
static void
parallel_join(ForeignScanState *node, shm_toc *toc, void *coordinate)
{
	((TableScan *) node->fdw_state)->next_split = (pg_atomic_uint32 *) coordinate;
}

/* The text EXPLAIN shows for key `strategy` value. */
static const char *
shown_condition(int strategy, Expr *value)
{
	static const char *const ops[] = {"", "<", "<=", "=", ">=", ">"};

	if (IsA(value, Param))
		return psprintf("key %s $%d", ops[strategy], ((Param *) value)->paramid);
	if (((Const *) value)->constisnull)
		return psprintf("key %s NULL", ops[strategy]);
	return psprintf("key %s '%s'", ops[strategy],
					OidOutputFunctionCall(F_BYTEAOUT, ((Const *) value)->constvalue));
}

/*
 * The 0-based columns of baserel that the query uses, in its output or its
 * conditions; NIL if it uses the whole row (then every column).
 */
static List *
used_columns(RelOptInfo *baserel)
{
	Bitmapset  *attrs = NULL;
	List	   *columns = NIL;
	ListCell   *lc;
	int			attno = -1;

	pull_varattnos((Node *) baserel->reltarget->exprs, baserel->relid, &attrs);
	foreach(lc, baserel->baserestrictinfo)
		pull_varattnos((Node *) lfirst_node(RestrictInfo, lc)->clause,
					   baserel->relid, &attrs);
	if (bms_is_member(0 - FirstLowInvalidHeapAttributeNumber, attrs))
		return NIL;
	while ((attno = bms_next_member(attrs, attno)) >= 0)
	{
		int			column = attno + FirstLowInvalidHeapAttributeNumber - 1;

		if (column >= 0)
			columns = lappend_int(columns, column);
	}
	/* no column at all (count(*) of the rows): a marker that none is used */
	return columns ? columns : list_make1_int(-1);
}

/*
 * GetForeignPlan: the conditions on the key are pushed down (and still
 * checked on each row, with every other condition).
 */
static ForeignScan *
plan(PlannerInfo *root, RelOptInfo *baserel, Oid foreigntableid,
	 ForeignPath *best_path, List *tlist, List *scan_clauses, Plan *outer_plan)
{
	Relation	rel;
	int			key_column;
	List	   *values = NIL;
	List	   *strategies = NIL;
	StringInfoData shown;
	ListCell   *lc;

	if (IS_UPPER_REL(baserel))
		return ps_fdw_aggregate_plan(root, baserel, best_path, tlist, outer_plan);
	rel = table_open(foreigntableid, NoLock);
	key_column = ps_fdw_key_column(rel);
	table_close(rel, NoLock);
	initStringInfo(&shown);
	foreach(lc, scan_clauses)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);
		Expr	   *value;
		int			strategy = key_column < 0 ? 0 :
			key_condition(ri->clause, baserel->relid, key_column + 1, &value);

		if (strategy == 0)
			continue;
		values = lappend(values, value);
		strategies = lappend_int(strategies, strategy);
		appendStringInfo(&shown, "%s%s", shown.len ? " AND " : "",
						 shown_condition(strategy, value));
	}
	return make_foreignscan(tlist, extract_actual_clauses(scan_clauses, false),
							baserel->relid, values,
							/* in the order of PlanItem */
							list_make3(strategies, makeString(shown.data),
									   used_columns(baserel)),
							NIL, NIL, outer_plan);
}

/* BeginForeignScan: checks the caller's rights (those of snapshot()). */
static void
begin_scan(ForeignScanState *node, int eflags)
{
	ForeignScan *fs = (ForeignScan *) node->ss.ps.plan;
	TableScan  *ts;
	int			natts;

	if (ps_fdw_aggregate_planned(fs))
	{
		ps_fdw_aggregate_begin(node, eflags);
		return;
	}
	ts = palloc0(sizeof(TableScan));
	node->fdw_state = ts;
	ts->rel = node->ss.ss_currentRelation;
	natts = RelationGetDescr(ts->rel)->natts;
	ps_fdw_table_options(RelationGetRelid(ts->rel), &ts->table);
	ts->strategies = list_nth(fs->fdw_private, PLAN_STRATEGIES);
	ts->columns = list_nth(fs->fdw_private, PLAN_COLUMNS);
	ts->values = ExecInitExprList(fs->fdw_exprs, (PlanState *) node);
	ts->scan_cxt = AllocSetContextCreate(CurrentMemoryContext,
										 "persist_sink table scan",
										 ALLOCSET_DEFAULT_SIZES);
	ts->row_cxt = AllocSetContextCreate(CurrentMemoryContext,
										"persist_sink table row",
										ALLOCSET_DEFAULT_SIZES);
	ts->row_values = palloc(sizeof(Datum) * Max(natts, 1));
	ts->row_isnull = palloc(sizeof(bool) * Max(natts, 1));
	initStringInfo(&ts->buf);
	initStringInfo(&ts->row_bytes);
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	ps_require_privilege(false, true, "snapshot");
	ps_require_shard_right(ts->table.shard, PS_SHARD_READ, "snapshot");
}

/*
 * Narrows range by `key strategy value`; false if no key can satisfy it
 * (a NULL value).
 */
static bool
narrow_range(PsKeyRange *range, int strategy, Datum value, bool isnull)
{
	bytea	   *b;
	const char *data;
	uint32		len;
	bool		lower = strategy >= BTEqualStrategyNumber;
	bool		upper = strategy <= BTEqualStrategyNumber;
	bool		inclusive = strategy != BTLessStrategyNumber &&
		strategy != BTGreaterStrategyNumber;

	if (isnull)
		return false;
	b = DatumGetByteaPP(value);
	data = VARDATA_ANY(b);
	len = VARSIZE_ANY_EXHDR(b);
	if (lower)
	{
		int			c = range->has_lower ?
			ps_bytes_cmp(data, len, range->lower, range->lower_len) : 1;

		if (c > 0 || (c == 0 && !inclusive))
		{
			range->has_lower = true;
			range->lower = data;
			range->lower_len = len;
			range->lower_inclusive = inclusive;
		}
	}
	if (upper)
	{
		int			c = range->has_upper ?
			ps_bytes_cmp(data, len, range->upper, range->upper_len) : -1;

		if (c < 0 || (c == 0 && !inclusive))
		{
			range->has_upper = true;
			range->upper = data;
			range->upper_len = len;
			range->upper_inclusive = inclusive;
		}
	}
	return true;
}

/*
 * The range of keys the pushed conditions allow (their values evaluated
 * now); false if none can match.
 */
static bool
key_range(ForeignScanState *node, TableScan *ts, PsKeyRange *range)
{
	ExprContext *econtext = node->ss.ps.ps_ExprContext;
	ListCell   *lv;
	ListCell   *ls;

	memset(range, 0, sizeof(PsKeyRange));
	forboth(lv, ts->values, ls, ts->strategies)
	{
		bool		isnull;
		Datum		value = ExecEvalExpr((ExprState *) lfirst(lv), econtext, &isnull);

		if (!narrow_range(range, lfirst_int(ls), value, isnull))
			return false;
	}
	return true;
}

/*
 * Opens the merge of the snapshot's parts, in the scan's context, that
 * reads the keys the conditions allow: all of them, or, in a parallel
 * scan, those of the next range no process took yet.  False once there is
 * nothing (more) to read.
 */
static bool
open_merge(TableScan *ts)
{
	MemoryContext old;
	PsKeyRange	range = ts->range;

	if (!ts->any)
		return false;
	if (ts->next_split)
	{
		int			index;

		do
		{
			index = (int) pg_atomic_fetch_add_u32(ts->next_split, 1);
			if (index > ts->ncuts)
				return false;
			range = ts->range;
		} while (!ps_key_split_range(&range, index, ts->ncuts, ts->cuts, ts->cut_lens));
	}
	else
		ts->any = false;		/* one merge reads it all */
	ts->ranges_read++;
	old = MemoryContextSwitchTo(ts->scan_cxt);
	ts->merge = ps_merge_begin_keys(ts->table.shard, ts->state, PG_INT64_MIN,
									ts->as_of, true, &range);
	ps_merge_connect_spi(ts->merge);
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * Starts the scan: reads the shard's state with the statement's snapshot
 * into the scan's context, where the merges stay, each reading a block of
 * a part only once the rows reach it.
 */
static void
start_scan(ForeignScanState *node, TableScan *ts)
{
	MemoryContext old = MemoryContextSwitchTo(ts->scan_cxt);

	ts->started = true;
	ts->any = key_range(node, ts, &ts->range);
	SPI_connect();
	MemoryContextSwitchTo(ts->scan_cxt);
	ts->state = ps_consensus_read_lent(ts->table.shard, ts->scan_cxt);
	if (ts->table.desc == NULL)
	{
		ps_fdw_table_bind(&ts->table, ts->rel, ts->state,
						  GetMemoryChunkContext(ts));
		ps_fdw_table_use_columns(&ts->table, ts->columns,
								 GetMemoryChunkContext(ts));
		ts->table.row_bytes = &ts->row_bytes;
	}
	ts->as_of = ps_fdw_table_as_of(&ts->table, ts->state);
	for (int i = 0; i < ts->state->nbatches; i++)
		ts->parts += ts->state->batches[i].nparts;
	/* a typed shard's key is its row's send form: no key column to push on */
	if (OidIsValid(ts->table.row_type))
		memset(&ts->range, 0, sizeof(PsKeyRange));
	if (!ts->any)
		ts->read.skipped = ts->parts;
	if (ts->next_split)
		ts->ncuts = ps_key_splits(ts->state, PG_INT64_MIN, ts->as_of,
								  &ts->cuts, &ts->cut_lens);
	SPI_finish();
	MemoryContextSwitchTo(old);
}

/* Ends the scan's merge, keeping what it read for EXPLAIN ANALYZE. */
static void
finish_merge(TableScan *ts)
{
	PsMergeParts read;

	if (ts->merge == NULL)
		return;
	read = ps_merge_parts(ts->merge);
	ps_merge_parts_add(&ts->read, &read);
	ps_merge_end(ts->merge);
	ts->merge = NULL;
}

/*
 * Reads the next update of the snapshot into the scan's row (row_cxt),
 * and how many times it is to be returned; false at the end.
 */
static bool
next_row(TableScan *ts)
{
	MemoryContext old;
	PsUpdate	u;

	MemoryContextReset(ts->row_cxt);
	for (;;)
	{
		if (ts->merge == NULL && !open_merge(ts))
			return false;
		if (ps_merge_next_consolidated(ts->merge, false, PG_INT64_MIN, &u))
			break;
		finish_merge(ts);
	}
	if (!ts->table.has_diff && u.diff < 0)
		ps_fdw_raise_negative(ts->table.shard, u.diff);
	old = MemoryContextSwitchTo(ts->row_cxt);
	ps_fdw_update_to_row(&ts->table, &u, ts->as_of, &ts->buf, ts->row_values,
						 ts->row_isnull);
	MemoryContextSwitchTo(old);
	/* a table without a column diff reads an update of diff n as n rows */
	ts->repeats_left = ts->table.has_diff ? 1 : u.diff;
	return true;
}

/*
 * IterateForeignScan: the next row of the snapshot, pulled from the merge
 * as the executor asks (so LIMIT, EXISTS and cursors stop reading early).
 */
static TupleTableSlot *
iterate(ForeignScanState *node)
{
	TableScan  *ts = (TableScan *) node->fdw_state;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;
	int			natts = slot->tts_tupleDescriptor->natts;

	if (ps_fdw_aggregate_planned((ForeignScan *) node->ss.ps.plan))
		return ps_fdw_aggregate_next(node);
	if (!ts->started)
		start_scan(node, ts);
	while (ts->repeats_left == 0)
	{
		CHECK_FOR_INTERRUPTS();
		if (!next_row(ts))
			return ExecClearTuple(slot);
	}
	ts->repeats_left--;
	ExecClearTuple(slot);
	memcpy(slot->tts_values, ts->row_values, sizeof(Datum) * natts);
	memcpy(slot->tts_isnull, ts->row_isnull, sizeof(bool) * natts);
	return ExecStoreVirtualTuple(slot);
}

/* Forgets the scan's state and merge, so that its next row starts again. */
static void
reset_scan(TableScan *ts)
{
	finish_merge(ts);
	MemoryContextReset(ts->row_cxt);
	MemoryContextReset(ts->scan_cxt);
	ts->started = false;
	ts->ranges_read = 0;
	ts->repeats_left = 0;
	ts->parts = 0;
	memset(&ts->read, 0, sizeof(PsMergeParts));
}

/* ReScanForeignScan: read again, from a new snapshot if parameters changed. */
static void
rescan(ForeignScanState *node)
{
	if (ps_fdw_aggregate_planned((ForeignScan *) node->ss.ps.plan))
		ps_fdw_aggregate_rescan(node);
	else
		reset_scan((TableScan *) node->fdw_state);
}

/* EndForeignScan. */
static void
end_scan(ForeignScanState *node)
{
	TableScan  *ts = (TableScan *) node->fdw_state;

	if (ps_fdw_aggregate_planned((ForeignScan *) node->ss.ps.plan))
		ps_fdw_aggregate_end(node);
	else if (ts)
		finish_merge(ts);
}

/* ExplainForeignScan: the shard, the pushed conditions, what they saved. */
static void
explain(ForeignScanState *node, ExplainState *es)
{
	ForeignScan *fs = (ForeignScan *) node->ss.ps.plan;
	TableScan  *ts = (TableScan *) node->fdw_state;
	const char *shown;

	if (ps_fdw_aggregate_planned(fs))
	{
		ps_fdw_aggregate_explain(node, es);
		return;
	}
	shown = strVal(list_nth(fs->fdw_private, PLAN_SHOWN));

	ExplainPropertyText("Shard", ts->table.shard, es);
	if (shown[0])
		ExplainPropertyText("Key Condition", shown, es);
	if (es->analyze && ts->started)
	{
		PsMergeParts read = ts->read;

		if (ts->merge)
		{
			PsMergeParts now = ps_merge_parts(ts->merge);

			ps_merge_parts_add(&read, &now);
		}

		ExplainPropertyInteger("As Of", NULL, ts->as_of, es);
		if (ts->next_split)
			ExplainPropertyText("Parts",
								psprintf("%llu of %llu opened, in %d of %d key ranges",
										 (unsigned long long) read.opened,
										 (unsigned long long) ts->parts,
										 ts->ranges_read, ts->ncuts + 1), es);
		else
			ExplainPropertyText("Parts",
								psprintf("%llu of %llu opened, %llu skipped, %llu left early",
										 (unsigned long long) read.opened,
										 (unsigned long long) ts->parts,
										 (unsigned long long) read.skipped,
										 (unsigned long long) read.cut_short), es);
		if (shown[0] && read.blocks.decoded + read.blocks.from_cache +
			read.blocks.passed + read.blocks.filtered > 0)
			ExplainPropertyText("Blocks",
								psprintf("%llu decoded, %llu from the cache, %llu passed by their bounds, %llu by their key filters",
										 (unsigned long long) read.blocks.decoded,
										 (unsigned long long) read.blocks.from_cache,
										 (unsigned long long) read.blocks.passed,
										 (unsigned long long) read.blocks.filtered), es);
	}
}

/* Fills in the wrapper's routines that read. */
void
ps_fdw_scan_routine(FdwRoutine *routine)
{
	routine->GetForeignRelSize = rel_size;
	routine->GetForeignPaths = paths;
	routine->GetForeignPlan = plan;
	routine->BeginForeignScan = begin_scan;
	routine->IterateForeignScan = iterate;
	routine->ReScanForeignScan = rescan;
	routine->EndForeignScan = end_scan;
	routine->ExplainForeignScan = explain;
	routine->IsForeignScanParallelSafe = parallel_safe;
	routine->EstimateDSMForeignScan = parallel_size;
	routine->InitializeDSMForeignScan = parallel_start;
	routine->ReInitializeDSMForeignScan = parallel_restart;
	routine->InitializeWorkerForeignScan = parallel_join;
	ps_fdw_aggregate_routine(routine);
}
