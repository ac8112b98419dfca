/*-------------------------------------------------------------------------
 *
 * key_epoch.c
 *	  Whether a key looked up on arrival can have been recorded since.
 *
 * A keyed write looks its key up in the idempotency table when it arrives
 * (sink_writer.c), and the worker settles it again once the interval is
 * sealed (sink_worker.c), against what committed in between.  Between the
 * two, only a commit that recorded keys can have changed the answer.  The
 * key epoch counts such commits; keys_committing counts those under way.
 * A commit that recorded keys does
 *
 *		keys_committing += 1; COMMIT; key_epoch += 1; keys_committing -= 1
 *
 * and a writer reads key_epoch, then keys_committing (which must be 0),
 * then takes the snapshot of its lookup.  At the seal the worker reads
 * keys_committing, then key_epoch: if none is under way and the epoch is
 * still the writer's, the lookup on arrival stands and the worker skips
 * its own.  Take a commit X that recorded keys before the worker's reads
 * but is not in the writer's snapshot, so committed after it.  If X's
 * first step came before the writer read keys_committing, the writer read
 * at least 1 (X's last step follows its commit).  Else X's first step,
 * and so its epoch step, follow the writer's read of the epoch; X's first
 * step precedes its commit and so the worker's reads, which find X under
 * way or, X's epoch step preceding its last, a moved epoch.  A commit
 * after the worker's reads would have escaped its own lookup as well: one
 * worker commits a shard's intervals, one at a time (and the idempotency
 * table's primary key refuses a key recorded twice).
 *
 * A worker that stops between the two steps (an error, an exit) ends the
 * commit as if it had recorded keys: the epoch only moves forward, so
 * the worst a stray step costs is one more lookup.  Shared memory is set
 * up anew after a crash, so a count left under way by a crashed worker
 * does not outlive it.
 *
 * No lock: both counters are atomics, and their reads and moves are full
 * barriers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "sink/sink.h"

/*
 * Reads the key epoch before a lookup of a key on arrival; false if a
 * commit that records keys is under way (the lookup cannot stand alone).
 * The caller's lookup must take its snapshot after this returns.
 */
bool
ps_sink_key_epoch_read(uint64 *epoch)
{
	*epoch = pg_atomic_read_u64(&ps_sink->key_epoch);
	pg_memory_barrier();
	return pg_atomic_read_u32(&ps_sink->keys_committing) == 0;
}

/*
 * True if no commit recorded keys since the epoch was read and none is
 * under way: a lookup made then still stands.
 */
bool
ps_sink_key_epoch_unchanged(uint64 epoch)
{
	uint32		committing = pg_atomic_read_u32(&ps_sink->keys_committing);

	pg_memory_barrier();
	return committing == 0 && pg_atomic_read_u64(&ps_sink->key_epoch) == epoch;
}

/* Marks a commit that records keys as under way; before the commit. */
void
ps_sink_keys_commit_begin(void)
{
	pg_atomic_fetch_add_u32(&ps_sink->keys_committing, 1);
}

/*
 * Ends a commit that recorded keys (or may have): moves the epoch, then
 * no longer counts it as under way.  Once per ps_sink_keys_commit_begin.
 */
void
ps_sink_keys_commit_end(void)
{
	pg_atomic_fetch_add_u64(&ps_sink->key_epoch, 1);
	pg_atomic_fetch_sub_u32(&ps_sink->keys_committing, 1);
}
