/*-------------------------------------------------------------------------
 *
 * progress.c
 *	  Progress of the merges in progress (the background compactor's and
 *	  compact()'s), for the compaction_progress view, in the manner of
 *	  PostgreSQL's pg_stat_progress_* views.
 *
 * Shared memory holds one slot per backend (MaxBackends of them, indexed by
 * MyBackendId), so a merge always has a slot and none is ever allocated or
 * freed.  A slot is written only by its own backend, without a lock: the
 * merge updates it every PROGRESS_EVERY updates from its inner loop, where
 * an LWLock would make it contend with every reader of the view.  As with
 * pgstat's st_changecount, the writer makes the slot's changecount odd
 * before a change and even again after it (in a critical section, so that
 * no error can leave it odd), and a reader copies the slot and retries
 * until the count was the same even number before and after the copy: a
 * row is never a mix of two writes.
 *
 * A slot is cleared when its merge ends, when the merge raises an error (the
 * caller ends it in PG_FINALLY), and when the backend exits while a merge
 * is in progress (a before_shmem_exit callback): a cancelled compact() or a
 * terminated compactor leaves no row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "shard/progress.h"

/* Updates read between two updates of a merge's slot */
#define PROGRESS_EVERY		1024

typedef struct ProgressSlot
{
	int			changecount;	/* odd while its owner writes */
	PsProgress	progress;		/* pid 0 when no merge is in progress */
} ProgressSlot;

static ProgressSlot *slots = NULL;
static int	nslots = 0;

/* This backend's merge: whether one is reported, and what was last written */
static bool active = false;
static int64 last_merged = 0;
static bool exit_callback_registered = false;

/* Starts a change of a slot: its changecount becomes odd. */
#define SLOT_BEGIN_WRITE(s) \
	do { \
		START_CRIT_SECTION(); \
		(s)->changecount++; \
		pg_write_barrier(); \
	} while (0)

/* Ends a change of a slot: its changecount becomes even again. */
#define SLOT_END_WRITE(s) \
	do { \
		pg_write_barrier(); \
		(s)->changecount++; \
		Assert(((s)->changecount & 1) == 0); \
		END_CRIT_SECTION(); \
	} while (0)

/* Shared memory of the slots: one per backend. */
Size
ps_progress_shmem_size(void)
{
	return mul_size(MaxBackends, sizeof(ProgressSlot));
}

/* Creates or attaches the slots; caller holds AddinShmemInitLock. */
void
ps_progress_shmem_init(void)
{
	bool		found;

	nslots = MaxBackends;
	slots = ShmemInitStruct("persist_sink progress", ps_progress_shmem_size(),
							&found);
	if (!found)
		memset(slots, 0, ps_progress_shmem_size());
}

/* The current backend's slot; NULL without one. */
static volatile ProgressSlot *
own_slot(void)
{
	if (slots == NULL || MyBackendId < 1 || MyBackendId > nslots)
		return NULL;
	return &slots[MyBackendId - 1];
}

/* Clears the slot of a merge the exiting backend left in progress. */
static void
clear_at_exit(int code, Datum arg)
{
	ps_progress_end();
}

/*
 * Reports that the current backend starts a merge of a run of `batches`
 * batches holding updates_total updates of shard.  No lock.
 */
void
ps_progress_begin(PsProgressCommand command, const char *shard, int batches,
				  int64 updates_total)
{
	volatile ProgressSlot *slot = own_slot();
	TimestampTz now = GetCurrentTimestamp();

	Assert(!active);
	if (slot == NULL)
		return;
	if (!exit_callback_registered)
	{
		before_shmem_exit(clear_at_exit, (Datum) 0);
		exit_callback_registered = true;
	}
	SLOT_BEGIN_WRITE(slot);
	slot->progress.pid = MyProcPid;
	slot->progress.database = MyDatabaseId;
	slot->progress.command = command;
	slot->progress.phase = PS_PROGRESS_MERGING;
	strlcpy((char *) slot->progress.shard, shard, sizeof(slot->progress.shard));
	slot->progress.batches = batches;
	slot->progress.updates_total = updates_total;
	slot->progress.updates_merged = 0;
	slot->progress.bytes_written = 0;
	slot->progress.started_at = now;
	SLOT_END_WRITE(slot);
	active = true;
	last_merged = 0;
}

/*
 * Reports the updates read and the bytes written so far by the current
 * merge; writes the slot only every PROGRESS_EVERY updates.  No lock.
 */
void
ps_progress_update(int64 updates_merged, int64 bytes_written)
{
	volatile ProgressSlot *slot = own_slot();

	if (!active || slot == NULL || updates_merged - last_merged < PROGRESS_EVERY)
		return;
	SLOT_BEGIN_WRITE(slot);
	slot->progress.updates_merged = updates_merged;
	slot->progress.bytes_written = bytes_written;
	SLOT_END_WRITE(slot);
	last_merged = updates_merged;
}

/*
 * Reports that the current merge enters phase, having read updates_merged
 * updates and written bytes_written bytes.  No lock.
 */
void
ps_progress_set_phase(PsProgressPhase phase, int64 updates_merged,
					  int64 bytes_written)
{
	volatile ProgressSlot *slot = own_slot();

	if (!active || slot == NULL)
		return;
	SLOT_BEGIN_WRITE(slot);
	slot->progress.phase = phase;
	slot->progress.updates_merged = updates_merged;
	slot->progress.bytes_written = bytes_written;
	SLOT_END_WRITE(slot);
	last_merged = updates_merged;
}

/* Clears the current backend's slot, if a merge is reported.  No lock. */
void
ps_progress_end(void)
{
	volatile ProgressSlot *slot = own_slot();

	if (!active || slot == NULL)
		return;
	SLOT_BEGIN_WRITE(slot);
	slot->progress.pid = 0;
	SLOT_END_WRITE(slot);
	active = false;
}

/*
 * Copies a slot as its owner last wrote it completely, retrying while a
 * write is under way; false if no merge is in progress there.  No lock.
 */
static bool
read_slot(volatile ProgressSlot *slot, PsProgress *out)
{
	for (;;)
	{
		int			before = slot->changecount;
		int			after;

		pg_read_barrier();
		memcpy(out, (const PsProgress *) &slot->progress, sizeof(PsProgress));
		pg_read_barrier();
		after = slot->changecount;
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return out->pid != 0;
}

/* Calls fn for every merge in progress, in every database.  No lock. */
void
ps_progress_foreach(PsProgressVisitor fn, void *arg)
{
	for (int i = 0; i < nslots; i++)
	{
		PsProgress	copy;

		if (read_slot(&slots[i], &copy))
			fn(&copy, arg);
	}
}
