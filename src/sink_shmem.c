/*-------------------------------------------------------------------------
 *
 * sink_shmem.c
 *	  Shared memory of the sink: intervals, worker slots, and the staging
 *	  arena, a DSA area created in place with a hard size limit.
 *
 * The arena is split into two budgets, one for small writes' updates and
 * one for large writes' parts, so that neither kind can starve the other:
 * parts are freed as soon as a worker has written them, small chunks only
 * when their interval commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "settings.h"
#include "sink.h"

SinkShared *ps_sink = NULL;
static dsa_area *arena = NULL;

/* Bytes of the arena. */
static Size
arena_size(void)
{
	return (Size) ps_shared_memory_kb * 1024;
}

/* Shared memory the sink needs: control data and the arena. */
Size
ps_sink_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(SinkShared)), arena_size());
}

/* Creates or attaches the sink's shared memory; caller holds AddinShmemInitLock. */
void
ps_sink_shmem_init(void)
{
	bool		found;
	dsa_area   *area;

	ps_sink = ShmemInitStruct("persist_sink sink", ps_sink_shmem_size(), &found);
	arena = NULL;
	if (found)
		return;
	memset(ps_sink, 0, sizeof(SinkShared));
	ps_sink->lock = &(GetNamedLWLockTranche("persist_sink sink"))->lock;
	ConditionVariableInit(&ps_sink->space_cv);
	for (int i = 0; i < PS_SINK_MAX_INTERVALS; i++)
		ConditionVariableInit(&ps_sink->intervals[i].cv);
	/* requests queued before a crash are gone: look at every shard */
	ps_sink->compact_overflow = true;
	/* a quarter of the arena is slack for the area's own bookkeeping */
	ps_sink->budget = arena_size() * 3 / 8;
	area = dsa_create_in_place((char *) ps_sink + MAXALIGN(sizeof(SinkShared)),
							   arena_size(), ps_sink->lock->tranche, NULL);
	dsa_set_size_limit(area, arena_size());
	dsa_pin(area);
	dsa_detach(area);
}

/* The arena, attached on first use in this process. */
dsa_area *
ps_sink_arena(void)
{
	if (arena == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		arena = dsa_attach_in_place((char *) ps_sink + MAXALIGN(sizeof(SinkShared)),
									NULL);
		dsa_pin_mapping(arena);
		MemoryContextSwitchTo(old);
	}
	return arena;
}

/* The budget counter of a kind of chunk. */
static uint64 *
budget_used(SinkChunkKind kind)
{
	return kind == CHUNK_SMALL ? &ps_sink->small_used : &ps_sink->parts_used;
}

/* Takes or returns room in a budget; takes the sink lock. */
static bool
budget_take(SinkChunkKind kind, int64 size)
{
	uint64	   *used = budget_used(kind);
	bool		ok = true;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	if (size > 0 && *used + size > ps_sink->budget)
		ok = false;
	else
		*used += size;
	LWLockRelease(ps_sink->lock);
	return ok;
}

/*
 * Allocates a chunk with room for payload bytes.  When the arena is full it
 * waits for room (backpressure) if wait, or returns InvalidDsaPointer.
 * Takes the sink lock briefly; never holds it while waiting.
 */
