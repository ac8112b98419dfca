/*-------------------------------------------------------------------------
 *
 * sink_shmem.c
 *	  Shared memory of the sink: intervals and the hash that finds them,
 *	  and the staging arena, a DSA area created in place with a hard size
 *	  limit (worker slots: sink_slots.c; tickets: sink_tickets.c).
 *
 * The arena is split into two budgets, one for small writes' updates and
 * one for large writes' parts, so that neither kind can starve the other:
 * parts are freed as soon as a worker has written them, small chunks only
 * when their interval commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/settings.h"
#include "shard/debt.h"
#include "sink/sink.h"

/* Key of the shard hash */
typedef struct SinkShardKey
{
	Oid			database;
	char		shard[PS_MAX_SHARD_NAME + 1];
} SinkShardKey;

/* A shard the sink has seen */
typedef struct SinkShardEntry
{
	SinkShardKey key;
	int			open;			/* index of its open interval, or -1 */
	int			wave;			/* writes that joined its last interval */
	int			blocked;		/* its intervals waiting for a held state row */
	TransactionId blocked_by;	/* ... the transaction holding it */
} SinkShardEntry;

/* The arena bytes one role's writes hold, per kind of chunk */
typedef struct SinkRoleEntry
{
	Oid			role;
	uint64		used[2];		/* by SinkChunkKind */
} SinkRoleEntry;

static HTAB *shard_hash = NULL;
static HTAB *role_hash = NULL;
static dsa_area *arena = NULL;

/* Bytes of the arena.  No lock. */
static Size
arena_size(void)
{
	return (Size) ps_shared_memory_kb * 1024;
}

/*
 * Tickets: each backend has at most one write waiting, and each worker
 * (persist_sink.workers, and one per other database, at most
 * persist_sink.max_databases) commits one interval at a time, whose writes may all have been left by
 * their writers (40003) while those wait on a write of another interval;
 * a write withdrawn while its chunk is encoded ahead (one per worker) is
 * freed by the worker.  So this many tickets are never all in use.  No lock.
 */
static int
ticket_count(void)
{
	return MaxBackends * (1 + ps_workers + ps_max_databases) +
		ps_workers + ps_max_databases;
}

/*
 * Interval slots: an interval in use is one a worker commits (one per
 * worker), or holds a write whose writer waits on it (one per backend), or
 * a write withdrawn while a worker encodes its chunk ahead (one per
 * worker): an interval every write has left is freed at once, even while
 * another transaction holds its shard's state row.  So this many are never
 * all in use, and no shard, held or busy, can keep another's writes from
 * an interval.  No lock.
 */
static int
interval_count(void)
{
	return MaxBackends + 2 * (ps_workers + ps_max_databases);
}

/* Size of the interval array.  No lock. */
static Size
intervals_size(void)
{
	return mul_size(interval_count(), sizeof(SinkInterval));
}

/*
 * Entries of the shard hash: every shard with an interval in flight has
 * one, and the idle ones are evicted to make room.  No lock.
 */
static int
shard_hash_size(void)
{
	return Max(PS_SINK_MIN_SHARDS, interval_count());
}

/* Size of the ticket array.  No lock. */
static Size
tickets_size(void)
{
	return mul_size(ticket_count(), sizeof(SinkTicket));
}

/*
 * Entries of the role hash: a role holds arena memory only through a write
 * in flight, which has a ticket.  No lock.
 */
static int
role_hash_size(void)
{
	return ticket_count();
}

/* Shared memory the sink needs: control data and the arena.  No lock. */
Size
ps_sink_shmem_size(void)
{
	Size		size = add_size(MAXALIGN(sizeof(SinkShared)), arena_size());

	size = add_size(size, hash_estimate_size(shard_hash_size(), sizeof(SinkShardEntry)));
	size = add_size(size, hash_estimate_size(role_hash_size(), sizeof(SinkRoleEntry)));
	size = add_size(size, intervals_size());
	return add_size(size, tickets_size());
}

/* Size of the control data and the arena, without the hash.  No lock. */
static Size
sink_struct_size(void)
{
	return add_size(MAXALIGN(sizeof(SinkShared)), arena_size());
}

