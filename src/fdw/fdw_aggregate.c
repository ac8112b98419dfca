/*-------------------------------------------------------------------------
 *
 * fdw_aggregate.c
 *	  Aggregates of a shard's foreign table answered by the wrapper:
 *	  count(*), sum, min and max of bigint columns, over the whole snapshot.
 *
 * The planner offers (GetForeignUpperPaths) a query whose only grouping is
 * the whole table (no GROUP BY, HAVING or WHERE) and whose outputs are
 * those aggregates, without DISTINCT, ORDER BY or FILTER, to the wrapper.
 * The wrapper then computes them itself, in one of two ways:
 *
 * - From the state alone, when that is exact: every part the snapshot
 *   reads is positive (every diff above 0, see part.h) and holds no time
 *   past the snapshot's as_of, and their diff sums add up to a bigint.
 *   Then nothing cancels: the snapshot holds sum(diff_sum) rows counted
 *   with their multiplicity, its diffs sum to that, and every row's time
 *   is as_of.  So count(*) of a table without a column diff, sum(diff) and
 *   min or max of "time" cost a read of the state, whatever the shard's
 *   size.
 * - Otherwise from a merge of the parts, as a scan reads them, but without
 *   making a row of each update unless an aggregate needs a column that is
 *   a field of a typed shard's rows.
 *
 * Either way the result is the one the executor would compute from the
 * scan's rows, errors included (a negative multiplicity without a column
 * diff raises PS004, a diff that leaves bigint 22003).  EXPLAIN names the
 * aggregates; EXPLAIN ANALYZE also says which way they were computed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_type.h"
#include "commands/explain.h"
#include "common/int128.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/planmain.h"
#include "optimizer/tlist.h"
#include "parser/parsetree.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "base/base.h"
#include "codec/diff_sum.h"
#include "fdw/fdw.h"
#include "shard/read.h"
#include "sql/sql.h"
#include "store/store.h"

/* An aggregate the wrapper computes */
typedef enum AggKind
{
	AGG_COUNT,					/* count(*) */
	AGG_SUM,					/* sum(column), a bigint column */
	AGG_MIN,
	AGG_MAX
} AggKind;

/* What the plan passes to the scan (fdw_private), in this order */
enum AggPlanItem
{
	AGG_PLAN_RELID,				/* OID list of one: the foreign table */
	AGG_PLAN_KINDS,				/* int list: AggKind of each output */
	AGG_PLAN_COLUMNS,			/* int list: 0-based column of each (or -1) */
	AGG_PLAN_SHOWN				/* String: the aggregates, for EXPLAIN */
};

/* The running value of one aggregate */
typedef struct AggValue
{
	AggKind		kind;
	int			column;
	bool		any;			/* min/max: a row was seen */
	int64		extreme;		/* min/max so far */
	INT128		sum;			/* sum */
} AggValue;

/* A scan that returns the aggregates of a table's snapshot */
typedef struct AggScan
{
	PsShardTable table;
	Relation	rel;
	int			naggs;
	AggValue   *aggs;
	INT128		rows;			/* rows of the snapshot, with multiplicity */
	bool		done;
	bool		from_state;		/* computed from the state alone */
	uint64		parts;
} AggScan;

/*
 * The kind of aggregate aggref is, with its column (0-based, -1 for none)
 * if it is one the wrapper computes for rel's table relid, else -1.
 */
