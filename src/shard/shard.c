/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  The shard's state machine: create, drop, since, and appending
 *	  batches by compare-and-swap.
 *
 * Blob rows and the CaS that references them are written in the caller's
 * transaction, so they commit or vanish together.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/int.h"
#include "miscadmin.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "base/settings.h"
#include "shard/compact.h"
#include "shard/debt.h"
#include "shard/shard.h"
#include "shard/stats.h"
#include "store/store.h"

/*
 * Sets *to to state `from` with batch added at the end of its list, sharing
 * from's batches without changing them.  An empty batch only widens the
 * last batch, so intervals without updates do not grow the state.
 */
static void
state_with_batch(const PsState *from, const PsBatch *batch, PsState *to)
{
	bool		widen = batch->nparts == 0 && from->nbatches > 0;

	*to = *from;
	to->batches = palloc(sizeof(PsBatch) * (from->nbatches + 1));
	if (from->nbatches > 0)
		memcpy(to->batches, from->batches, sizeof(PsBatch) * from->nbatches);
	if (widen)
		to->batches[to->nbatches - 1].upper = batch->upper;
	else
	{
		to->batches[to->nbatches] = *batch;
		ps_batch_note_parts(&to->batches[to->nbatches++]);
	}
}

/* Milliseconds since the Unix epoch, now. */
static int64
now_epoch_ms(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return now / 1000 +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
}

/*
 * Appends batch by CaS, retrying while only the seqno moved (a concurrent
 * since change or compaction).  With at_now the batch goes to
 * [upper, t + 1) for t = max(now in epoch ms, upper), whatever the upper is;
 * otherwise to [expected_upper, new_upper), failing with the current upper
 * once the upper is no longer expected_upper.  The interval used is left in
 * batch->lower and batch->upper.  A state the caller already read in this
 * transaction (known, may be NULL) serves the first attempt.
 */
static void
append_batch(const char *shard, int64 expected_upper, int64 new_upper,
			 bool at_now, PsState *known, PsBatch *batch, PsAppendResult *result)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "persist_sink append",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	memset(result, 0, sizeof(PsAppendResult));
	for (;;)
	{
		PsState		state;
		PsState		next;

		CHECK_FOR_INTERRUPTS();
		if (known)
			state = *known;
		else
			ps_consensus_read_or_error(shard, &state, cxt, false);
		known = NULL;
		if (at_now)
		{
			if (state.upper == PG_INT64_MAX)
				ereport(ERROR,
						(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
						 errmsg("shard \"%s\" has no time left to append at", shard),
						 errdetail("current upper is " INT64_FORMAT, state.upper)));
			expected_upper = state.upper;
			new_upper = Max(now_epoch_ms(), state.upper) + 1;
		}
		if (state.upper != expected_upper)
		{
			result->current_upper = state.upper;
			break;
		}
		batch->lower = expected_upper;
		batch->upper = new_upper;
		batch->time = new_upper - 1;
		state_with_batch(&state, batch, &next);
		next.upper = new_upper;
		result->cas_attempts++;
		if (ps_consensus_cas(shard, &state, &next, &result->state_bytes))
		{
			result->ok = true;
			result->seqno = next.seqno;
			ps_debt_publish_at_commit(shard, next.seqno, next.nbatches);
			break;
		}
		result->cas_mismatches++;
		MemoryContextReset(cxt);
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/*
 * Appends a single_time batch at t = max(now in epoch ms, upper), as
 * [upper, t + 1): the sink's append, which never loses to a concurrent
 * writer.  A state of the shard read earlier in the transaction (known,
 * may be NULL) serves the first attempt.
 */
void
ps_shard_append_now(const char *shard, PsState *known, PsBatch *batch,
					PsAppendResult *result)
{
	Assert(batch->single_time);
	append_batch(shard, 0, 0, true, known, batch, result);
}

/*
 * Creates a shard with upper 0 and since 0, keeping its parts in the store
 * persist_sink.blob_store names; 42710 if it exists.
 */
void
ps_shard_create(const char *name, const char *row_type)
{
	PsState		state;

	memset(&state, 0, sizeof(PsState));
	state.row_type = (char *) row_type;
	state.blob_store = ps_new_shard_blob_store();
	/* objects are deleted by the collector, from the garbage table */
	if (state.blob_store && !ps_sql_objects_have(PS_OBJ_GARBAGE))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shards cannot keep their parts in an object store until the extension is updated"),
				 errhint("Run ALTER EXTENSION persist_sink UPDATE.")));
	if (!ps_consensus_insert(name, &state))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("shard \"%s\" already exists", name)));
	/* a count left by a shard of that name dropped before is not this one's */
	ps_debt_forget_at_commit(name);
}

/*
 * Lists the keys of the objects the state of shard names.  A state that
 * cannot be read (a corrupted shard can still be dropped) names none: a
 * WARNING says so.  The read runs in a subtransaction, rolled back if it
 * fails.
 */
static List *
state_objects(const char *shard)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	List	   *volatile objects = NIL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		PsState		state;

		ps_consensus_read_or_error(shard, &state, cxt, false);
		for (int i = 0; i < state.nbatches; i++)
			for (int j = 0; j < state.batches[i].nparts; j++)
			{
				char	   *key = state.batches[i].parts[j].blob_key;

				if (key && ps_blob_is_object(key))
					objects = lappend(objects, key);
			}
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_DATA_CORRUPTED)
			PG_RE_THROW();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ereport(WARNING,
				(errmsg("shard \"%s\" is dropped without reading its state: objects it names in an object store, if any, are left", shard),
				 errdetail("%s", edata->detail ? edata->detail : edata->message)));
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return objects;
}

