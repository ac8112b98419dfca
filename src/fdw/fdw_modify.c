/*-------------------------------------------------------------------------
 *
 * fdw_modify.c
 *	  Writes through a shard's foreign table: INSERT and COPY FROM, each
 *	  statement one append.
 *
 * The rows of a statement are gathered as updates while it runs and
 * appended through the sink, as append() appends, when the statement ends
 * (EndForeignModify, EndForeignInsert): all of them at one time, or none
 * of them if the statement fails before or in that append.  They are held
 * in memory up to persist_sink.table_write_memory; past it, in a sort on
 * disk (fdw_spill.c), from which the sink takes them a part at a time.  An error
 * before the end (a bad row, a cancel while rows are still being read)
 * leaves nothing of the statement written.  The append is not part of the
 * caller's transaction: once the statement has returned, its rows stay
 * written whatever the transaction does, as with append().  With
 * persist_sink.idempotency_key set, the statement's append carries that
 * key, with append()'s exactly-once outcomes.
 *
 * UPDATE, DELETE, INSERT ... ON CONFLICT and TRUNCATE are refused: a
 * shard's history is only ever appended to.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/executor.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "nodes/nodeFuncs.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "base/base.h"
#include "base/settings.h"
#include "fdw/fdw.h"
#include "sql/sql.h"
#include "store/store.h"

/* Bytes of the blocks a statement's keys and vals are copied into */
#define SPACE_BLOCK		(1024 * 1024)
/* Rows a COPY hands over at a time */
#define COPY_BATCH		1000

/* A statement writing to a shard's foreign table */
typedef struct TableWrite
{
	PsShardTable table;
	MemoryContext cxt;			/* the updates and their bytes */
	MemoryContext row_cxt;		/* reset after each row */
	PsUpdateArrays w;
	int			cap;
	char	   *space;			/* where the next key or val is copied */
	uint64		space_left;
	uint64		held;			/* bytes the updates take in memory */
	PsSpill    *spill;			/* once they take too many: on disk */
	const char *key;			/* persist_sink.idempotency_key, at the
								 * statement's start */
} TableWrite;

/* A shard a running statement writes to (in TopMemoryContext) */
typedef struct StatementShard
{
	EState	   *estate;			/* the statement's executor state */
	char		shard[PS_MAX_SHARD_NAME + 1];
} StatementShard;

/* The shards the running statements (nested ones included) write to */
static List *statement_shards = NIL;

/* Forgets the shards of a statement whose memory goes (a reset callback). */
static void
forget_statement_shards(void *arg)
{
	ListCell   *lc;

	foreach(lc, statement_shards)
	{
		StatementShard *s = lfirst(lc);

		if (s->estate != (EState *) arg)
			continue;
		statement_shards = foreach_delete_current(statement_shards, lc);
		pfree(s);
	}
}

/*
 * Records that the statement of estate writes to shard; raises 0A000 if it
 * does already (through another foreign table, a CTE or a partition): each
 * statement is one append per shard, and two would be two outcomes.
 */
static void
claim_statement_shard(EState *estate, const char *shard)
{
	bool		known = false;
	ListCell   *lc;
	StatementShard *s;

	foreach(lc, statement_shards)
	{
		s = lfirst(lc);
		if (s->estate != estate)
			continue;
		known = true;
		if (strcmp(s->shard, shard) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot write to shard \"%s\" twice in one statement", shard),
					 errdetail("A statement's rows for a shard are one append, made when the statement ends; nothing of this statement was written."),
					 errhint("Write the shard's rows through one INSERT, for example INSERT ... SELECT ... UNION ALL SELECT ....")));
	}
	if (!known)
	{
		MemoryContextCallback *cb = MemoryContextAlloc(estate->es_query_cxt,
													   sizeof(MemoryContextCallback));

		cb->func = forget_statement_shards;
		cb->arg = estate;
		MemoryContextRegisterResetCallback(estate->es_query_cxt, cb);
	}
	s = MemoryContextAllocZero(TopMemoryContext, sizeof(StatementShard));
	s->estate = estate;
	strlcpy(s->shard, shard, sizeof(s->shard));
	statement_shards = lappend(statement_shards, s);
}