static int
agg_kind(Aggref *aggref, Index relid, Relation rel, int *column)
{
	TargetEntry *arg;
	Var		   *var;

	*column = -1;
	if (aggref->aggfilter || aggref->aggdistinct || aggref->aggorder ||
		aggref->aggdirectargs || aggref->aggkind != AGGKIND_NORMAL ||
		aggref->agglevelsup != 0)
		return -1;
	if (aggref->aggfnoid == F_COUNT_)
		return AGG_COUNT;
	if (aggref->aggfnoid != F_SUM_INT8 && aggref->aggfnoid != F_MIN_INT8 &&
		aggref->aggfnoid != F_MAX_INT8)
		return -1;
	if (list_length(aggref->args) != 1)
		return -1;
	arg = linitial_node(TargetEntry, aggref->args);
	if (!IsA(arg->expr, Var))
		return -1;
	var = (Var *) arg->expr;
	if (var->varno != relid || var->varlevelsup != 0 || var->varattno < 1 ||
		var->varattno > RelationGetDescr(rel)->natts ||
		TupleDescAttr(RelationGetDescr(rel), var->varattno - 1)->atttypid != INT8OID)
		return -1;
	*column = var->varattno - 1;
	return aggref->aggfnoid == F_SUM_INT8 ? AGG_SUM :
		aggref->aggfnoid == F_MIN_INT8 ? AGG_MIN : AGG_MAX;
}

/*
 * GetForeignUpperPaths: a path that computes the query's aggregates in the
 * wrapper, if the query only aggregates the whole table with ones it
 * knows.
 */
static void
upper_paths(PlannerInfo *root, UpperRelationKind stage, RelOptInfo *input_rel,
			RelOptInfo *output_rel, void *extra)
{
	Query	   *parse = root->parse;
	PathTarget *target = root->upper_targets[UPPERREL_GROUP_AGG];
	List	   *kinds = NIL;
	List	   *columns = NIL;
	StringInfoData shown;
	Relation	rel;
	ListCell   *lc;
	Oid			relid;

	if (stage != UPPERREL_GROUP_AGG || input_rel->reloptkind != RELOPT_BASEREL ||
		parse->groupClause || parse->groupingSets || parse->havingQual ||
		input_rel->baserestrictinfo != NIL || target == NULL ||
		target->exprs == NIL)
		return;
	relid = planner_rt_fetch(input_rel->relid, root)->relid;
	rel = table_open(relid, NoLock);
	initStringInfo(&shown);
	foreach(lc, target->exprs)
	{
		int			column;
		int			kind = IsA(lfirst(lc), Aggref) ?
			agg_kind(lfirst_node(Aggref, lc), input_rel->relid, rel, &column) : -1;

		if (kind < 0)
		{
			kinds = NIL;
			break;
		}
		kinds = lappend_int(kinds, kind);
		columns = lappend_int(columns, column);
		appendStringInfo(&shown, "%s%s(%s)", shown.len ? ", " : "",
						 kind == AGG_COUNT ? "count" : kind == AGG_SUM ? "sum" :
						 kind == AGG_MIN ? "min" : "max",
						 column < 0 ? "*" :
						 quote_identifier(NameStr(TupleDescAttr(RelationGetDescr(rel), column)->attname)));
	}
	table_close(rel, NoLock);
	if (kinds == NIL)
		return;
	add_path(output_rel, (Path *)
			 create_foreign_upper_path(root, output_rel, target, 1, 10, 10, NIL, NULL,
									   list_make4(list_make1_oid(relid), kinds, columns,
												  makeString(shown.data))));
}

/*
 * GetForeignPlan for an upper relation: a scan of no relation whose one
 * row holds the aggregates, in the order of the path's target.
 */
ForeignScan *
ps_fdw_aggregate_plan(PlannerInfo *root, RelOptInfo *rel, ForeignPath *path,
					  List *tlist, Plan *outer_plan)
{
	List	   *scan_tlist = add_to_flat_tlist(NIL, path->path.pathtarget->exprs);

	return make_foreignscan(tlist, NIL, 0, NIL, path->fdw_private, scan_tlist,
							NIL, outer_plan);
}

/* True if a plan is one of ps_fdw_aggregate_plan's. */
bool
ps_fdw_aggregate_planned(ForeignScan *fs)
{
	return fs->scan.scanrelid == 0;
}

