/*-------------------------------------------------------------------------
 *
 * key_epoch.c
 *	  Whether a key looked up on arrival can have been recorded since.
 *
 * A keyed write looks its key up in the idempotency table when it arrives
 * (sink_writer.c), and the worker settles it again once the interval is
 * sealed (sink_worker.c), against what committed in between.  Between the
 * two, only a commit that recorded keys can have changed the answer.  The
 * key epoch counts such commits: the worker moves it after each interval
 * whose transaction recorded keys, once that transaction has committed or
 * failed, before it takes another interval.  A writer reads the epoch
 * before the snapshot of its lookup; at the seal, if the epoch is still
 * the writer's, the lookup on arrival stands and the worker skips its own.
 *
 * Why that holds: a shard's keys are recorded only by the transactions of
 * the one worker that serves the shard, one interval at a time.  Take a
 * commit X that recorded the key but is not in the writer's snapshot: X
 * committed after that snapshot, so after the writer read the epoch, and
 * X's worker moved the epoch after X, before it went on to seal the
 * writer's interval.  So the epoch the worker reads at the seal is not the
 * writer's.  Other shards' and other workers' commits move the epoch too:
 * they only cost a lookup.  A worker that exits between its commit and
 * the move moves it on its way out (sink_worker.c worker_exit); after a
 * crash shared memory, the epoch and every writer start anew.
 *
 * No lock: the epoch is an atomic, and its read and move are full
 * barriers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "sink/sink.h"

/*
 * Reads the key epoch; a lookup must take its snapshot after this returns.  No
 * lock (an atomic).
 */
uint64
ps_sink_key_epoch(void)
{
	uint64		epoch = pg_atomic_read_u64(&ps_sink->key_epoch);

	pg_memory_barrier();
	return epoch;
}

/*
 * Moves the key epoch, after a commit that recorded keys (or its failure).  No
 * lock (an atomic).
 */
void
ps_sink_key_epoch_move(void)
{
	pg_atomic_fetch_add_u64(&ps_sink->key_epoch, 1);
}
