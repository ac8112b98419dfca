/*-------------------------------------------------------------------------
 *
 * reader_since.c
 *	  Readers of a shard: the since their positions hold, and the window
 *	  of whole times read_next returns.
 *
 * The protocol (doc/architecture.md, "Readers and the since they hold"):
 * since never passes a live reader's position.  (Compaction advances
 * times before since to since: with since = position + 1 the updates the
 * reader has seen would come back at position + 1.)  A reader at since - 1
 * has seen nothing and reads the shard from its start, as listen does.
 * create_reader locks the shard's shard_acl row FOR SHARE before it
 * checks its position against since; downgrade_since locks it FOR NO KEY
 * UPDATE before it computes the readers' hold, so a reader being created
 * is never left out.  (A row lock, not a heavyweight one: a transaction
 * moving the since of 10,000 shards takes nothing from the lock table.)
 *
 * Every function here must be called between SPI_connect and SPI_finish.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "base/settings.h"
#include "shard/read.h"
#include "shard/shard.h"
#include "store/store.h"

/* Reads a shard's state as committed now (a new snapshot); error if gone. */
void
ps_shard_read_latest(const char *shard, PsState *state)
{
	PushActiveSnapshot(GetLatestSnapshot());
	ps_consensus_read_or_error(shard, state, CurrentMemoryContext, true);
	PopActiveSnapshot();
}

/* Raises PS002 unless a reader's position is below the shard's upper. */
void
ps_check_position_readable(const char *shard, const PsState *state,
						   int64 position)
{
	if (position >= state->upper)
		ereport(ERROR,
				(errcode(ERRCODE_PS_NOT_YET_READABLE),
				 errmsg("position " INT64_FORMAT " is not yet readable in shard \"%s\"",
						position, shard),
				 errdetail("current upper is " INT64_FORMAT "; a position is at most upper - 1",
						   state->upper)));
}

/*
 * Registers a reader of a shard at position (position_null: since - 1, so
 * it reads everything the shard holds) owned by the current user, and
 * returns its position.  lease NULL takes persist_sink.reader_lease; a
 * zero lease never expires.  Raises PS003 for a position before since - 1
 * (that history is gone), PS002 for one at or past upper, 42710 if a live
 * reader of that name exists (an expired one is replaced).
 */
int64
ps_reader_create(const char *shard, const char *reader, bool position_null,
				 int64 position, Interval *lease)
{
	PsState		state;

	/* the shard's hold, shared: no since move passes us until we commit */
	(void) ps_shard_acl_lock(shard, false);
	ps_shard_read_latest(shard, &state);
	if (position_null)
		position = state.since - 1;
	if (position < state.since - 1)
		ereport(ERROR,
				(errcode(ERRCODE_PS_COMPACTED_AWAY),
				 errmsg("position " INT64_FORMAT " is before the since of shard \"%s\"",
						position, shard),
				 errdetail("Its since is " INT64_FORMAT ": the lowest position a reader can start from is " INT64_FORMAT ".",
						   state.since, state.since - 1)));
	ps_check_position_readable(shard, &state, position);
	if (lease == NULL && ps_reader_lease_s > 0)
	{
		lease = palloc0(sizeof(Interval));
		lease->time = (int64) ps_reader_lease_s * USECS_PER_SEC;
	}
	else if (lease != NULL && lease->month == 0 && lease->day == 0 && lease->time == 0)
		lease = NULL;
	if (!ps_reader_insert(shard, reader, GetUserId(), position, lease,
						  GetCurrentTimestamp()))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("reader \"%s\" of shard \"%s\" already exists", reader, shard)));
	return position;
}

/*
 * The since that a move of a shard's since to `since` may reach: since,
 * or the lowest live reader's position below it (then *holder names that
 * reader).  Takes the shard's hold exclusively and locks expired
 * readers (ps_reader_hold), both to the end of the transaction.
 */
int64
ps_reader_held_since(const char *shard, int64 since, char **holder)
{
	int64		hold;

	/* the shard's hold, exclusive: no reader is being created meanwhile */
	(void) ps_shard_acl_lock(shard, true);
	hold = ps_reader_hold(shard, GetCurrentTimestamp(), holder);
	if (hold >= since)
	{
		*holder = NULL;
		return since;
	}
	return hold;
}

/* Updates counted per time by the first pass of ps_reader_window */
typedef struct TimeCount
{
	int64		time;			/* hash key */
	int64		count;
} TimeCount;

/* qsort order of TimeCounts by time. */
static int
time_count_cmp(const void *a, const void *b)
{
	int64		ta = ((const TimeCount *) a)->time;
	int64		tb = ((const TimeCount *) b)->time;

	return ta < tb ? -1 : ta > tb ? 1 : 0;
}

