/*-------------------------------------------------------------------------
 *
 * shard.c
 *	  Writing batches and changing shard state by compare-and-swap.
 *
 * Blob rows and the CaS that references them are written in the caller's
 * transaction, so they commit or vanish together.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "miscadmin.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compact.h"
#include "part.h"
#include "persist_sink.h"
#include "read.h"
#include "settings.h"
#include "shard.h"
#include "stats.h"
#include "storage.h"

/* Starts a batch writer for shard. */
void
ps_batch_writer_init(PsBatchWriter *w, const char *shard, bool copy)
{
	memset(w, 0, sizeof(PsBatchWriter));
	w->shard = shard;
	w->copy = copy;
	w->cap = 1024;
	w->buf = palloc(sizeof(PsUpdate) * w->cap);
	if (copy)
		initStringInfo(&w->arena);
}

/* Writes a pending part's bytes to the blob table. */
static void
put_part(PsBatchWriter *w, PsPart *part)
{
	part->blob_key = ps_blob_new_key(w->shard);
	ps_blob_put(part->blob_key, part->inline_data, part->encoded_size);
	pfree(part->inline_data);
	part->inline_data = NULL;
	w->counts.blob_puts++;
	w->counts.blob_bytes += part->encoded_size;
}

/* Puts every pending part to the blob table. */
static void
flush_pending(PsBatchWriter *w)
{
	ListCell   *lc;

	foreach(lc, w->pending)
		put_part(w, (PsPart *) lfirst(lc));
	list_free(w->pending);
	w->pending = NIL;
}

/*
 * Encodes the buffered updates as one part.  It stays pending (maybe
 * inline) while the batch is still below inline_max_bytes.
 */
static void
cut_part(PsBatchWriter *w)
{
	PsPart	   *part = palloc0(sizeof(PsPart));
	PsPartInfo	info;
	const char *why = NULL;

	part->inline_data = ps_part_encode(w->buf, w->n, ps_compression_level,
									   &info, &why);
	if (part->inline_data == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("could not encode a part of shard \"%s\": %s",
						w->shard, why)));
	part->encoded_size = info.encoded_size;
	part->raw_size = info.raw_size;
	part->nupdates = info.nupdates;
	part->diff_sum = info.diff_sum;
	part->checksum = info.checksum;
	if (w->n > 0)
		ps_part_set_lower(part, w->buf[0].key, w->buf[0].key_len);
	w->parts = lappend(w->parts, part);
	w->counts.parts++;
	w->pending = lappend(w->pending, part);
	w->pending_bytes += part->encoded_size;
	if (w->pending_bytes >= (uint64) ps_inline_max_bytes ||
		list_length(w->parts) > list_length(w->pending))
		flush_pending(w);

	w->n = 0;
	w->raw = 0;
	if (w->copy)
		resetStringInfo(&w->arena);
}

/* Copies len bytes into the arena; returns the offset (arena may move). */
static uint64
arena_copy(PsBatchWriter *w, const char *data, uint32 len)
{
	uint64		off = w->arena.len;

	appendBinaryStringInfo(&w->arena, data, len);
	return off;
}

/* Adds the next update (in (key, val, time) order) to the batch. */
void
ps_batch_writer_add(PsBatchWriter *w, const PsUpdate *u)
{
	uint64		size = PS_UPDATE_RAW_SIZE(u);

	if (w->n > 0 &&
		(w->raw + size > (uint64) ps_blob_target_size ||
		 w->raw + size > PS_PART_MAX_RAW ||
		 (uint64) w->n >= PS_PART_MAX_UPDATES))
	{
		if (w->copy)
			for (int i = 0; i < w->n; i++)
			{
				w->buf[i].key = w->arena.data + (uint64) (uintptr_t) w->buf[i].key;
				w->buf[i].val = w->arena.data + (uint64) (uintptr_t) w->buf[i].val;
			}
		cut_part(w);
	}
	if (w->n == w->cap)
	{
		w->cap *= 2;
		w->buf = repalloc_huge(w->buf, sizeof(PsUpdate) * w->cap);
	}
	w->buf[w->n] = *u;
	if (w->copy)
	{
		/* store offsets now; they become pointers when the part is cut */
		w->buf[w->n].key = (const char *) (uintptr_t) arena_copy(w, u->key, u->key_len);
		w->buf[w->n].val = (const char *) (uintptr_t) arena_copy(w, u->val, u->val_len);
	}
	w->n++;
	w->raw += size;
}

/*
 * Cuts the last part and fills batch's parts.  A batch whose parts all
 * stayed pending encodes below inline_max_bytes and is kept inline.
 */
void
ps_batch_writer_finish(PsBatchWriter *w, PsBatch *batch)
{
	ListCell   *lc;
	int			i = 0;

	if (w->n > 0)
	{
		if (w->copy)
			for (int j = 0; j < w->n; j++)
			{
				w->buf[j].key = w->arena.data + (uint64) (uintptr_t) w->buf[j].key;
				w->buf[j].val = w->arena.data + (uint64) (uintptr_t) w->buf[j].val;
			}
		cut_part(w);
	}
	if (w->pending != NIL)
		w->counts.inline_batches++;
	list_free(w->pending);
	w->pending = NIL;

	batch->nparts = list_length(w->parts);
	batch->parts = palloc0(sizeof(PsPart) * Max(batch->nparts, 1));
	foreach(lc, w->parts)
		batch->parts[i++] = *(PsPart *) lfirst(lc);
	pfree(w->buf);
	if (w->copy)
		pfree(w->arena.data);
}

