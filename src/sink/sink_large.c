/*-------------------------------------------------------------------------
 *
 * sink_large.c
 *	  A large write's path through the sink: it joins, then encodes its
 *	  parts one at a time and hands each over once its interval's worker
 *	  takes them (or puts them in the shard's object store and hands over
 *	  their keys), and waits for the commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/proc.h"

#include "base/settings.h"
#include "codec/part.h"
#include "sink/sink.h"
#include "sink/sink_internal.h"
#include "store/store.h"

/*
 * Parts of a large write its writer puts in an object store at once, and
 * most bytes of them (a batch is put while the next one is encoded)
 */
#define PARTS_PUT_AT_ONCE	8
#define PARTS_PUT_AT_ONCE_BYTES	(8 * 1024 * 1024)

/* A part of a large write, encoded: its bytes, what it holds, its bounds */
typedef struct EncodedPart
{
	char	   *data;			/* palloc'd */
	PsPartInfo	info;
	PsPart		bounds;			/* lower and upper bounds only */
	char	   *key;			/* where its writer put it (object store) */
} EncodedPart;

/*
 * Encodes n sorted updates as a part of shard; raises 54000 if it cannot.  No
 * lock.
 */
static void
encode_part(const char *shard, const PsUpdate *u, int n, EncodedPart *part)
{
	const char *why = NULL;

	part->data = ps_part_encode(u, n, ps_compression_level, &part->info, &why);
	if (part->data == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("could not encode a part of shard \"%s\": %s", shard, why)));
	memset(&part->bounds, 0, sizeof(PsPart));
	ps_part_set_lower(&part->bounds, u[0].key, u[0].key_len);
	ps_part_set_upper(&part->bounds, u[n - 1].key, u[n - 1].key_len);
	part->key = NULL;
}

/*
 * A part chunk of the call's write for an encoded part (waiting for room):
 * its bytes, or with part->key set (put by the writer), only its key.
 * Takes the sink lock (the arena's budget).
 */
static dsa_pointer
part_chunk(const EncodedPart *part, const SinkCall *call)
{
	uint64		size = part->key ? strlen(part->key) + 1 : part->info.encoded_size;
	dsa_pointer chunk;
	SinkChunk  *c;

	if (MAXALIGN(sizeof(SinkChunk)) + size > ps_sink->budget)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a part of %llu bytes does not fit in persist_sink.shared_memory",
						(unsigned long long) size),
				 errhint("Increase persist_sink.shared_memory or lower persist_sink.blob_target_size.")));
	chunk = ps_sink_alloc(CHUNK_PART, size, true);
	c = dsa_get_address(ps_sink_arena(), chunk);
	c->ticket = call->ticket;
	c->ticket_id = call->ticket_id;
	c->info = part->info;
	c->bounds = part->bounds;
	c->put = part->key != NULL;
	memcpy(SINK_CHUNK_PAYLOAD(c), part->key ? part->key : part->data, size);
	return chunk;
}

/*
 * Attaches a part chunk to an interval and wakes its worker; takes the sink
 * lock.  Returns false, freeing the chunk, if the interval already failed.
 */
static bool
hand_over(SinkInterval *iv, dsa_pointer chunk)
{
	bool		open;
	PGPROC	   *worker = NULL;

	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	open = iv->state == IV_PROCESSING;
	if (open)
	{
		if (DsaPointerIsValid(iv->parts_tail))
			((SinkChunk *) dsa_get_address(ps_sink_arena(), iv->parts_tail))->next = chunk;
		else
			iv->parts_head = chunk;
		iv->parts_tail = chunk;
		worker = ps_sink_worker_of(iv);
	}
	LWLockRelease(ps_sink->lock);
	ps_sink_wake(worker);
	if (!open)
		ps_sink_free(chunk);
	return open;
}

/*
 * Largest raw size of a large write's part: the target, capped by the arena.
 * No lock.
 */
static uint64
part_cut_size(void)
{
	return Min((uint64) ps_blob_target_size, ps_sink->budget / 4);
}

/*
 * Encodes a large write's parts one at a time and hands each one's bytes
 * over; the worker takes them (the caller waited for that, and it lasts
 * until the interval is done), so the arena holds few at a time.
 * Takes the sink lock per part.
 */
static void
hand_over_bytes(SinkInterval *iv, const char *shard, PsUpdateStream *s,
				const SinkCall *call)
{
	PsUpdateArrays slice;
	EncodedPart part;

	while (s->next(s, part_cut_size(), &slice))
	{
		/* a cancel withdraws the write, the parts handed over with it */
		CHECK_FOR_INTERRUPTS();
		encode_part(shard, slice.updates, slice.n, &part);
		if (!hand_over(iv, part_chunk(&part, call)))
			return;				/* the interval failed: its result says why */
		pfree(part.data);
	}
}

/* Encoded parts of a large write, put in its shard's object store at once */
typedef struct PartBatch
{
	EncodedPart parts[PARTS_PUT_AT_ONCE];
	int			n;
	uint64		bytes;			/* their encoded bytes */
} PartBatch;

/* Where a large write's writer is in its stream of parts */
typedef struct PartEncoder
{
	const char *shard;
	const char *store;			/* the shard's object store */
	PsUpdateStream *s;
	bool		more;			/* the stream may have more */
	PartBatch  *filling;		/* the batch the next part goes to */
} PartEncoder;

