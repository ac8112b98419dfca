/*-------------------------------------------------------------------------
 *
 * sink_shared.c
 *	  Building an interval's shared part from its small writes.
 *
 * Each small write is a run of updates its writer sorted and consolidated.
 * At the seal, the worker merges the runs into one stream and encodes it.
 * But the runs of one interval often do not overlap at all (each client
 * writes its own keys: a tenant, a sequence, a random prefix), and then the
 * shared part is the runs' blocks one after the other.  So while an
 * interval is still open, its worker encodes each large enough run that
 * has joined (ps_sink_encode_ahead), in the time it would otherwise sleep
 * waiting for the rest of the wave; at the seal, if no two runs overlap, it
 * only encodes the runs it has not encoded yet and puts the blocks in key
 * order.  Runs that overlap are merged as before.  Either way the part is
 * sorted and consolidated, and holds the same updates.
 *
 * What a worker encoded ahead is its own memory, kept per interval slot
 * until the interval is finished (ps_sink_forget_ahead).  It reads a
 * chunk's payload without the sink lock: the payload does not change once
 * the chunk is attached, and only the interval's worker frees it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/binaryheap.h"
#include "utils/memutils.h"

#include "base/settings.h"
#include "codec/diff_sum.h"
#include "shard/shard.h"
#include "sink/sink.h"

/* A small write's run, encoded while its interval was open */
typedef struct AheadRun
{
	uint64		ticket_id;		/* the write's */
	char	   *data;
	PsPartInfo	info;
} AheadRun;

/* What this worker encoded ahead for one of its open intervals */
typedef struct Ahead
{
	uint64		seq;			/* the interval's, to tell a reused slot */
	uint64		seen_id;		/* writes with tickets up to this id were
								 * looked at */
	MemoryContext cxt;			/* NULL until first used */
	List	   *runs;			/* AheadRun, in cxt */
} Ahead;

/* Per interval slot, made on first use in this worker */
static Ahead *ahead = NULL;

/* What this worker encoded ahead for interval slot index. */
static Ahead *
ahead_of(int index)
{
	if (ahead == NULL)
		ahead = MemoryContextAllocZero(TopMemoryContext,
									   sizeof(Ahead) * ps_sink->nintervals);
	return &ahead[index];
}

/* Points updates at the payload of one small chunk (in place in the arena). */
static void
parse_small(SinkChunk *c, PsUpdate *u)
{
	const char *d = SINK_CHUNK_PAYLOAD(c);

	for (uint64 i = 0; i < c->nupdates; i++)
	{
		memcpy(&u[i].key_len, d, 4);
		memcpy(&u[i].val_len, d + 4, 4);
		memcpy(&u[i].diff, d + 8, 8);
		u[i].time = 0;
		u[i].key = d + 16;
		u[i].val = u[i].key + u[i].key_len;
		d = u[i].val + u[i].val_len;
	}
}

/*
 * Reads the updates of every small chunk of a list, in place.  Each chunk's
 * updates (sorted by its writer) form a run: run i is [starts[i],
 * starts[i + 1]), from chunk (*chunks)[i].
 */
static PsUpdate *
gather_small(dsa_pointer head, int *n, int **starts, int *nruns,
			 dsa_pointer **chunks)
{
	int			total = 0;
	int			k = 0;
	PsUpdate   *u;

	for (dsa_pointer p = head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		total += (int) c->nupdates;
		k++;
		p = c->next;
	}
	u = palloc_extended(sizeof(PsUpdate) * Max(total, 1), MCXT_ALLOC_HUGE);
	*starts = palloc(sizeof(int) * (k + 1));
	*chunks = palloc(sizeof(dsa_pointer) * Max(k, 1));
	*n = 0;
	*nruns = 0;
	for (dsa_pointer p = head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		(*chunks)[*nruns] = p;
		(*starts)[(*nruns)++] = *n;
		parse_small(c, &u[*n]);
		*n += (int) c->nupdates;
		p = c->next;
	}
	(*starts)[*nruns] = *n;
	return u;
}

/* A run being merged */
typedef struct RunCursor
{
	const PsUpdate *cur;
	const PsUpdate *end;
} RunCursor;

/* Heap order of runs: the smallest (key, val, time) on top. */
static int
run_cmp(Datum a, Datum b, void *arg)
{
	return -ps_update_cmp_kvt(((RunCursor *) DatumGetPointer(a))->cur,
							  ((RunCursor *) DatumGetPointer(b))->cur);
}