/* Encodes an array of sorted, consolidated updates into batch's parts. */
void
ps_batch_build(const char *shard, const PsUpdate *updates, int n,
			   PsBatch *batch, PsWriteCounts *counts)
{
	PsBatchWriter w;

	ps_batch_writer_init(&w, shard, false);
	for (int i = 0; i < n; i++)
		ps_batch_writer_add(&w, &updates[i]);
	ps_batch_writer_finish(&w, batch);
	*counts = w.counts;
}

/*
 * Adds a batch at the end of state's list.  An empty batch only widens the
 * last batch, so intervals without updates do not grow the state.
 */
void
ps_state_add_batch(PsState *state, const PsBatch *batch)
{
	if (batch->nparts == 0 && state->nbatches > 0)
	{
		state->batches[state->nbatches - 1].upper = batch->upper;
		return;
	}
	if (state->nbatches == 0)
		state->batches = palloc(sizeof(PsBatch));
	else
		state->batches = repalloc(state->batches,
								  sizeof(PsBatch) * (state->nbatches + 1));
	state->batches[state->nbatches++] = *batch;
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
		int64		seqno;

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
		seqno = state.seqno;
		ps_state_add_batch(&state, batch);
		state.upper = new_upper;
		result->cas_attempts++;
		if (ps_consensus_cas(shard, seqno, &state, &result->state_bytes))
		{
			result->ok = true;
			result->seqno = state.seqno;
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
 * writer.
 */
void
ps_shard_append_now(const char *shard, PsBatch *batch, PsAppendResult *result)
{
	Assert(batch->single_time);
	append_batch(shard, 0, 0, true, NULL, batch, result);
}

/* Creates a shard with upper 0 and since 0; 42710 if it exists. */
void
ps_shard_create(const char *name, const char *row_type)
{
	PsState		state;

	memset(&state, 0, sizeof(PsState));
	state.row_type = (char *) row_type;
	if (!ps_consensus_insert(name, &state))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("shard \"%s\" already exists", name)));
}

/* Drops a shard: its consensus row and every blob row; a merge of it stops at commit. */
void
ps_shard_drop(const char *name)
{
	if (!ps_consensus_delete(name))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("shard \"%s\" does not exist", name)));
	ps_blob_delete_shard(name);
	ps_compaction_stop_at_commit(name);
}

/*
 * Moves since forward to `since`.  Since never regresses and never passes
 * upper; asking for the current since is a no-op.
 */
void
ps_shard_downgrade_since(const char *name, int64 since)
{
	for (;;)
	{
		PsState		state;
		int64		seqno;

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
		if (since == state.since)
			return;
		seqno = state.seqno;
		state.since = since;
		if (ps_consensus_cas(name, seqno, &state, NULL))
			return;
	}
}

/* Raises 22023 unless new_upper > expected_upper. */
void
ps_check_new_upper(int64 expected_upper, int64 new_upper)
{
	if (new_upper <= expected_upper)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("new_upper must be greater than expected_upper"),
				 errdetail("expected_upper is " INT64_FORMAT ", new_upper is " INT64_FORMAT ".",
						   expected_upper, new_upper)));
}

/* Raises an error unless every time is in [lower, upper). */
static void
check_times(const PsUpdateArrays *w, int64 lower, int64 upper)
{
	for (int i = 0; i < w->n; i++)
		if (w->updates[i].time < lower || w->updates[i].time >= upper)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("time " INT64_FORMAT " of element %d is outside [expected_upper, new_upper)",
							w->updates[i].time, i + 1),
					 errdetail("expected_upper is " INT64_FORMAT ", new_upper is " INT64_FORMAT ".",
							   lower, upper)));
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
						shard, state->row_type, format_type_be(type))));
}

/*
 * compare_and_append of a write's updates, in the caller's transaction:
 * checks the times (new_upper > expected_upper is the caller's check) and,
 * if row_type is valid, the shard's row type; consolidates, writes the
 * batch's parts and appends it as [expected_upper, new_upper).  Raises
 * PS001 on an upper mismatch.  Returns the new seqno.
 */
int64
ps_shard_compare_and_append(const char *shard, PsUpdateArrays *w,
							int64 expected_upper, int64 new_upper, Oid row_type)
{
	PsState		state;
	PsBatch		batch = {0};
	PsWriteCounts counts;
	PsAppendResult result;

	check_times(w, expected_upper, new_upper);
	ps_updates_sort_consolidate(w->updates, &w->n);

	SPI_connect();
	ps_consensus_read_or_error(shard, &state, CurrentMemoryContext, false);
	if (OidIsValid(row_type))
		ps_check_row_type(shard, &state, row_type);
	if (state.upper != expected_upper)
	{
		ps_stats_count_mismatch(shard);
		ps_raise_upper_mismatch(shard, expected_upper, state.upper);
	}
	ps_batch_build(shard, w->updates, w->n, &batch, &counts);
	append_batch(shard, expected_upper, new_upper, false, &state, &batch, &result);
	ps_stats_count_append(shard, (uint64) w->n, &counts, &result, false);
	if (!result.ok)
		ps_raise_upper_mismatch(shard, expected_upper, result.current_upper);
	SPI_finish();
	ps_compaction_request_at_commit(shard);
	return result.seqno;
}
