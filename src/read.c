/*-------------------------------------------------------------------------
 *
 * read.c
 *	  Loading parts and merging them in (key, val, time) order.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/binaryheap.h"
#include "utils/memutils.h"

#include "part.h"
#include "read.h"
#include "storage.h"

/* One part being merged */
typedef struct PartCursor
{
	const PsPart *part;
	bool		single_time;	/* every update is at time */
	int64		time;
	bool		loaded;
	PsDecodedPart decoded;
	uint32		pos;
	PsUpdate	cur;			/* the update at pos, time rewritten */
} PartCursor;

struct PsMerge
{
	const char *shard;
	MemoryContext cxt;
	bool		read_only;
	int64		min_time;
	int64		max_time;
	int			ncursors;
	PartCursor *cursors;
	binaryheap *heap;
	PartCursor *exhausted;		/* to free once its last update is consumed */
};

/*
 * Fetches and decodes a part (from the blob table or inline bytes) into
 * out, allocated in the current memory context.  Returns NULL on success,
 * or a message naming the shard and part if the part is missing, does not
 * decode, or does not match what the state says of it.
 */
char *
ps_part_problem(const char *shard, const PsPart *part, bool read_only,
				PsDecodedPart *out)
{
	const char *name = part->blob_key ? part->blob_key : "(inline)";
	const char *why = NULL;
	const char *data = part->inline_data;
	uint64		len = part->encoded_size;
	bytea	   *blob = NULL;
	PsPartInfo	info;

	if (part->blob_key)
	{
		blob = ps_blob_get(part->blob_key, CurrentMemoryContext, read_only);
		if (blob == NULL)
			return psprintf("part \"%s\" of shard \"%s\" is missing", name, shard);
		data = VARDATA_ANY(blob);
		len = VARSIZE_ANY_EXHDR(blob);
	}
	if (!ps_part_decode(data, len, out, &info, &why))
		return psprintf("part \"%s\" of shard \"%s\" is corrupted: %s",
						name, shard, why);
	if (blob)
		pfree(blob);
	if (info.checksum != part->checksum || info.nupdates != part->nupdates ||
		info.encoded_size != part->encoded_size || info.diff_sum != part->diff_sum)
	{
		ps_decoded_part_free(out);
		return psprintf("part \"%s\" of shard \"%s\" does not match the shard state: "
						"expected checksum %08x and %llu updates, found checksum %08x and %llu updates",
						name, shard, part->checksum, (unsigned long long) part->nupdates,
						info.checksum, (unsigned long long) info.nupdates);
	}
	return NULL;
}

/* Like ps_part_problem, but raises ERRCODE_DATA_CORRUPTED on a problem. */
void
ps_part_load(const char *shard, const PsPart *part, bool read_only,
			 PsDecodedPart *out)
{
	char	   *problem = ps_part_problem(shard, part, read_only, out);

	if (problem)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("%s", problem)));
}

/* Moves a cursor to the next update in the time window; false at the end. */
static bool
cursor_advance(PsMerge *m, PartCursor *c)
{
	if (!c->loaded)
	{
		MemoryContext old = MemoryContextSwitchTo(m->cxt);

		ps_part_load(m->shard, c->part, m->read_only, &c->decoded);
		MemoryContextSwitchTo(old);
		c->loaded = true;
		c->pos = 0;
	}
	else
		c->pos++;
	for (; c->pos < c->decoded.nupdates; c->pos++)
	{
		c->cur = c->decoded.updates[c->pos];
		if (c->single_time)
			c->cur.time = c->time;
		if (c->cur.time >= m->min_time && c->cur.time <= m->max_time)
			return true;
	}
	return false;
}

/* Heap order: the smallest (key, val, time) on top. */
static int
cursor_cmp(Datum a, Datum b, void *arg)
{
	const PartCursor *ca = (const PartCursor *) DatumGetPointer(a);
	const PartCursor *cb = (const PartCursor *) DatumGetPointer(b);

	return -ps_update_cmp_kvt(&ca->cur, &cb->cur);
}

/*
 * Starts merging the parts of every batch of state that may hold times in
 * [min_time, max_time]; only updates in that window are returned.
 */
PsMerge *
ps_merge_begin(const char *shard, const PsState *state, int64 min_time,
			   int64 max_time, bool read_only)
{
	PsMerge    *m = palloc0(sizeof(PsMerge));
	int			total = 0;

	m->shard = pstrdup(shard);
	m->cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink merge",
								   ALLOCSET_DEFAULT_SIZES);
	m->read_only = read_only;
	m->min_time = min_time;
	m->max_time = max_time;
	for (int i = 0; i < state->nbatches; i++)
		total += state->batches[i].nparts;
	m->cursors = palloc0(sizeof(PartCursor) * Max(total, 1));
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		if (b->lower > max_time || b->upper <= min_time)
			continue;
		for (int j = 0; j < b->nparts; j++)
		{
			PartCursor *c = &m->cursors[m->ncursors++];

			c->part = &b->parts[j];
			c->single_time = b->single_time;
			c->time = b->upper - 1;
		}
	}
	m->heap = binaryheap_allocate(Max(m->ncursors, 1), cursor_cmp, NULL);
	for (int i = 0; i < m->ncursors; i++)
	{
		if (cursor_advance(m, &m->cursors[i]))
			binaryheap_add_unordered(m->heap, PointerGetDatum(&m->cursors[i]));
		else
			ps_decoded_part_free(&m->cursors[i].decoded);
	}
	binaryheap_build(m->heap);
	return m;
}

/*
 * Returns the next update in (key, val, time) order.  Its bytes stay valid
 * until the next call.  False when every part is exhausted.
 */
bool
ps_merge_next(PsMerge *m, PsUpdate *out)
{
	PartCursor *top;

	if (m->exhausted)
	{
		ps_decoded_part_free(&m->exhausted->decoded);
		m->exhausted = NULL;
	}
	if (binaryheap_empty(m->heap))
		return false;
	top = (PartCursor *) DatumGetPointer(binaryheap_first(m->heap));
	*out = top->cur;
	if (cursor_advance(m, top))
		binaryheap_replace_first(m->heap, PointerGetDatum(top));
	else
	{
		(void) binaryheap_remove_first(m->heap);
		m->exhausted = top;
	}
	return true;
}

/* Releases a merge and everything it decoded. */
void
ps_merge_end(PsMerge *m)
{
	MemoryContextDelete(m->cxt);
	binaryheap_free(m->heap);
	pfree(m->cursors);
	pfree(m);
}