/* Raises 0A000: statement (UPDATE, DELETE, ...) cannot change a shard. */
static void
raise_refused(Relation rel, const char *statement)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot %s foreign table \"%s\": a shard is only appended to",
					statement, RelationGetRelationName(rel)),
			 errhint("To remove a row, INSERT it again with diff -1 (a retraction); the shard's since and compaction forget what no time still needs.")));
}

/* Refuses UPDATE and DELETE as they are planned. */
static void
add_update_targets(PlannerInfo *root, Index rtindex, RangeTblEntry *target_rte,
				   Relation target_relation)
{
	raise_refused(target_relation,
				  root->parse->commandType == CMD_DELETE ? "delete from" : "update");
}

/* Plans an INSERT: refused with ON CONFLICT; nothing to pass on. */
static List *
plan_modify(PlannerInfo *root, ModifyTable *plan, Index rti, int subplan)
{
	if (plan->onConflictAction != ONCONFLICT_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("INSERT ... ON CONFLICT is not supported on foreign table \"%s\"",
						get_rel_name(planner_rt_fetch(rti, root)->relid)),
				 errdetail("A shard holds updates, not unique rows: every INSERT appends.")));
	return NIL;
}

/* Refuses TRUNCATE. */
static void
refuse_truncate(List *rels, DropBehavior behavior, bool restart_seqs)
{
	raise_refused((Relation) linitial(rels), "truncate");
}

/*
 * Starts a statement's write to rel's shard: refuses a second one of the
 * statement (of estate), checks the caller's rights (those of append()) and
 * binds the table's columns to the shard.  In the statement's memory
 * context.
 */
static TableWrite *
begin_write(Relation rel, EState *estate)
{
	MemoryContext cxt = CurrentMemoryContext;
	TableWrite *tw = palloc0(sizeof(TableWrite));
	PsState		state;

	ps_fdw_table_options(RelationGetRelid(rel), &tw->table);
	claim_statement_shard(estate, tw->table.shard);
	ps_require_privilege(true, false, "append");
	ps_require_shard_right(tw->table.shard, PS_SHARD_APPEND, "append");
	SPI_connect();
	ps_consensus_read_or_error(tw->table.shard, &state, CurrentMemoryContext, true);
	ps_fdw_table_bind(&tw->table, rel, &state, cxt);
	SPI_finish();
	tw->cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink table write",
									ALLOCSET_DEFAULT_SIZES);
	tw->row_cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink table row",
										ALLOCSET_DEFAULT_SIZES);
	tw->cap = 1024;
	tw->w.updates = MemoryContextAlloc(tw->cxt, sizeof(PsUpdate) * tw->cap);
	if (ps_table_idempotency_key[0])
		tw->key = pstrdup(ps_table_idempotency_key);
	return tw;
}

/* A copy of len bytes in the statement's space. */
static const char *
copy_bytes(TableWrite *tw, const char *data, uint32 len)
{
	char	   *copy;

	if (len > tw->space_left)
	{
		uint64		size = Max(SPACE_BLOCK, len);

		tw->space = MemoryContextAllocHuge(tw->cxt, size);
		tw->space_left = size;
	}
	copy = tw->space;
	memcpy(copy, data, len);
	tw->space += len;
	tw->space_left -= len;
	return copy;
}

/*
 * Moves the statement's updates from memory to a sort on disk, in the
 * same memory: they are past persist_sink.table_write_memory.
 */
static void
spill(TableWrite *tw)
{
	tw->spill = ps_spill_begin(ps_table_write_memory_kb, tw->key != NULL);
	for (int i = 0; i < tw->w.n; i++)
		ps_spill_add(tw->spill, &tw->w.updates[i]);
	MemoryContextReset(tw->cxt);
	tw->w.updates = NULL;
	tw->w.n = 0;
	tw->space_left = 0;
}

/* Adds the row in slot to the statement's updates. */
static void
add_row(TableWrite *tw, TupleTableSlot *slot)
{
	MemoryContext old = MemoryContextSwitchTo(tw->row_cxt);
	PsUpdate	u;
	bytea	   *row;

	slot_getallattrs(slot);
	ps_fdw_row_to_update(&tw->table, slot->tts_values, slot->tts_isnull, &u, &row);
	MemoryContextSwitchTo(old);
	if (tw->spill)
	{
		ps_spill_add(tw->spill, &u);
		MemoryContextReset(tw->row_cxt);
		return;
	}
	if (tw->w.n == tw->cap)
	{
		tw->cap *= 2;
		tw->w.updates = repalloc_huge(tw->w.updates, sizeof(PsUpdate) * tw->cap);
	}
	u.key = copy_bytes(tw, u.key, u.key_len);
	u.val = copy_bytes(tw, u.val, u.val_len);
	tw->w.updates[tw->w.n++] = u;
	tw->w.raw_bytes += PS_UPDATE_RAW_SIZE(&u);
	tw->held += sizeof(PsUpdate) + u.key_len + u.val_len;
	MemoryContextReset(tw->row_cxt);
	if (tw->held > (uint64) ps_table_write_memory_kb * 1024)
		spill(tw);
}