/*
 * Drops a shard: its consensus row, its garbage rows, then every blob row
 * (the order garbage.c's collector takes them in); a merge of it stops at
 * commit.  Objects cannot be deleted before the commit: those its state
 * or its garbage name are left as garbage of the dropped shard, for the
 * collector.
 */
void
ps_shard_drop(const char *name)
{
	List	   *objects;

	if (!ps_consensus_lock(name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("shard \"%s\" does not exist", name)));
	objects = list_concat(ps_garbage_shard_objects(name), state_objects(name));
	(void) ps_consensus_delete(name);
	ps_garbage_delete_shard(name);
	ps_garbage_put_dropped(name, objects);
	ps_blob_delete_shard(name);
	ps_idempotency_delete_shard(name);
	ps_reader_delete_shard(name);
	ps_compaction_stop_at_commit(name);
	/* then the compactor collects its objects */
	if (objects != NIL)
		ps_compaction_request_at_commit(name, true);
	ps_debt_forget_at_commit(name);
}

/*
 * Moves since forward to `since`, or as far towards it as the shard's live
 * readers let it (their lowest position; a NOTICE names the reader that
 * held it).  Since never regresses and never passes upper; asking for the
 * current since is a no-op.
 */
void
ps_shard_downgrade_since(const char *name, int64 since)
{
	char	   *holder;
	int64		target = ps_reader_held_since(name, since, &holder);
	int64		reached;

	for (;;)
	{
		PsState		state;
		PsState		next;

		CHECK_FOR_INTERRUPTS();
		ps_consensus_read_or_error(name, &state, CurrentMemoryContext, false);
		if (since < state.since)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("since of shard \"%s\" cannot move back to " INT64_FORMAT,
							name, since),
					 errdetail("current since is " INT64_FORMAT, state.since)));
		if (since > state.upper)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("since of shard \"%s\" cannot pass its upper", name),
					 errdetail("current upper is " INT64_FORMAT, state.upper)));
		reached = Max(target, state.since);
		if (reached == state.since)
			break;
		next = state;
		next.since = reached;
		if (ps_consensus_cas(name, &state, &next, NULL))
			break;
	}
	if (holder != NULL)
		ereport(NOTICE,
				(errmsg("since of shard \"%s\" held at " INT64_FORMAT " by reader \"%s\"",
						name, reached, holder),
				 errdetail("A live reader's position bounds the since: it moves no further until the reader advances, is dropped or its lease passes, and downgrade_since() is called again.")));
}

/*
 * Raises 42804 unless the shard in state records row type `type`; the
 * typed-row functions' check.
 */
void
ps_check_row_type(const char *shard, const PsState *state, Oid type)
{
	Oid			recorded = InvalidOid;
	int32		typmod;

	if (state->row_type == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("shard \"%s\" has no row type", shard),
				 errhint("Create it with create_shard(name, row_type) to use typed rows.")));
	parseTypeString(state->row_type, &recorded, &typmod, true);
	if (recorded != type)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("shard \"%s\" holds rows of type %s, not %s",
						shard, state->row_type, format_type_be_qualified(type))));
}

/*
 * Counts one compare_and_append in the stats: its CaS attempts now, what it
 * wrote once its transaction commits.
 */
static void
count_append(const char *shard, uint64 updates, const PsWriteCounts *counts,
			 const PsAppendResult *result)
{
	PsCounters	now = {0};
	PsCounters	later = {0};

	now.cas_attempts = result->cas_attempts;
	now.cas_mismatches = result->cas_mismatches + (result->ok ? 0 : 1);
	ps_stats_add(shard, &now);
	if (!result->ok)
		return;
	later.appends = 1;
	later.updates = updates;
	later.parts_written = counts->parts;
	later.blob_puts = counts->blob_puts;
	later.blob_bytes = counts->blob_bytes;
	later.inline_batches = counts->inline_batches;
	later.state_bytes = result->state_bytes;
	ps_stats_add_at_commit(shard, &later);
}

/*
 * compare_and_append of a write's sorted, consolidated updates, in the
 * caller's transaction: if row_type is valid, checks the shard's row type;
 * writes the batch's parts and appends it as [expected_upper, new_upper).
 * The caller has checked the times.  On an upper mismatch nothing is
 * written and result->ok is false with the current upper; otherwise
 * result->seqno is the new seqno.
 */
void
ps_shard_compare_and_append(const char *shard, const PsUpdateArrays *w,
							int64 expected_upper, int64 new_upper, Oid row_type,
							PsAppendResult *result)
{
	PsState		state;
	PsBatch		batch = {0};
	PsWriteCounts counts = {0};

	SPI_connect();
	ps_consensus_read_or_error(shard, &state, CurrentMemoryContext, false);
	if (OidIsValid(row_type))
		ps_check_row_type(shard, &state, row_type);
	if (state.upper != expected_upper)
	{
		/* the early check stands for a CaS that lost */
		memset(result, 0, sizeof(PsAppendResult));
		result->cas_attempts = 1;
		result->current_upper = state.upper;
	}
	else
	{
		ps_batch_build(shard, state.blob_store, w->updates, w->n, &batch, &counts);
		append_batch(shard, expected_upper, new_upper, false, &state, &batch, result);
	}
	count_append(shard, (uint64) w->n, &counts, result);
	SPI_finish();
	if (result->ok)
		ps_compaction_request_at_commit(shard, false);
}