/*
 * Ends the run of equal updates last in out[0 .. *n) with its sum: sets
 * its diff, or drops it if the sum is zero.  False if the sum leaves
 * bigint.
 */
static bool
end_sum(PsUpdate *out, int *n, PsDiffSum sum)
{
	if (*n == 0)
		return true;
	if (!ps_diff_sum_fits(sum))
		return false;
	out[*n - 1].diff = ps_diff_sum_value(sum);
	if (out[*n - 1].diff == 0)
		(*n)--;
	return true;
}

/*
 * Merges sorted runs of u into out (room for all), summing equal
 * (key, val, time) and dropping zeros: O(n log runs) instead of a sort.
 * Returns false if a sum leaves bigint (codec/diff_sum.h: only the total
 * counts).
 */
static bool
merge_runs(const PsUpdate *u, const int *starts, int nruns, PsUpdate *out, int *n)
{
	binaryheap *heap = binaryheap_allocate(Max(nruns, 1), run_cmp, NULL);
	RunCursor  *runs = palloc(sizeof(RunCursor) * Max(nruns, 1));
	PsDiffSum	sum = ps_diff_sum_of(0);
	bool		fits = true;

	for (int i = 0; i < nruns; i++)
	{
		runs[i].cur = &u[starts[i]];
		runs[i].end = &u[starts[i + 1]];
		if (runs[i].cur < runs[i].end)
			binaryheap_add_unordered(heap, PointerGetDatum(&runs[i]));
	}
	binaryheap_build(heap);
	*n = 0;
	while (fits && !binaryheap_empty(heap))
	{
		RunCursor  *r = (RunCursor *) DatumGetPointer(binaryheap_first(heap));
		PsUpdate	x = *r->cur++;

		if (r->cur < r->end)
			binaryheap_replace_first(heap, PointerGetDatum(r));
		else
			(void) binaryheap_remove_first(heap);
		if (*n > 0 && ps_update_cmp_kvt(&out[*n - 1], &x) == 0)
		{
			ps_diff_sum_add(&sum, x.diff);
			continue;
		}
		fits = end_sum(out, n, sum);
		out[(*n)++] = x;
		sum = ps_diff_sum_of(x.diff);
	}
	if (fits)
		fits = end_sum(out, n, sum);
	binaryheap_free(heap);
	pfree(runs);
	return fits;
}

/*
 * Consolidates the small writes one at a time, oldest first, refusing each
 * write whose diffs would push a sum past bigint (its ticket's verdict:
 * its writer gets 22003, and its key is not recorded).
 * Returns the consolidated updates.
 */
static PsUpdate *
consolidate_refusing(SinkInterval *iv, int total, int *n)
{
	/* runs[0, n) holds what is accepted so far, then the next write */
	PsUpdate   *runs = palloc_extended(sizeof(PsUpdate) * Max(total, 1), MCXT_ALLOC_HUGE);
	PsUpdate   *merged = palloc_extended(sizeof(PsUpdate) * Max(total, 1), MCXT_ALLOC_HUGE);
	List	   *chunks = NIL;
	ListCell   *lc;

	*n = 0;
	for (dsa_pointer p = iv->small_head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		chunks = lcons(c, chunks);	/* the list is newest first */
		p = c->next;
	}
	foreach(lc, chunks)
	{
		SinkChunk  *c = lfirst(lc);
		int			starts[3] = {0, *n, *n + (int) c->nupdates};
		int			m;

		parse_small(c, &runs[*n]);
		if (merge_runs(runs, starts, 2, merged, &m))
		{
			memcpy(runs, merged, sizeof(PsUpdate) * m);
			*n = m;
			continue;
		}
		/* the verdict is this worker's own until the ticket is done */
		ps_sink_tickets[c->ticket].verdict = VD_REFUSED;
	}
	return runs;
}

/* Forgets what was encoded ahead for interval slot index.  No lock needed. */
void
ps_sink_forget_ahead(int index)
{
	Ahead	   *a = ahead_of(index);

	a->seq = 0;
	a->seen_id = 0;
	a->runs = NIL;
	if (a->cxt)
		MemoryContextReset(a->cxt);
}