/* Sorts a statement's spilled updates (arg); returns their stream. */
static PsUpdateStream *
sort_spill(void *arg)
{
	return ps_spill_sort((PsSpill *) arg);
}

/*
 * Ends a statement's write: its updates, if any, are appended as one
 * write, with persist_sink.idempotency_key if it was set when the
 * statement started.
 */
static void
end_write(TableWrite *tw)
{
	if (tw == NULL)
		return;
	if (tw->spill)
	{
		(void) ps_sql_append_stream(tw->table.shard, sort_spill, tw->spill, tw->key);
		ps_spill_end(tw->spill);
	}
	else if (tw->w.n > 0)
		(void) ps_sql_append(tw->table.shard, &tw->w, tw->key);
	MemoryContextDelete(tw->cxt);
	MemoryContextDelete(tw->row_cxt);
}

/* BeginForeignModify: an INSERT starts (not for EXPLAIN alone). */
static void
begin_modify(ModifyTableState *mtstate, ResultRelInfo *rinfo, List *fdw_private,
			 int subplan_index, int eflags)
{
	if (eflags & EXEC_FLAG_EXPLAIN_ONLY)
		return;
	rinfo->ri_FdwState = begin_write(rinfo->ri_RelationDesc, mtstate->ps.state);
}

/* ExecForeignInsert: one more row. */
static TupleTableSlot *
exec_insert(EState *estate, ResultRelInfo *rinfo, TupleTableSlot *slot,
			TupleTableSlot *plan_slot)
{
	add_row((TableWrite *) rinfo->ri_FdwState, slot);
	return slot;
}

/* ExecForeignBatchInsert: more rows. */
static TupleTableSlot **
exec_batch_insert(EState *estate, ResultRelInfo *rinfo, TupleTableSlot **slots,
				  TupleTableSlot **plan_slots, int *nslots)
{
	for (int i = 0; i < *nslots; i++)
		add_row((TableWrite *) rinfo->ri_FdwState, slots[i]);
	return slots;
}

/* GetForeignModifyBatchSize: rows are only gathered, so many at a time. */
static int
batch_size(ResultRelInfo *rinfo)
{
	/* RETURNING needs each row back as it is inserted */
	return rinfo->ri_projectReturning ? 1 : COPY_BATCH;
}

/* EndForeignModify and EndForeignInsert: the statement's one append. */
static void
end_modify(EState *estate, ResultRelInfo *rinfo)
{
	end_write((TableWrite *) rinfo->ri_FdwState);
	rinfo->ri_FdwState = NULL;
}

/* BeginForeignInsert: a COPY FROM (or a routed INSERT) starts. */
static void
begin_insert(ModifyTableState *mtstate, ResultRelInfo *rinfo)
{
	rinfo->ri_FdwState = begin_write(rinfo->ri_RelationDesc, mtstate->ps.state);
}

/* IsForeignRelUpdatable: INSERT only. */
static int
updatable(Relation rel)
{
	return 1 << CMD_INSERT;
}

/* Fills in the wrapper's routines that write. */
void
ps_fdw_modify_routine(FdwRoutine *routine)
{
	routine->AddForeignUpdateTargets = add_update_targets;
	routine->PlanForeignModify = plan_modify;
	routine->BeginForeignModify = begin_modify;
	routine->ExecForeignInsert = exec_insert;
	routine->ExecForeignBatchInsert = exec_batch_insert;
	routine->GetForeignModifyBatchSize = batch_size;
	routine->EndForeignModify = end_modify;
	routine->BeginForeignInsert = begin_insert;
	routine->EndForeignInsert = end_modify;
	routine->IsForeignRelUpdatable = updatable;
	routine->ExecForeignTruncate = refuse_truncate;
}