dsa_pointer
ps_sink_alloc(SinkChunkKind kind, uint64 payload, bool wait)
{
	uint64		size = MAXALIGN(sizeof(SinkChunk)) + payload;
	dsa_pointer p = InvalidDsaPointer;

	Assert(size <= ps_sink->budget);
	for (;;)
	{
		if (budget_take(kind, (int64) size))
		{
			p = dsa_allocate_extended(ps_sink_arena(), size, DSA_ALLOC_NO_OOM);
			if (DsaPointerIsValid(p))
				break;
			budget_take(kind, -(int64) size);
		}
		if (!wait)
			return InvalidDsaPointer;
		ConditionVariableTimedSleep(&ps_sink->space_cv, 100, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		memset(c, 0, sizeof(SinkChunk));
		c->next = InvalidDsaPointer;
		c->kind = kind;
		c->size = payload;
	}
	return p;
}

/* Frees a chunk and wakes writers waiting for room; takes the sink lock. */
void
ps_sink_free(dsa_pointer chunk)
{
	SinkChunk  *c = dsa_get_address(ps_sink_arena(), chunk);
	SinkChunkKind kind = c->kind;
	uint64		size = MAXALIGN(sizeof(SinkChunk)) + c->size;

	dsa_free(ps_sink_arena(), chunk);
	budget_take(kind, -(int64) size);
	ConditionVariableBroadcast(&ps_sink->space_cv);
}

/* The worker that serves a shard. */
int
ps_sink_worker_for(const char *shard)
{
	return (int) (hash_bytes((const unsigned char *) shard, strlen(shard)) %
				  (uint32) ps_workers);
}

/* Index of the shard's open interval, or -1; caller holds the sink lock. */
static int
find_open(const char *shard)
{
	for (int i = 0; i < PS_SINK_MAX_INTERVALS; i++)
		if (ps_sink->intervals[i].state == IV_OPEN &&
			strcmp(ps_sink->intervals[i].shard, shard) == 0)
			return i;
	return -1;
}

/* The last wave size remembered for a shard (1 if none); caller holds the lock. */
static int
remembered_wave(const char *shard)
{
	for (int i = 0; i < PS_SINK_SHARD_MEMORY; i++)
		if (strcmp(ps_sink->memory[i].shard, shard) == 0)
			return Max(ps_sink->memory[i].writers, 1);
	return 1;
}

/* Remembers how many writes joined a shard's interval; caller holds the lock exclusively. */
void
ps_sink_remember_wave(const char *shard, int writers)
{
	SinkShardMemory *m = NULL;

	for (int i = 0; i < PS_SINK_SHARD_MEMORY && m == NULL; i++)
		if (strcmp(ps_sink->memory[i].shard, shard) == 0)
			m = &ps_sink->memory[i];
	if (m == NULL)
	{
		m = &ps_sink->memory[ps_sink->next_memory];
		ps_sink->next_memory = (ps_sink->next_memory + 1) % PS_SINK_SHARD_MEMORY;
		strlcpy(m->shard, shard, sizeof(m->shard));
	}
	m->writers = writers;
}

/*
 * Returns the index of the shard's open interval, opening one if needed,
 * or -1 if every interval slot is in use.  Caller holds the lock exclusively.
 */
int
ps_sink_open_interval(const char *shard)
{
	int			i = find_open(shard);
	SinkInterval *iv;

	if (i >= 0)
		return i;
	for (i = 0; i < PS_SINK_MAX_INTERVALS; i++)
		if (ps_sink->intervals[i].state == IV_FREE)
			break;
	if (i == PS_SINK_MAX_INTERVALS)
		return -1;
	iv = &ps_sink->intervals[i];
	iv->state = IV_OPEN;
	strlcpy(iv->shard, shard, sizeof(iv->shard));
	iv->worker = ps_sink_worker_for(shard);
	iv->seq = ps_sink->next_seq++;
	iv->opened_at = GetCurrentTimestamp();
	iv->expected = remembered_wave(shard);
	iv->joined = 0;
	iv->active_large = 0;
	iv->waiters = 0;
	iv->small_head = InvalidDsaPointer;
	iv->parts_head = InvalidDsaPointer;
	iv->parts_tail = InvalidDsaPointer;
	iv->poisoned = false;
	iv->nabandoned = 0;
	iv->nrejected = 0;
	iv->nsmall = 0;
	iv->nlarge = 0;
	iv->failed = false;
	iv->time = 0;
	iv->sqlerrcode = 0;
	iv->message[0] = '\0';
	return i;
}

/* Drops one waiter; frees a finished interval nobody waits on.  Caller holds the lock exclusively. */
void
ps_sink_release(SinkInterval *iv)
{
	iv->waiters--;
	if (iv->state == IV_DONE && iv->waiters == 0)
		iv->state = IV_FREE;
}