/* What was encoded ahead of the write of a chunk in interval slot index, or NULL. */
static AheadRun *
find_ahead(int index, dsa_pointer chunk)
{
	uint64		id = ((SinkChunk *) dsa_get_address(ps_sink_arena(), chunk))->ticket_id;
	ListCell   *lc;

	foreach(lc, ahead_of(index)->runs)
		if (((AheadRun *) lfirst(lc))->ticket_id == id)
			return lfirst(lc);
	return NULL;
}

/*
 * The oldest small write of interval slot index that joined since the last
 * look and is worth encoding ahead, or InvalidDsaPointer; it is marked as
 * being encoded (its writer then leaves it to this worker to free if it
 * withdraws), and from then on the writes that joined before it count as
 * looked at.  Tickets are numbered in join order, so a look reads only the
 * writes that joined since the last (the list is newest first).  Caller
 * holds the sink lock exclusively.
 */
static dsa_pointer
next_to_encode(int index)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	Ahead	   *a = ahead_of(index);
	dsa_pointer found = InvalidDsaPointer;
	uint64		newest = a->seen_id;

	if (a->seq != iv->seq)
	{
		ps_sink_forget_ahead(index);
		a->seq = iv->seq;
	}
	for (dsa_pointer p = iv->small_head; DsaPointerIsValid(p);)
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), p);

		if (c->ticket_id <= a->seen_id)
			break;
		newest = Max(newest, c->ticket_id);
		if (c->size >= PS_SINK_AHEAD_MIN_BYTES && c->nupdates > 0 &&
			ps_sink_tickets[c->ticket].state == TK_JOINED)
			found = p;
		p = c->next;
	}
	if (DsaPointerIsValid(found))
	{
		SinkChunk  *c = dsa_get_address(ps_sink_arena(), found);

		ps_sink_tickets[c->ticket].encoding = true;
		a->seen_id = c->ticket_id;
	}
	else
		a->seen_id = newest;
	return found;
}

/*
 * Ends the encoding ahead of a chunk: if its writer withdrew it meanwhile,
 * takes it off the interval and frees it and its ticket (and the interval,
 * if that was its last write).  Takes the sink lock.
 */
static void
encoded_ahead(int index, dsa_pointer chunk)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	SinkChunk  *c = dsa_get_address(ps_sink_arena(), chunk);
	SinkTicket *tk = &ps_sink_tickets[c->ticket];
	bool		withdrawn;
	bool		freed = false;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	tk->encoding = false;
	withdrawn = tk->state == TK_WITHDRAWN;
	if (withdrawn)
	{
		chunk = ps_sink_drop_write(iv, c->ticket, chunk, TK_WITHDRAWN);
		ps_sink_drop_if_abandoned(iv);
		freed = iv->state == IV_FREE;
	}
	LWLockRelease(ps_sink->lock);
	if (withdrawn && DsaPointerIsValid(chunk))
		ps_sink_free(chunk);
	if (freed)
		ps_sink_forget_ahead(index);
}

/*
 * Encodes the run of chunk, of interval slot index, and keeps it; a run
 * that would not fit one part (or does not encode) is left to the merge.
 */
