/*-------------------------------------------------------------------------
 *
 * reader_since.c
 *	  Readers of a shard: the since their positions hold (reader_step.c
 *	  has the window read_next returns).
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