/* BeginForeignScan of an aggregate scan: the table and the caller's rights. */
void
ps_fdw_aggregate_begin(ForeignScanState *node, int eflags)
{
	ForeignScan *fs = (ForeignScan *) node->ss.ps.plan;
	AggScan    *as = palloc0(sizeof(AggScan));
	List	   *kinds = list_nth(fs->fdw_private, AGG_PLAN_KINDS);
	List	   *columns = list_nth(fs->fdw_private, AGG_PLAN_COLUMNS);
	Oid			relid = linitial_oid(list_nth(fs->fdw_private, AGG_PLAN_RELID));

	node->fdw_state = as;
	/* the executor locked it, as every table of the query */
	as->rel = table_open(relid, NoLock);
	ps_fdw_table_options(relid, &as->table);
	as->naggs = list_length(kinds);
	as->aggs = palloc0(sizeof(AggValue) * as->naggs);
	for (int i = 0; i < as->naggs; i++)
	{
		as->aggs[i].kind = list_nth_int(kinds, i);
		as->aggs[i].column = list_nth_int(columns, i);
	}
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	ps_require_privilege(false, true, "snapshot");
	ps_require_shard_right(as->table.shard, PS_SHARD_READ, "snapshot");
}

/* What column `column` of the table holds (PS_COLUMN_*), -1 for none. */
static int
column_kind(const AggScan *as, int column)
{
	return column < 0 ? -1 : (int) as->table.kind[column];
}

/* Orders parts by their lower bounds. */
static int
part_lower_cmp(const void *a, const void *b)
{
	const PsPart *pa = *(const PsPart *const *) a;
	const PsPart *pb = *(const PsPart *const *) b;

	return ps_bytes_cmp(pa->lower, pa->lower_len, pb->lower, pb->lower_len);
}

/*
 * True if no key is in two of the n parts: sorted by their lower bounds,
 * each ends before the next (ps_part_ends_before).  Sorts parts.
 */
static bool
parts_disjoint(const PsPart **parts, int n)
{
	qsort(parts, n, sizeof(PsPart *), part_lower_cmp);
	for (int i = 1; i < n; i++)
		if (!ps_part_ends_before(parts[i - 1], parts[i]))
			return false;
	return true;
}

/*
 * True if the state alone gives the aggregates (see the file's comment):
 * then the snapshot's rows (with multiplicity, for a table without diff)
 * are in *rows and its diffs' sum in *diffs.  count(*) of a table with a
 * column diff counts its (key, val)s: from the state, the parts' updates,
 * when no part holds a (key, val) twice and no key is in two parts.
 */
static bool
rows_from_state(const AggScan *as, const PsState *state, int64 as_of,
				INT128 *rows, INT128 *diffs)
{
	PsDiffSum	sum = ps_diff_sum_of(0);
	INT128		updates = int64_to_int128(0);
	bool		count_keyvals = false;
	const PsPart **parts = NULL;
	int			nparts = 0;

	for (int i = 0; i < as->naggs; i++)
	{
		int			kind = column_kind(as, as->aggs[i].column);

		count_keyvals |= as->aggs[i].kind == AGG_COUNT && as->table.has_diff;
		if (as->aggs[i].kind == AGG_SUM ? kind != PS_COLUMN_DIFF :
			as->aggs[i].kind != AGG_COUNT && kind != PS_COLUMN_TIME)
			return false;
	}
	if (count_keyvals)
	{
		for (int i = 0; i < state->nbatches; i++)
			nparts += state->batches[i].nparts;
		parts = palloc(sizeof(PsPart *) * Max(nparts, 1));
		nparts = 0;
	}
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		if (b->lower > as_of)
			continue;
		for (int j = 0; j < b->nparts; j++)
		{
			const PsPart *p = &b->parts[j];
			bool		in_time = b->single_time ? b->time <= as_of :
				p->has_time ? p->time <= as_of : b->upper - 1 <= as_of;

			if (!p->positive || !in_time || (count_keyvals && !p->distinct))
				return false;
			ps_diff_sum_add(&sum, p->diff_sum);
			int128_add_int64(&updates, (int64) p->nupdates);
			if (count_keyvals)
				parts[nparts++] = p;
		}
	}
	if (!ps_diff_sum_fits(sum) || (count_keyvals && !parts_disjoint(parts, nparts)))
		return false;
	*diffs = sum;
	*rows = as->table.has_diff ? updates : sum;
	return true;
}