static void
encode_run(int index, dsa_pointer chunk)
{
	Ahead	   *a = ahead_of(index);
	SinkChunk  *c = dsa_get_address(ps_sink_arena(), chunk);
	MemoryContext old;
	AheadRun   *run;
	PsUpdate   *u;
	const char *why = NULL;
	bool		kept;

	if (a->cxt == NULL)
		a->cxt = AllocSetContextCreate(TopMemoryContext,
									   "persist_sink encoded ahead",
									   ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(a->cxt);
	run = palloc0(sizeof(AheadRun));
	run->ticket_id = c->ticket_id;
	u = palloc_extended(sizeof(PsUpdate) * c->nupdates, MCXT_ALLOC_HUGE);
	parse_small(c, u);
	if (ps_part_raw_size(u, (int) c->nupdates) <= (uint64) ps_blob_target_size)
		run->data = ps_part_encode(u, (int) c->nupdates, ps_compression_level,
								   &run->info, &why);
	pfree(u);
	kept = run->data != NULL;
	if (kept)
		a->runs = lappend(a->runs, run);
	else
		pfree(run);
	MemoryContextSwitchTo(old);
	ereport(DEBUG2,
			(errmsg_internal("persist_sink: encoded ahead a write of %llu updates to shard \"%s\"%s",
							 (unsigned long long) c->nupdates,
							 ps_sink_intervals[index].shard,
							 kept ? "" : ": left to the merge")));
}

/*
 * Encodes one small write of the worker's open intervals that has joined
 * since the last call and holds at least PS_SINK_AHEAD_MIN_BYTES, so that
 * the seal of its interval finds its blocks ready.  Returns false if there
 * was none.  Takes the sink lock to look, not while it encodes.
 */
bool
ps_sink_encode_ahead(int worker)
{
	SinkWorkerSlot *slot = &ps_sink->workers[worker];
	dsa_pointer chunk = InvalidDsaPointer;
	int			index;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	for (index = slot->open_head; index >= 0; index = ps_sink_intervals[index].next)
	{
		chunk = next_to_encode(index);
		if (DsaPointerIsValid(chunk))
			break;
	}
	LWLockRelease(ps_sink->lock);
	if (!DsaPointerIsValid(chunk))
		return false;
	encode_run(index, chunk);
	encoded_ahead(index, chunk);
	return true;
}

/* Order of runs (indexes into starts) by their first update. */
static int
run_first_cmp(const void *a, const void *b, void *arg)
{
	const PsUpdate *u = ((const PsUpdate **) arg)[0];
	const int  *starts = ((const int **) arg)[1];

	return ps_update_cmp_kvt(&u[starts[*(const int *) a]],
							 &u[starts[*(const int *) b]]);
}

/*
 * The non-empty runs in key order, in a new array of *m; NULL if two of
 * them overlap.
 */
static int *
disjoint_order(const PsUpdate *u, const int *starts, int nruns, int *m)
{
	int		   *order = palloc(sizeof(int) * Max(nruns, 1));
	const void *arg[2] = {u, starts};

	*m = 0;
	for (int i = 0; i < nruns; i++)
		if (starts[i + 1] > starts[i])
			order[(*m)++] = i;
	qsort_arg(order, *m, sizeof(int), run_first_cmp, arg);
	for (int k = 1; k < *m; k++)
		if (ps_update_cmp_kvt(&u[starts[order[k - 1] + 1] - 1],
							  &u[starts[order[k]]]) >= 0)
		{
			pfree(order);
			return NULL;
		}
	return order;
}

/* A shared part being assembled from encoded blocks */
typedef struct Assembly
{
	PsBatchWriter writer;
	StringInfoData data;		/* the part's blocks so far */
	PsPartInfo	info;
	const PsUpdate *first;		/* its first and last updates */
	const PsUpdate *last;
	PsUpdate   *pending;		/* runs to encode before the next blocks */
	int			npending;
	uint64		pending_raw;
} Assembly;

/* Puts blocks this worker encoded (len bytes at data) after the part's. */
static void
assembly_append(Assembly *as, const char *data, uint64 len)
{
	const char *why = NULL;

	if (!ps_part_append_checked_blocks(&as->info, data, len, &why))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not assemble a part of shard \"%s\": %s",
						as->writer.shard, why)));
	appendBinaryStringInfo(&as->data, data, len);
}

/* Encodes the pending runs and puts their blocks after the part's. */
static void
assembly_encode_pending(Assembly *as)
{
	PsPartInfo	info;
	const char *why = NULL;
	char	   *data;

	if (as->npending == 0)
		return;
	data = ps_part_encode(as->pending, as->npending, ps_compression_level,
						  &info, &why);
	if (data == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("could not encode a part of shard \"%s\": %s",
						as->writer.shard, why)));
	assembly_append(as, data, info.encoded_size);
	pfree(data);
	as->npending = 0;
	as->pending_raw = 0;
}

/* Ends the part being assembled, if it holds anything, and starts another. */
static void
assembly_cut(Assembly *as)
{
	assembly_encode_pending(as);
	if (as->info.nupdates == 0)
		return;
	ps_batch_writer_add_part(&as->writer, as->data.data, &as->info, as->first,
							 as->last);
	initStringInfo(&as->data);
	memset(&as->info, 0, sizeof(PsPartInfo));
	as->first = NULL;
}

/*
 * Builds the shared part(s) from the runs in key order, when no two
 * overlap and some were encoded ahead: those are taken as encoded, the
 * others encoded now, each run of PS_PART_BOUNDED_MIN_RAW raw bytes or more
 * into blocks of its own (as if encoded ahead: a later merge can then hand
 * them on whole, as no block spans two writes' keys), smaller runs next to
 * each other together.  A part is cut before a run that would take it past
 * blob_target_size raw bytes.  Returns false, having built nothing, if runs
 * overlap or none was encoded ahead.
 */