/*
 * The counts of a hash, sorted by time, in a palloc'd array of *n.
 */
static TimeCount *
sorted_counts(HTAB *counts, long *n)
{
	HASH_SEQ_STATUS seq;
	TimeCount  *e;
	TimeCount  *all = palloc(sizeof(TimeCount) * Max(1, hash_get_num_entries(counts)));
	long		i = 0;

	hash_seq_init(&seq, counts);
	while ((e = hash_seq_search(&seq)) != NULL)
		all[i++] = *e;
	qsort(all, i, sizeof(TimeCount), time_count_cmp);
	*n = i;
	return all;
}

/*
 * Keeps in counts only its keep lowest times, returning the highest one
 * kept: no time above it can be among the first keep times.
 */
static int64
prune_counts(HTAB *counts, long keep)
{
	long		n;
	TimeCount  *all = sorted_counts(counts, &n);
	int64		highest = all[keep - 1].time;

	for (long i = keep; i < n; i++)
		(void) hash_search(counts, &all[i].time, HASH_REMOVE, NULL);
	pfree(all);
	return highest;
}

/*
 * The first time t in (after, until) by which the consolidated updates of
 * (after, t] number at least max_updates, or until - 1 if they never do:
 * counts each time's updates in one read of the window, keeping at most
 * 2 * max_updates times (the cut is among the first max_updates times).
 */
static int64
cut_time(const char *shard, const PsState *state, int64 after, int64 until,
		 int64 max_updates)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "persist_sink read_next counts",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	long		keep = (long) Min(max_updates, (int64) (LONG_MAX / 4));
	int64		highest = PG_INT64_MAX;
	int64		cut = until - 1;
	int64		sum = 0;
	int64		min_time;
	int64		max_time;
	int64		time_floor;
	HASHCTL		ctl;
	HTAB	   *counts;
	PsMerge    *m;
	PsUpdate	u;
	TimeCount  *all;
	long		n;

	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(TimeCount);
	ctl.hcxt = cxt;
	counts = hash_create("persist_sink read_next counts", 1024, &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	if (ps_listen_window(shard, state, after, false, until, &min_time, &max_time,
						 &time_floor))
	{
		m = ps_merge_begin(shard, state, min_time, max_time, true);
		while (ps_merge_next_consolidated(m, true, time_floor, &u))
		{
			TimeCount  *e;
			bool		found;

			if (u.time > highest)
				continue;
			e = hash_search(counts, &u.time, HASH_ENTER, &found);
			e->count = found ? e->count + 1 : 1;
			if (hash_get_num_entries(counts) > 2 * keep)
				highest = prune_counts(counts, keep);
		}
		ps_merge_end(m);
	}
	all = sorted_counts(counts, &n);
	for (long i = 0; i < n; i++)
	{
		sum += all[i].count;
		if (sum >= max_updates)
		{
			cut = all[i].time;
			break;
		}
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return cut;
}

/*
 * True if a batch may hold updates a reader at `after` has yet to read: a
 * reader at since - 1 reads every batch (the history before since summed
 * at since), any other one those with times after it.
 */
static bool
batch_after(const PsState *state, const PsBatch *b, int64 after)
{
	if (after < state->since)
		return true;
	if (b->single_time)
		return b->time > after;
	return b->upper > after + 1;
}

/*
 * The end (exclusive) of the window a reader at `after` reads next: the
 * whole times after it, up to the first time boundary at which the
 * window holds at least max_updates updates (all of (after, upper) if it
 * holds fewer).  The batches' update counts, which only overstate,
 * choose which batches to count exactly.
 */
int64
ps_reader_window(const char *shard, const PsState *state, int64 after,
				 int64 max_updates)
{
	uint64		sum = 0;

	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		if (!batch_after(state, b, after))
			continue;
		sum += ps_batch_updates(b);
		if (sum > (uint64) max_updates)
		{
			int64		until = b->upper;

			/* a reader at since - 1 reads the time since whole */
			if (after < state->since)
				until = Min(state->upper, Max(until, state->since + 1));
			return cut_time(shard, state, after, until, max_updates) + 1;
		}
	}
	return state->upper;
}

/*
 * An estimate of the updates after `after`: the update counts of the
 * batches that may hold some, the one it falls in whole (its times say
 * nothing of how its updates spread: a merged batch of sink times starts
 * at 0).  Counts are those written (a compacted batch's once
 * consolidated), so it errs high, never to 0 while an update is left.
 */
uint64
ps_updates_after(const PsState *state, int64 after)
{
	uint64		sum = 0;

	for (int i = 0; i < state->nbatches; i++)
		if (batch_after(state, &state->batches[i], after))
			sum += ps_batch_updates(&state->batches[i]);
	return sum;
}