/* Takes value, at multiplicity times, into an aggregate. */
static void
agg_add(AggValue *a, int64 value, int64 multiplicity)
{
	switch (a->kind)
	{
		case AGG_COUNT:
			break;
		case AGG_SUM:
			int128_add_int64_mul_int64(&a->sum, value, multiplicity);
			break;
		case AGG_MIN:
		case AGG_MAX:
			if (!a->any || (a->kind == AGG_MIN ? value < a->extreme : value > a->extreme))
				a->extreme = value;
			a->any = true;
			break;
	}
}

/* True if an aggregate needs the rows made (a field of a typed shard's rows). */
static bool
needs_rows(const AggScan *as)
{
	for (int i = 0; i < as->naggs; i++)
	{
		int			kind = column_kind(as, as->aggs[i].column);

		if (kind >= 0 && kind != PS_COLUMN_DIFF && kind != PS_COLUMN_TIME)
			return true;
	}
	return false;
}

/*
 * Computes the aggregates from a merge of the snapshot's parts, as a scan
 * would read its rows.  Caller is connected to SPI.
 */
static void
aggregate_merge(AggScan *as, const PsState *state, int64 as_of)
{
	MemoryContext row_cxt = AllocSetContextCreate(CurrentMemoryContext,
												  "persist_sink aggregate row",
												  ALLOCSET_DEFAULT_SIZES);
	int			natts = RelationGetDescr(as->rel)->natts;
	Datum	   *values = palloc0(sizeof(Datum) * Max(natts, 1));
	bool	   *isnull = palloc0(sizeof(bool) * Max(natts, 1));
	bool		rows = needs_rows(as);
	StringInfoData buf;
	PsMerge    *m;
	PsUpdate	u;

	initStringInfo(&buf);
	m = ps_merge_begin(as->table.shard, state, PG_INT64_MIN, as_of, true);
	while (ps_merge_next_consolidated(m, false, PG_INT64_MIN, &u))
	{
		int64		multiplicity = as->table.has_diff ? 1 : u.diff;

		CHECK_FOR_INTERRUPTS();
		if (!as->table.has_diff && u.diff < 0)
			ps_fdw_raise_negative(as->table.shard, u.diff);
		if (rows)
		{
			MemoryContext old = MemoryContextSwitchTo(row_cxt);

			MemoryContextReset(row_cxt);
			ps_fdw_update_to_row(&as->table, &u, as_of, &buf, values, isnull);
			MemoryContextSwitchTo(old);
		}
		int128_add_int64(&as->rows, multiplicity);
		for (int i = 0; i < as->naggs; i++)
		{
			AggValue   *a = &as->aggs[i];
			int			kind = column_kind(as, a->column);

			if (a->column < 0)
				continue;
			if (kind == PS_COLUMN_DIFF)
				agg_add(a, u.diff, multiplicity);
			else if (kind == PS_COLUMN_TIME)
				agg_add(a, as_of, multiplicity);
			else if (!isnull[a->column])
				agg_add(a, DatumGetInt64(values[a->column]), multiplicity);
		}
	}
	ps_merge_end(m);
	MemoryContextDelete(row_cxt);
	pfree(buf.data);
}

/* Computes the aggregates of the snapshot: from the state if exact, else a merge. */
static void
compute(AggScan *as)
{
	PsState		state;
	int64		as_of;
	INT128		rows;
	INT128		diffs;

	SPI_connect();
	ps_consensus_read_or_error(as->table.shard, &state, CurrentMemoryContext, true);
	if (as->table.desc == NULL)
		ps_fdw_table_bind(&as->table, as->rel, &state, GetMemoryChunkContext(as));
	as_of = ps_fdw_table_as_of(&as->table, &state);
	for (int i = 0; i < state.nbatches; i++)
		as->parts += state.batches[i].nparts;
	as->from_state = rows_from_state(as, &state, as_of, &rows, &diffs);
	if (as->from_state)
	{
		as->rows = rows;
		for (int i = 0; i < as->naggs; i++)
		{
			AggValue   *a = &as->aggs[i];

			/* "time" is as_of in every row */
			a->sum = diffs;
			a->any = int128_compare(rows, int64_to_int128(0)) > 0;
			a->extreme = as_of;
		}
	}
	else
		aggregate_merge(as, &state, as_of);
	SPI_finish();
}