static bool
assemble_shared(int index, const char *shard, const char *store,
				const PsUpdate *u, const int *starts, int nruns,
				const dsa_pointer *chunks, PsBatch *shared, PsWriteCounts *counts)
{
	int			m;
	int		   *order;
	AheadRun  **runs;
	uint64	   *raws;
	int			nahead = 0;
	Assembly	as;

	if (ahead_of(index)->runs == NIL ||
		(order = disjoint_order(u, starts, nruns, &m)) == NULL)
		return false;
	runs = palloc(sizeof(AheadRun *) * Max(m, 1));
	raws = palloc(sizeof(uint64) * Max(m, 1));
	for (int k = 0; k < m; k++)
	{
		int			r = order[k];

		runs[k] = find_ahead(index, chunks[r]);
		nahead += runs[k] ? 1 : 0;
		raws[k] = runs[k] ? runs[k]->info.raw_size :
			ps_part_raw_size(&u[starts[r]], starts[r + 1] - starts[r]);
		/* a run that would not fit one part is left to the merge */
		if (raws[k] > (uint64) ps_blob_target_size)
			return false;
	}
	/* every write encoded ahead was withdrawn */
	if (nahead == 0)
		return false;

	memset(&as, 0, sizeof(Assembly));
	ps_batch_writer_init(&as.writer, shard, store, false);
	initStringInfo(&as.data);
	as.pending = palloc_extended(sizeof(PsUpdate) * Max(starts[nruns], 1),
								 MCXT_ALLOC_HUGE);
	for (int k = 0; k < m; k++)
	{
		int			r = order[k];
		int			n = starts[r + 1] - starts[r];
		bool		own_blocks;

		if (as.info.raw_size + as.pending_raw + raws[k] > (uint64) ps_blob_target_size)
			assembly_cut(&as);
		if (as.first == NULL)
			as.first = &u[starts[r]];
		as.last = &u[starts[r + 1] - 1];
		if (runs[k])
		{
			assembly_encode_pending(&as);
			assembly_append(&as, runs[k]->data, runs[k]->info.encoded_size);
			continue;
		}
		/* a large run is encoded alone: nothing before it, nothing after */
		own_blocks = raws[k] >= PS_PART_BOUNDED_MIN_RAW;
		if (own_blocks)
			assembly_encode_pending(&as);
		memcpy(&as.pending[as.npending], &u[starts[r]], sizeof(PsUpdate) * n);
		as.npending += n;
		as.pending_raw += raws[k];
		if (own_blocks)
			assembly_encode_pending(&as);
	}
	assembly_cut(&as);
	ps_batch_writer_finish(&as.writer, shared);
	*counts = as.writer.counts;
	ereport(DEBUG1,
			(errmsg_internal("persist_sink: shared part of shard \"%s\" assembled from %d runs, %d of them encoded ahead",
							 shard, m, nahead)));
	return true;
}

/*
 * Encodes the small writes of interval slot index as the shared part(s):
 * from the runs encoded ahead when no two runs overlap (assemble_shared),
 * else by merging them.  Merged writes are consolidated together; if a sum
 * would pass bigint, the writes that make it overflow are refused one by
 * one (see consolidate_refusing), so no writer fails for another one's
 * updates.  Parts are put in store (NULL: the blob table).  Returns the
 * updates encoded.  The interval is sealed.
 */
uint64
ps_sink_build_shared(int index, const char *store, PsBatch *shared,
					 PsWriteCounts *counts)
{
	SinkInterval *iv = &ps_sink_intervals[index];
	int			total;
	int			n;
	int		   *starts;
	int			nruns;
	dsa_pointer *chunks;
	PsUpdate   *u = gather_small(iv->small_head, &total, &starts, &nruns, &chunks);
	PsUpdate   *merged;

	if (assemble_shared(index, iv->shard, store, u, starts, nruns, chunks, shared,
						counts))
		return total;
	merged = palloc_extended(sizeof(PsUpdate) * Max(total, 1), MCXT_ALLOC_HUGE);
	if (!merge_runs(u, starts, nruns, merged, &n))
		merged = consolidate_refusing(iv, total, &n);
	ps_batch_build(iv->shard, store, merged, n, shared, counts);
	return n;
}
