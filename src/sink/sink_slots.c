/*-------------------------------------------------------------------------
 *
 * sink_slots.c
 *	  The sink's worker slots: which worker serves a shard, and the slots
 *	  of databases other than persist_sink.database, claimed while they
 *	  have appends in flight.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/proc.h"

#include "base/background.h"
#include "base/settings.h"
#include "sink/sink.h"

/* Starts the worker of sink slot w; caller holds the lock exclusively. */
static void
start_slot_worker(int w)
{
	ps_slot_start_worker(&ps_sink->workers[w].claim, "ps_sink_worker_main",
						 "persist_sink worker", w, ps_sink->incarnation);
}

/*
 * The slot of a database other than persist_sink.database: the one it
 * claimed, or a free one claimed now, its worker started; -1 if every slot
 * is claimed.  A slot whose worker was refused is tried again once its
 * last interval is gone.  Caller holds the lock exclusively.
 */
static int
database_slot(Oid database)
{
	int			free_slot = -1;
	SinkWorkerSlot *slot;

	for (int w = ps_workers; w < ps_workers + ps_max_databases; w++)
	{
		slot = &ps_sink->workers[w];
		if (slot->claim.database == database)
		{
			if (slot->claim.refused && slot->open_head < 0)
				start_slot_worker(w);
			return w;
		}
		if (!OidIsValid(slot->claim.database) && free_slot < 0)
			free_slot = w;
	}
	if (free_slot < 0)
		return -1;
	slot = &ps_sink->workers[free_slot];
	ps_slot_claim(&slot->claim, database);
	slot->proc = NULL;
	start_slot_worker(free_slot);
	return free_slot;
}

/*
 * The worker slot that serves a shard of this database: one of the first
 * persist_sink.workers, by the shard's name, in persist_sink.database; its
 * database's own slot in another (claimed, and its worker started, if
 * needed); -1 if every slot is claimed.  Caller holds the lock exclusively
 * and has called ps_home_database() before (which may read the catalogs).
 */
int
ps_sink_worker_for(const char *shard)
{
	if (!ps_home_database())
		return database_slot(MyDatabaseId);
	return (int) (hash_bytes((const unsigned char *) shard, strlen(shard)) %
				  (uint32) ps_workers);
}

/*
 * Checks that slot is still that of claim, the claim a worker was started
 * for, bringing the claim up to date; false if the slot was given up
 * since, or claimed by another database.  After shared memory was reset (a
 * crash), a worker restarted claims its slot again if it is free.  With
 * attach, also makes this process the slot's worker.  Takes the lock.
 */
bool
ps_sink_claim_slot(int w, PsWorkerClaim *claim, bool attach)
{
	SinkWorkerSlot *slot = &ps_sink->workers[w];
	bool		mine;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	mine = ps_slot_is_mine(&slot->claim, claim, ps_sink->incarnation,
						   slot->proc != NULL);
	if (mine && attach)
		slot->proc = MyProc;
	LWLockRelease(ps_sink->lock);
	return mine;
}

/*
 * Gives up a database's slot, as its worker exits, if it has no open
 * interval and (idle is true) it was idle or (idle is false) its database
 * is being dropped; true if it did.  Takes the lock.
 */
bool
ps_sink_give_up_slot(int w, bool idle)
{
	SinkWorkerSlot *slot = &ps_sink->workers[w];
	bool		give_up;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	give_up = slot->open_head < 0 && (idle || slot->claim.stop);
	if (give_up)
	{
		ps_slot_free(&slot->claim);
		slot->proc = NULL;
	}
	LWLockRelease(ps_sink->lock);
	return give_up;
}

/*
 * Tells the worker of a database being dropped to exit (DROP DATABASE
 * waits for every process connected to it), and gives up its slot at once
 * if no worker runs.  Takes the lock.
 */
void
ps_sink_stop_database(Oid database)
{
	PGPROC	   *wake[PS_SINK_MAX_WORKERS];
	int			nwake = 0;

	if (ps_sink == NULL)
		return;
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (int w = ps_workers; w < ps_workers + ps_max_databases; w++)
	{
		SinkWorkerSlot *slot = &ps_sink->workers[w];

		if (slot->claim.database != database)
			continue;
		if (slot->proc != NULL)
		{
			slot->claim.stop = true;
			wake[nwake++] = slot->proc;
		}
		else if (slot->open_head < 0)
			ps_slot_free(&slot->claim);
	}
	LWLockRelease(ps_sink->lock);
	for (int i = 0; i < nwake; i++)
		SetLatch(&wake[i]->procLatch);
}