/*
 * Encodes the stream's next part, under a new key of the store, into the
 * batch being filled; false if that batch is full or the stream is done.
 * A PsPutWork: the batch before is put meanwhile.  No lock.
 */
static bool
encode_next_part(void *arg)
{
	PartEncoder *e = (PartEncoder *) arg;
	PsUpdateArrays slice;
	EncodedPart *part;

	if (!e->more || e->filling->n >= PARTS_PUT_AT_ONCE ||
		e->filling->bytes >= PARTS_PUT_AT_ONCE_BYTES)
		return false;
	/* a cancel withdraws the write, the parts handed over with it */
	CHECK_FOR_INTERRUPTS();
	e->more = e->s->next(e->s, part_cut_size(), &slice);
	if (!e->more)
		return false;
	part = &e->filling->parts[e->filling->n++];
	encode_part(e->shard, slice.updates, slice.n, part);
	part->key = ps_blob_new_key(e->shard, e->store);
	e->filling->bytes += part->info.encoded_size;
	return true;
}

/*
 * Puts a batch of parts in the object store, encoding the next batch's
 * parts meanwhile, then hands over their keys; false if the interval has
 * failed meanwhile.  Takes the sink lock per part.
 */
static bool
put_batch(SinkInterval *iv, PartBatch *batch, PartEncoder *e,
		  const SinkCall *call)
{
	const char *keys[PARTS_PUT_AT_ONCE];
	const char *datas[PARTS_PUT_AT_ONCE];
	uint64		lens[PARTS_PUT_AT_ONCE];

	for (int i = 0; i < batch->n; i++)
	{
		keys[i] = batch->parts[i].key;
		datas[i] = batch->parts[i].data;
		lens[i] = batch->parts[i].info.encoded_size;
	}
	ps_blob_put_all_working(keys, datas, lens, batch->n, encode_next_part, e);
	for (int i = 0; i < batch->n; i++)
	{
		if (!hand_over(iv, part_chunk(&batch->parts[i], call)))
			return false;
		pfree(batch->parts[i].data);
		pfree(batch->parts[i].key);
	}
	batch->n = 0;
	batch->bytes = 0;
	return true;
}

/*
 * Encodes a large write's parts and puts them in the shard's object store
 * (store), PARTS_PUT_AT_ONCE (or PARTS_PUT_AT_ONCE_BYTES) at a time, each
 * batch's put overlapping the encoding of the next, and hands over each
 * one's key.  The worker's interval transaction runs from before the first
 * put until after the last hand-over (the collector of leaked objects
 * relies on it); objects of a write withdrawn or failed are deleted by the
 * worker or that collector.  Takes the sink lock per part.
 */
static void
put_and_hand_over(SinkInterval *iv, const char *shard, const char *store,
				  PsUpdateStream *s, const SinkCall *call)
{
	PartBatch	batches[2] = {0};
	PartEncoder e = {shard, store, s, true, NULL};

	for (int cur = 0;; cur = 1 - cur)
	{
		/* finish the batch the last put began to fill */
		e.filling = &batches[cur];
		while (encode_next_part(&e))
			;
		if (batches[cur].n == 0)
			return;
		e.filling = &batches[1 - cur];
		if (!put_batch(iv, &batches[cur], &e, call))
			return;				/* the interval failed: its result says why */
	}
}
/*
 * Once a worker takes the interval's parts, encodes the large write's
 * parts and puts them in the shard's object store or hands their bytes
 * over, then tells the worker it is done handing over.  Takes the sink
 * lock; holds none while it waits or encodes.
 */
static void
hand_over_all(SinkCall *call, SinkInterval *iv, PsUpdateStream *s)
{
	char		store[PS_SINK_STORE_URL_MAX];
	PGPROC	   *worker;

	ps_sink_wait_for_state(iv, IV_PROCESSING);
	LWLockAcquire(ps_sink->lock, LW_SHARED);
	strlcpy(store, iv->parts_store, sizeof(store));
	LWLockRelease(ps_sink->lock);
	s->rewind(s);
	if (store[0] != '\0')
		put_and_hand_over(iv, call->shard, store, s, call);
	else
		hand_over_bytes(iv, call->shard, s, call);
	LWLockAcquire(ps_sink->lock, LW_EXCLUSIVE);
	iv->active_large--;
	call->handing = false;
	worker = ps_sink_worker_of(iv);
	LWLockRelease(ps_sink->lock);
	ps_sink_wake(worker);
}

/*
 * A large write: join, encode parts one at a time and hand each over once a
 * worker is processing the interval, then wait for the commit; returns its
 * time.  Takes the sink lock; holds none while it waits or encodes.
 */
int64
ps_sink_append_large(SinkCall *call, PsUpdateStream *s)
{
	SinkInterval *iv;
	PGPROC	   *worker;

	iv = ps_sink_join(call);
	iv->active_large++;
	call->handing = true;
	worker = ps_sink_worker_of(iv);
	LWLockRelease(ps_sink->lock);
	ps_sink_wake(worker);

	hand_over_all(call, iv, s);
	ps_sink_wait_for_state(iv, IV_DONE);
	return ps_sink_take_result(call);
}