/* An exact sum as a numeric Datum (beyond bigint, through its digits). */
static Datum
numeric_of(INT128 sum)
{
	if (ps_diff_sum_fits(sum))
		return DirectFunctionCall1(int8_numeric, Int64GetDatum(ps_diff_sum_value(sum)));
#ifdef USE_NATIVE_INT128
	{
		char		digits[48];
		char	   *p = digits + sizeof(digits) - 1;
		bool		negative = sum < 0;
		uint128		rest = negative ? -(uint128) sum : (uint128) sum;

		*p = '\0';
		do
		{
			*--p = (char) ('0' + (int) (rest % 10));
			rest /= 10;
		} while (rest > 0);
		if (negative)
			*--p = '-';
		return DirectFunctionCall3(numeric_in, CStringGetDatum(p),
								   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	}
#else
	ereport(ERROR,
			(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
			 errmsg("sum out of range")));
#endif
}

/* IterateForeignScan of an aggregate scan: its one row, then none. */
TupleTableSlot *
ps_fdw_aggregate_next(ForeignScanState *node)
{
	AggScan    *as = (AggScan *) node->fdw_state;
	TupleTableSlot *slot = node->ss.ss_ScanTupleSlot;

	ExecClearTuple(slot);
	if (as->done)
		return slot;
	compute(as);
	as->done = true;
	for (int i = 0; i < as->naggs; i++)
	{
		AggValue   *a = &as->aggs[i];

		slot->tts_isnull[i] = false;
		if (a->kind == AGG_COUNT)
		{
			if (!ps_diff_sum_fits(as->rows))
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("bigint out of range")));
			slot->tts_values[i] = Int64GetDatum(ps_diff_sum_value(as->rows));
		}
		else if (a->kind == AGG_SUM)
		{
			slot->tts_isnull[i] = int128_compare(as->rows, int64_to_int128(0)) == 0;
			slot->tts_values[i] = slot->tts_isnull[i] ? (Datum) 0 : numeric_of(a->sum);
		}
		else
		{
			slot->tts_isnull[i] = !a->any;
			slot->tts_values[i] = Int64GetDatum(a->extreme);
		}
	}
	return ExecStoreVirtualTuple(slot);
}

/* ReScanForeignScan of an aggregate scan: computed again. */
void
ps_fdw_aggregate_rescan(ForeignScanState *node)
{
	AggScan    *as = (AggScan *) node->fdw_state;

	as->done = false;
	as->rows = int64_to_int128(0);
	for (int i = 0; i < as->naggs; i++)
	{
		as->aggs[i].any = false;
		as->aggs[i].sum = int64_to_int128(0);
	}
}

/* EndForeignScan of an aggregate scan. */
void
ps_fdw_aggregate_end(ForeignScanState *node)
{
	AggScan    *as = (AggScan *) node->fdw_state;

	if (as && as->rel)
		table_close(as->rel, NoLock);
}

/* ExplainForeignScan of an aggregate scan. */
void
ps_fdw_aggregate_explain(ForeignScanState *node, ExplainState *es)
{
	ForeignScan *fs = (ForeignScan *) node->ss.ps.plan;
	AggScan    *as = (AggScan *) node->fdw_state;

	ExplainPropertyText("Shard", as->table.shard, es);
	ExplainPropertyText("Aggregates",
						strVal(list_nth(fs->fdw_private, AGG_PLAN_SHOWN)), es);
	if (es->analyze && as->done)
		ExplainPropertyText("Computed",
							psprintf(as->from_state ?
									 "from the state, no part read (of %llu)" :
									 "from a merge of the parts (%llu)",
									 (unsigned long long) as->parts), es);
}

/* Fills in the wrapper's routine that offers aggregates. */
void
ps_fdw_aggregate_routine(FdwRoutine *routine)
{
	routine->GetForeignUpperPaths = upper_paths;
}