/* Attaches to (or creates) the shard and role hashes; caller holds AddinShmemInitLock. */
static void
shard_hash_init(void)
{
	HASHCTL		info;

	info.keysize = sizeof(SinkShardKey);
	info.entrysize = sizeof(SinkShardEntry);
	shard_hash = ShmemInitHash("persist_sink sink shards",
							   shard_hash_size(), shard_hash_size(),
							   &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	info.keysize = sizeof(Oid);
	info.entrysize = sizeof(SinkRoleEntry);
	role_hash = ShmemInitHash("persist_sink sink roles",
							  role_hash_size(), role_hash_size(),
							  &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/*
 * Sink workers the postmaster refused a slot when _PG_init registered them,
 * copied into their slots when the shared memory is created.
 */
static bool refused_at_start[PS_SINK_MAX_WORKERS];

/*
 * Records that a sink worker was refused a slot; called from _PG_init.  No
 * lock.
 */
void
ps_sink_note_refused(int worker)
{
	Assert(worker >= 0 && worker < PS_SINK_MAX_WORKERS);
	refused_at_start[worker] = true;
}

/* Creates or attaches the sink's shared memory; caller holds AddinShmemInitLock. */
void
ps_sink_shmem_init(void)
{
	bool		found;
	dsa_area   *area;

	ps_sink_intervals = ShmemInitStruct("persist_sink sink intervals",
										intervals_size(), &found);
	ps_sink_tickets = ShmemInitStruct("persist_sink sink tickets",
									  tickets_size(), &found);
	ps_sink = ShmemInitStruct("persist_sink sink", sink_struct_size(), &found);
	shard_hash_init();
	arena = NULL;
	if (found)
		return;
	memset(ps_sink, 0, sizeof(SinkShared));
	ps_sink->lock = &(GetNamedLWLockTranche("persist_sink sink"))->lock;
	ps_sink->incarnation = (uint64) GetCurrentTimestamp();
	ConditionVariableInit(&ps_sink->space_cv);
	memset(ps_sink_intervals, 0, intervals_size());
	ps_sink->nintervals = interval_count();
	for (int i = 0; i < ps_sink->nintervals; i++)
	{
		ConditionVariableInit(&ps_sink_intervals[i].cv);
		ps_sink_intervals[i].next = i + 1 < ps_sink->nintervals ? i + 1 : -1;
	}
	ps_sink->free_head = 0;
	memset(ps_sink_tickets, 0, tickets_size());
	ps_sink->ntickets = ticket_count();
	for (int t = 0; t < ps_sink->ntickets; t++)
		ps_sink_tickets[t].next = t + 1 < ps_sink->ntickets ? t + 1 : -1;
	ps_sink->free_ticket = 0;
	ps_sink->next_ticket_id = 1;
	pg_atomic_init_u64(&ps_sink->key_epoch, 0);
	for (int w = 0; w < PS_SINK_MAX_WORKERS; w++)
	{
		ps_sink->workers[w].open_head = ps_sink->workers[w].open_tail = -1;
		ps_sink->workers[w].refused = refused_at_start[w];
	}
	/* a quarter of the arena is slack for the area's own bookkeeping */
	ps_sink->budget = arena_size() * 3 / 8;
	area = dsa_create_in_place((char *) ps_sink + MAXALIGN(sizeof(SinkShared)),
							   arena_size(), ps_sink->lock->tranche, NULL);
	dsa_set_size_limit(area, arena_size());
	dsa_pin(area);
	dsa_detach(area);
}

/* The arena, attached on first use in this process.  No lock. */
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

/* The budget counter of a kind of chunk.  Caller holds the lock. */
static uint64 *
budget_used(SinkChunkKind kind)
{
	return kind == CHUNK_SMALL ? &ps_sink->small_used : &ps_sink->parts_used;
}

/*
 * True if a role may take size more bytes of a budget: one role's writes
 * hold at most half of it, or a single chunk of any size, so that another
 * role always finds the other half (a role whose writes wait on a held
 * shard holds only its own share).  Caller holds the lock.
 */
static bool
role_may_take(const SinkRoleEntry *r, SinkChunkKind kind, uint64 size)
{
	return r == NULL || r->used[kind] == 0 ||
		r->used[kind] + size <= ps_sink->budget / 2;
}

/*
 * Takes (size > 0) or returns room in a budget for a chunk of role; false
 * if the budget, or the role's share of it, has no room.  Takes the sink
 * lock.
 */
static bool
budget_take(SinkChunkKind kind, Oid role, int64 size)
{
	uint64	   *used = budget_used(kind);
	SinkRoleEntry *r;
	bool		found;
	bool		ok = true;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	r = hash_search(role_hash, &role, size > 0 ? HASH_ENTER_NULL : HASH_FIND, &found);
	if (r != NULL && size > 0 && !found)
		r->used[CHUNK_SMALL] = r->used[CHUNK_PART] = 0;
	if (size > 0 && (*used + size > ps_sink->budget ||
					 !role_may_take(r, kind, (uint64) size)))
		ok = false;
	else
	{
		*used += size;
		if (r != NULL)
			r->used[kind] += size;
	}
	if (r != NULL && r->used[CHUNK_SMALL] == 0 && r->used[CHUNK_PART] == 0)
		hash_search(role_hash, &role, HASH_REMOVE, NULL);
	LWLockRelease(ps_sink->lock);
	return ok;
}

/*
 * Allocates a chunk with room for payload bytes, charged to the current
 * role.  When the arena, or the role's share of it, is full it waits for
 * room (backpressure) if wait, or returns InvalidDsaPointer.  Takes the
 * sink lock briefly; never holds it while waiting.
 */
dsa_pointer
ps_sink_alloc(SinkChunkKind kind, uint64 payload, bool wait)
{
	uint64		size = MAXALIGN(sizeof(SinkChunk)) + payload;
	Oid			role = GetUserId();
	dsa_pointer p = InvalidDsaPointer;

	Assert(size <= ps_sink->budget);
	for (;;)
	{
		if (budget_take(kind, role, (int64) size))
		{
			p = dsa_allocate_extended(ps_sink_arena(), size, DSA_ALLOC_NO_OOM);
			if (DsaPointerIsValid(p))
				break;
			budget_take(kind, role, -(int64) size);
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
		c->role = role;
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
	Oid			role = c->role;
	uint64		size = MAXALIGN(sizeof(SinkChunk)) + c->size;

	dsa_free(ps_sink_arena(), chunk);
	budget_take(kind, role, -(int64) size);
	ConditionVariableBroadcast(&ps_sink->space_cv);
}

/* Frees every chunk of a list; takes the sink lock per chunk. */
void
ps_sink_free_list(dsa_pointer head)
{
	while (DsaPointerIsValid(head))
	{
		dsa_pointer next = ((SinkChunk *) dsa_get_address(ps_sink_arena(), head))->next;

		ps_sink_free(head);
		head = next;
	}
}

/* Fills the hash key of a shard of this database.  No lock. */
static void
make_key(SinkShardKey *key, Oid database, const char *shard)
{
	memset(key, 0, sizeof(SinkShardKey));
	key->database = database;
	strlcpy(key->shard, shard, sizeof(key->shard));
}

/*
 * Forgets every shard without an open interval (only their wave sizes are
 * lost), to make room in a full hash, as pg_stat_statements deallocates
 * entries.  Caller holds the sink lock exclusively.
 */
static void
evict_idle_shards(void)
{
	HASH_SEQ_STATUS seq;
	SinkShardEntry *e;

	hash_seq_init(&seq, shard_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->open < 0 && e->blocked == 0)
			hash_search(shard_hash, &e->key, HASH_REMOVE, NULL);
}

/* The shard's hash entry, made if needed; caller holds the lock exclusively. */
static SinkShardEntry *
shard_entry(Oid database, const char *shard)
{
	SinkShardKey key;
	SinkShardEntry *e;
	bool		found;

	make_key(&key, database, shard);
	e = hash_search(shard_hash, &key, HASH_FIND, NULL);
	if (e != NULL)
		return e;
	/*
	 * Our own bound, not dynahash's: a full table would otherwise grow into
	 * the server's spare shared memory, which the lock table needs.  At
	 * most as many entries as interval slots have an open or blocked interval,
	 * so evicting the idle ones makes room.
	 */
	if (hash_get_num_entries(shard_hash) >= shard_hash_size())
		evict_idle_shards();
	e = hash_search(shard_hash, &key, HASH_ENTER, &found);
	if (!found)
	{
		e->open = -1;
		e->wave = 1;
		e->blocked = 0;
		e->blocked_by = InvalidTransactionId;
	}
	return e;
}

/* Appends interval i to its worker's open list; caller holds the lock exclusively. */
static void
worker_list_push(SinkWorkerSlot *slot, int i)
{
	ps_sink_intervals[i].next = -1;
	if (slot->open_tail >= 0)
		ps_sink_intervals[slot->open_tail].next = i;
	else
		slot->open_head = i;
	slot->open_tail = i;
}

/*
 * Takes interval i, which follows prev (-1: it is the first), off its
 * worker's open list; caller holds the lock exclusively.
 */
static void
worker_list_unlink(SinkWorkerSlot *slot, int prev, int i)
{
	if (prev >= 0)
		ps_sink_intervals[prev].next = ps_sink_intervals[i].next;
	else
		slot->open_head = ps_sink_intervals[i].next;
	if (slot->open_tail == i)
		slot->open_tail = prev;
	ps_sink_intervals[i].next = -1;
}

/* Takes interval i off its worker's open list; caller holds the lock exclusively. */
static void
worker_list_remove(SinkWorkerSlot *slot, int i)
{
	int			prev = -1;

	for (int j = slot->open_head; j >= 0; prev = j, j = ps_sink_intervals[j].next)
		if (j == i)
		{
			worker_list_unlink(slot, prev, i);
			return;
		}
}

/*
 * Intervals of a shard of this database not yet committed: open or being
 * processed (including those waiting to be tried again).  Caller holds the
 * lock.
 */
int
ps_sink_in_flight(const char *shard)
{
	int			n = 0;

	for (int i = 0; i < ps_sink->nintervals; i++)
	{
		SinkInterval *iv = &ps_sink_intervals[i];

		if ((iv->state == IV_OPEN || iv->state == IV_PROCESSING) &&
			iv->database == MyDatabaseId && strcmp(iv->shard, shard) == 0)
			n++;
	}
	return n;
}

/*
 * True if a new interval of the shard would take it to
 * persist_sink.stop_batches (backpressure: the writer that would open it
 * goes back to its bounded wait for compaction in sink_writer.c).  Its
 * committed batches and its intervals in flight are counted under the lock,
 * so writers that passed that wait together still cannot pass the bound.
 * Not while background compaction is off: nothing would lower the count
 * (the writer's own wait is bounded then).  Caller holds the lock; takes
 * the debt lock.
 */
bool
ps_sink_stopped(const char *shard)
{
	if (!ps_compaction)
		return false;
	return ps_debt_batches(shard) + ps_sink_in_flight(shard) >= ps_stop_batches;
}

/*
 * Returns the index of the shard's open interval (this database's), opening
 * one if needed; -1 if every interval slot is in use or the shard is at its
 * stop bound, PS_SINK_NO_WORKER if no worker slot is left for this
 * database.  Caller holds the lock exclusively.
 */
int
ps_sink_open_interval(const char *shard)
{
	SinkShardEntry *e = shard_entry(MyDatabaseId, shard);
	SinkInterval *iv;
	int			i;
	int			worker;

	if (e->open >= 0)
		return e->open;
	if (ps_sink->free_head < 0 || ps_sink_stopped(shard))
		return -1;
	worker = ps_sink_worker_for(shard);
	if (worker < 0)
		return PS_SINK_NO_WORKER;
	i = ps_sink->free_head;
	iv = &ps_sink_intervals[i];
	ps_sink->free_head = iv->next;
	ps_sink_interval_move(iv, IV_FREE, IV_OPEN);
	iv->database = MyDatabaseId;
	strlcpy(iv->shard, shard, sizeof(iv->shard));
	iv->worker = worker;
	iv->seq = ps_sink->next_seq++;
	iv->opened_at = GetCurrentTimestamp();
	iv->expected = e->wave;
	iv->joined = 0;
	iv->active_large = 0;
	iv->waiters = 0;
	iv->small_head = InvalidDsaPointer;
	iv->parts_head = InvalidDsaPointer;
	iv->parts_tail = InvalidDsaPointer;
	iv->waiting_row = false;
	iv->taking = false;
	iv->parts_store[0] = '\0';
	iv->blocked_by = InvalidTransactionId;
	iv->retry_at = 0;
	iv->tickets_head = iv->tickets_tail = -1;
	iv->message[0] = '\0';
	worker_list_push(&ps_sink->workers[iv->worker], i);
	e->open = i;
	return i;
}

/*
 * True if an open interval's writes make it ready without waiting for its
 * deadline: a large write joined, or as many writes as joined the shard's
 * previous interval (the wave).  Caller holds the lock.
 */
bool
ps_sink_wave_joined(const SinkInterval *iv)
{
	return iv->joined > 0 && (iv->active_large > 0 || iv->joined >= iv->expected);
}

/* True if an open interval should be sealed now; caller holds the lock. */
static bool
interval_ready(const SinkInterval *iv, TimestampTz now, long *sleep_ms)
{
	TimestampTz deadline;

	if (iv->joined == 0)
		return false;
	if (ps_sink_wave_joined(iv))
		return true;
	deadline = TimestampTzPlusMilliseconds(iv->opened_at, ps_batch_interval_ms);
	if (now >= deadline)
		return true;
	*sleep_ms = Min(*sleep_ms, Max(1, TimestampDifferenceMilliseconds(now, deadline)));
	return false;
}

/*
 * True if an earlier interval of the shard waits for its held state row:
 * the open one then stays open, gathering writes, until that one commits.
 * Caller holds the lock.
 */
static bool
shard_blocked(const SinkInterval *iv)
{
	SinkShardKey key;
	SinkShardEntry *e;

	make_key(&key, iv->database, iv->shard);
	e = hash_search(shard_hash, &key, HASH_FIND, NULL);
	return e != NULL && e->blocked > 0;
}

/*
 * Records that a processed interval waits for its shard's state row, held
 * by transaction holder, to be tried again at retry_at (blocked true), or
 * no longer (and then wakes its writers).  While a shard has such an
 * interval its open interval is not taken.  Takes the sink lock.
 */
void
ps_sink_set_blocked(SinkInterval *iv, bool blocked, TransactionId holder,
					TimestampTz retry_at)
{
	SinkShardEntry *e;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	e = shard_entry(iv->database, iv->shard);
	if (blocked)
	{
		if (!iv->waiting_row)
			e->blocked++;
		iv->waiting_row = true;
		iv->blocked_by = holder;
		iv->retry_at = retry_at;
		e->blocked_by = holder;
	}
	else
	{
		if (iv->waiting_row)
			e->blocked--;
		iv->waiting_row = false;
		iv->blocked_by = InvalidTransactionId;
		if (e->blocked == 0)
			e->blocked_by = InvalidTransactionId;
	}
	LWLockRelease(ps_sink->lock);
	/* a large write waits for the worker to take its parts */
	if (!blocked)
		ConditionVariableBroadcast(&iv->cv);
}

/* When the worker tries a blocked interval again; takes the sink lock. */
TimestampTz
ps_sink_retry_at(const SinkInterval *iv)
{
	TimestampTz at;

	LWLockAcquire(ps_sink->lock, LW_SHARED);
	at = iv->retry_at;
	LWLockRelease(ps_sink->lock);
	return at;
}

/*
 * Tells the sink that a transaction of this database that held a shard's
 * state row (a compactor's merge) has ended: the shard's intervals waiting
 * for the row are tried again at once, their workers woken, instead of
 * after the worker's pause.  A hash probe under the shared lock when none
 * waits.  Takes the sink lock.
 */
void
ps_sink_state_row_released(const char *shard)
{
	SinkShardKey key;
	SinkShardEntry *e;
	PGPROC	   *wake[PS_SINK_MAX_WORKERS];
	int			nwake = 0;

	make_key(&key, MyDatabaseId, shard);
	LWLockAcquire(ps_sink->lock, LW_SHARED);
	e = hash_search(shard_hash, &key, HASH_FIND, NULL);
	if (e == NULL || e->blocked == 0)
	{
		LWLockRelease(ps_sink->lock);
		return;
	}
	LWLockRelease(ps_sink->lock);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (int i = 0; i < ps_sink->nintervals; i++)
	{
		SinkInterval *iv = &ps_sink_intervals[i];
		PGPROC	   *proc;

		if (!iv->waiting_row || iv->database != MyDatabaseId ||
			strcmp(iv->shard, shard) != 0)
			continue;
		iv->retry_at = 0;
		proc = ps_sink->workers[iv->worker].proc;
		if (proc != NULL && nwake < PS_SINK_MAX_WORKERS)
			wake[nwake++] = proc;
	}
	LWLockRelease(ps_sink->lock);
	for (int i = 0; i < nwake; i++)
		SetLatch(&wake[i]->procLatch);
}

/*
 * The transaction whose hold on the shard's state row keeps an interval
 * (or, for an open one, the interval before it) from committing; invalid
 * if none.  Caller holds the lock.
 */
TransactionId
ps_sink_blocker(const SinkInterval *iv)
{
	SinkShardKey key;
	SinkShardEntry *e;

	if (TransactionIdIsValid(iv->blocked_by))
		return iv->blocked_by;
	make_key(&key, iv->database, iv->shard);
	e = hash_search(shard_hash, &key, HASH_FIND, NULL);
	return e ? e->blocked_by : InvalidTransactionId;
}

/*
 * Takes the oldest ready open interval of a worker off its list and the
 * hash, marks it processing (no more writers join it) and remembers how
 * many writes joined; -1 if none is ready, with *sleep_ms lowered to the
 * nearest deadline.  An interval whose shard has one waiting for its state
 * row is not taken.  Takes the sink lock.
 */
int
ps_sink_take_ready(int worker, TimestampTz now, long *sleep_ms)
{
	SinkWorkerSlot *slot = &ps_sink->workers[worker];
	int			prev = -1;
	int			i;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (i = slot->open_head; i >= 0; prev = i, i = ps_sink_intervals[i].next)
		if (interval_ready(&ps_sink_intervals[i], now, sleep_ms) &&
			!shard_blocked(&ps_sink_intervals[i]))
			break;
	if (i >= 0)
	{
		SinkInterval *iv = &ps_sink_intervals[i];
		SinkShardEntry *e = shard_entry(iv->database, iv->shard);

		worker_list_unlink(slot, prev, i);
		ps_sink_interval_move(iv, IV_OPEN, IV_PROCESSING);
		e->open = -1;
		e->wave = iv->joined;
	}
	LWLockRelease(ps_sink->lock);
	if (i >= 0)
		ConditionVariableBroadcast(&ps_sink_intervals[i].cv);
	return i;
}

/* Returns a done interval nobody waits on to the free list; caller holds the lock exclusively. */
static void
free_if_unused(SinkInterval *iv)
{
	if (iv->state != IV_DONE || iv->waiters > 0)
		return;
	ps_sink_interval_move(iv, IV_DONE, IV_FREE);
	iv->next = ps_sink->free_head;
	ps_sink->free_head = iv - ps_sink_intervals;
	ConditionVariableBroadcast(&ps_sink->space_cv);
}

/* Drops one waiter; frees a finished interval nobody waits on.  Caller holds the lock exclusively. */
void
ps_sink_release(SinkInterval *iv)
{
	iv->waiters--;
	free_if_unused(iv);
}

/* Marks a processed interval done, freeing it if nobody waits; caller holds the lock exclusively. */
void
ps_sink_finish(SinkInterval *iv)
{
	ps_sink_interval_move(iv, IV_PROCESSING, IV_DONE);
	free_if_unused(iv);
}

/*
 * True if every write has left an interval: no ticket, no large write
 * handing parts, no writer to read a result.  Caller holds the lock.
 */
bool
ps_sink_abandoned(const SinkInterval *iv)
{
	return iv->tickets_head < 0 && iv->active_large == 0 && iv->waiters == 0;
}

/*
 * Frees an open interval every write has left (withdrawn before the seal),
 * so that writers who gave up on a held or slow shard keep no slot.  A
 * processed one is its worker's to finish.  Caller holds the lock
 * exclusively.
 */
void
ps_sink_drop_if_abandoned(SinkInterval *iv)
{
	SinkShardKey key;
	SinkShardEntry *e;
	int			i = iv - ps_sink_intervals;

	if (iv->state != IV_OPEN || !ps_sink_abandoned(iv))
		return;
	worker_list_remove(&ps_sink->workers[iv->worker], i);
	make_key(&key, iv->database, iv->shard);
	e = hash_search(shard_hash, &key, HASH_FIND, NULL);
	if (e != NULL && e->open == i)
		e->open = -1;
	ps_sink_interval_move(iv, IV_OPEN, IV_DONE);
	free_if_unused(iv);
}

/* What the sink holds now, for the sink_memory() view; takes the sink lock. */
void
ps_sink_usage(SinkUsage *usage)
{
	memset(usage, 0, sizeof(SinkUsage));
	if (ps_sink == NULL)
		return;
	LWLockAcquire(ps_sink->lock, LW_SHARED);
	usage->budget = ps_sink->budget;
	usage->small_used = ps_sink->small_used;
	usage->parts_used = ps_sink->parts_used;
	for (int i = 0; i < ps_sink->nintervals; i++)
	{
		if (ps_sink_intervals[i].state != IV_FREE)
			usage->intervals++;
		if (ps_sink_intervals[i].state == IV_PROCESSING &&
			ps_sink_intervals[i].waiting_row)
			usage->blocked++;
	}
	LWLockRelease(ps_sink->lock);
}
