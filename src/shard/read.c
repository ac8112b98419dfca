/*-------------------------------------------------------------------------
 *
 * read.c
 *	  Loading parts and merging them in (key, val, time) order.
 *
 * A merge that writes what it merges (compaction) may take whole blocks
 * instead of updates (ps_merge_next_or_block): when the next block of a
 * part sorts wholly before every other part's next update, nothing in it
 * needs summing with anything else, and its encoded bytes are handed on as
 * they are; a one-time block only has its time rewritten (to its batch's,
 * or since).  So runs whose updates come in streaks that do not overlap
 * (each write's own keys, sequential keys) are merged without decoding
 * into updates and encoding again.  A bounded block (see part.h) is not
 * even decompressed: its bounds say where it sits, and the merge decodes
 * it only if it must take its updates one by one.  Other blocks are
 * decompressed once, when read, to find their first and last update.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/binaryheap.h"
#include "lib/stringinfo.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "codec/diff_sum.h"
#include "codec/part.h"
#include "shard/read.h"
#include "store/store.h"

/*
 * One part being merged, read a block at a time.  Until the merge reaches
 * the part's lower bound, the part is not loaded: its cursor stands in the
 * heap at the bound (a prefix of its first key, with the empty val and the
 * lowest time, which sorts no higher than any of its updates).  So only
 * parts whose key ranges overlap are read together, a block of each.
 */
typedef struct PartCursor
{
	const PsPart *part;
	bool		single_time;	/* every update is at time (its batch's or
								 * its part's) */
	int64		time;
	bool		loaded;
	PsPartReader reader;
	PsDecodedPart decoded;		/* the block being read (empty while
								 * reader.undecoded) */
	bool		block_returned; /* an update of it was returned */
	uint32		pos;
	PsUpdate	cur;			/* the update at pos (time rewritten), the
								 * first bound of a block left undecoded, or
								 * the lower bound while not loaded */
	uint64		prefix;			/* ps_key_prefix of cur.key */
} PartCursor;

/* A block no cursor reads any more, freed once no returned update points into it */
typedef struct RetiredBlock
{
	PsDecodedPart decoded;
	struct RetiredBlock *next;
} RetiredBlock;

struct PsMerge
{
	const char *shard;
	MemoryContext cxt;
	bool		read_only;
	bool		own_spi;		/* connects to SPI to read parts itself */
	bool		hand_on_blocks; /* cursors keep their blocks' encoded bytes */
	char	   *handed_on;		/* the block last handed on, in cxt */
	int64		min_time;
	int64		max_time;
	int			ncursors;
	PartCursor *cursors;
	binaryheap *heap;
	RetiredBlock *retired;
	/* consolidation: the first update of the next run and its block's raw */
	bool		pending_valid;
	PsUpdate	pending;
	const char *pending_raw;
	/* sums that leave bigint are split into several updates (merges) */
	bool		split_overflow;
	/* what is left to return of a split sum, of update carry_of */
	bool		carry_valid;
	PsDiffSum		carry;
	PsUpdate	carry_of;		/* its key and val are copies, in cxt */
	/* updates read from the parts so far */
	uint64		nread;
	/* the keys read (ps_merge_begin_keys), and what that saved */
	PsKeyRange	keys;
	PsMergeParts parts;
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
	char	   *problem;
	PsPartInfo	info;

	if (part->blob_key)
	{
		char	   *blob_why;

		blob = ps_blob_get(part->blob_key, part->encoded_size,
						   CurrentMemoryContext, read_only,
						   &blob_why);
		if (blob_why)
			return psprintf("part \"%s\" of shard \"%s\" is corrupted: %s",
							name, shard, blob_why);
		if (blob == NULL)
			return psprintf("part \"%s\" of shard \"%s\" is missing", name, shard);
		data = VARDATA_ANY(blob);
		len = VARSIZE_ANY_EXHDR(blob);
	}
	problem = ps_part_length_problem(shard, part, len);
	if (problem)
		return problem;
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
	if (part->distinct && ps_updates_repeat_keyval(out->updates, out->nupdates))
	{
		ps_decoded_part_free(out);
		return psprintf("part \"%s\" of shard \"%s\" does not match the shard state: "
						"it holds a (key, val) twice, and the state says it does not",
						name, shard);
	}
	return NULL;
}

/*
 * Asks the CPU to fetch the memory at addr into its caches ahead of use.  A
 * merge of many runs reads from as many places in turn, more than hardware
 * prefetchers follow.
 */
#if defined(__GNUC__) || defined(__clang__)
#define prefetch_read(addr) __builtin_prefetch(addr)
#else
#define prefetch_read(addr) ((void) 0)
#endif

/* Updates ahead of a cursor whose key and val are prefetched */
#define PREFETCH_AHEAD	2

/*
 * Blocks of fewer raw (column) bytes are merged, never handed on whole:
 * small blocks compress worse and cost a header and a call each, and a
 * block handed on is still small in the next merge.  Raw, not encoded:
 * blocks that compress well are handed on as readily as others.  The
 * codec gives one-time blocks of this size their bounds.
 */
#define WHOLE_BLOCK_MIN_RAW		PS_PART_BOUNDED_MIN_RAW

/*
 * Leaves a cursor's block: retired if an update of it was returned (it
 * must stay valid), else freed.
 */
static void
leave_block(PsMerge *m, PartCursor *c)
{
	if (c->block_returned)
	{
		RetiredBlock *r = MemoryContextAlloc(m->cxt, sizeof(RetiredBlock));

		r->decoded = c->decoded;
		r->next = m->retired;
		m->retired = r;
	}
	else
		ps_decoded_part_free(&c->decoded);
	c->block_returned = false;
	memset(&c->decoded, 0, sizeof(PsDecodedPart));
}

/*
 * Moves a loaded cursor to its part's next block.  The block it leaves is
 * retired if an update of it was returned, else freed.  False at the
 * part's end, once the part is checked against the state.
 */
static bool
cursor_next_block(PsMerge *m, PartCursor *c)
{
	MemoryContext old;
	PsDecodedPart next;
	bool		more;

	if (m->own_spi)
		SPI_connect();
	old = MemoryContextSwitchTo(m->cxt);
	more = ps_part_reader_next(&c->reader, &next);
	MemoryContextSwitchTo(old);
	if (m->own_spi)
		SPI_finish();
	leave_block(m, c);
	if (!more)
	{
		ps_part_reader_close(&c->reader);
		return false;
	}
	c->decoded = next;
	c->pos = (uint32) -1;		/* cursor_advance starts at 0 */
	return true;
}

/* Sets a cursor's current update to u, at the cursor's time if it has one. */
static inline void
cursor_set(PartCursor *c, const PsUpdate *u)
{
	c->cur = *u;
	if (c->single_time)
		c->cur.time = c->time;
}

/* True if key sorts before every key of range. */
static inline bool
before_keys(const PsKeyRange *range, const char *key, uint32 key_len)
{
	return ps_key_before_range(range, key, key_len);
}

/* True if key sorts after every key of range. */
static inline bool
past_keys(const PsKeyRange *range, const char *key, uint32 key_len)
{
	return ps_key_past_range(range, key, key_len);
}

/*
 * Ends a cursor that went past the merge's key range before its part's
 * end: its block is retired (or freed) and its part closed, unchecked as
 * a whole (only the blocks read were checked).  Returns false, as
 * cursor_advance at a part's end.
 */
static bool
cursor_cut(PsMerge *m, PartCursor *c)
{
	leave_block(m, c);
	ps_part_reader_close(&c->reader);
	m->parts.cut_short++;
	return false;
}

/*
 * Moves a loaded cursor to the next update in the time window; false at
 * the end.  At a block left undecoded it stands at the block's first
 * bound (such merges take every time).
 */
static bool
cursor_advance(PsMerge *m, PartCursor *c)
{
	do
	{
		if (c->reader.undecoded && c->pos == (uint32) -1)
		{
			Assert(m->hand_on_blocks);
			c->pos = 0;
			cursor_set(c, &c->reader.first);
			c->prefix = ps_key_prefix(c->cur.key, c->cur.key_len);
			return true;
		}
		for (c->pos++; c->pos < c->decoded.nupdates; c->pos++)
		{
			cursor_set(c, &c->decoded.updates[c->pos]);
			if (past_keys(&m->keys, c->cur.key, c->cur.key_len))
				return cursor_cut(m, c);
			if (c->cur.time >= m->min_time && c->cur.time <= m->max_time &&
				!before_keys(&m->keys, c->cur.key, c->cur.key_len))
			{
				c->prefix = ps_key_prefix(c->cur.key, c->cur.key_len);
				if (c->pos + PREFETCH_AHEAD < c->decoded.nupdates)
				{
					prefetch_read(c->decoded.updates[c->pos + PREFETCH_AHEAD].key);
					prefetch_read(c->decoded.updates[c->pos + PREFETCH_AHEAD].val);
				}
				return true;
			}
		}
	} while (cursor_next_block(m, c));
	return false;
}

/*
 * Decodes the block a cursor stands at the start of, left undecoded when
 * read, and stands at its first update (equal to its first bound, which
 * decoding checks).
 */
static void
cursor_decode(PsMerge *m, PartCursor *c)
{
	MemoryContext old = MemoryContextSwitchTo(m->cxt);

	Assert(c->pos == 0 && c->decoded.nupdates == 0);
	ps_part_reader_decode(&c->reader, &c->decoded);
	MemoryContextSwitchTo(old);
	cursor_set(c, &c->decoded.updates[0]);
}

/* Opens a cursor's part and moves to its first update in the window; false if none. */
static bool
cursor_load(PsMerge *m, PartCursor *c)
{
	MemoryContext old;

	if (m->own_spi)
		SPI_connect();
	old = MemoryContextSwitchTo(m->cxt);
	/* a lookup (keys bounded, no blocks handed on) seeks and caches blocks */
	if ((m->keys.has_lower || m->keys.has_upper) && !m->hand_on_blocks)
		ps_part_reader_open_keys(&c->reader, m->shard, c->part, m->read_only,
								 &m->keys);
	else
		ps_part_reader_open(&c->reader, m->shard, c->part, m->read_only);
	c->reader.keep_block = m->hand_on_blocks;
	c->reader.leave_bounded = m->hand_on_blocks;
	MemoryContextSwitchTo(old);
	if (m->own_spi)
		SPI_finish();
	c->loaded = true;
	c->pos = 0;					/* past the end of no block yet */
	return cursor_advance(m, c);
}

/* Heap order: the smallest (key, val, time) on top; key prefixes first. */
static int
cursor_cmp(Datum a, Datum b, void *arg)
{
	const PartCursor *ca = (const PartCursor *) DatumGetPointer(a);
	const PartCursor *cb = (const PartCursor *) DatumGetPointer(b);

	if (ca->prefix != cb->prefix)
		return ca->prefix < cb->prefix ? 1 : -1;
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
	return ps_merge_begin_keys(shard, state, min_time, max_time, read_only, NULL);
}

/*
 * True if no key of part can be in range: its lower bound (a prefix of its
 * first key, which no key of it sorts below) sorts past the range, or its
 * upper bound (the same prefix of its last key, which no key's prefix of
 * it sorts above) sorts below the range's lower bound cut to its length.
 */
static bool
part_outside_keys(const PsKeyRange *range, const PsPart *part)
{
	if (past_keys(range, part->lower, part->lower_len))
		return true;
	return part->has_upper && range->has_lower &&
		ps_bytes_cmp(part->upper, part->upper_len, range->lower,
					 Min(range->lower_len, part->upper_len)) < 0;
}

/*
 * The parts of batch b that may hold keys of range, as [*from, *to): in a
 * batch of ordered parts, from the last part whose lower bound is not
 * above the range's (those before end below it) to the first whose lower
 * bound is past the range, found by binary search; every part otherwise.
 * The parts in between may still lie outside the range.
 */
static void
batch_parts_for_keys(const PsBatch *b, const PsKeyRange *range, int *from,
					 int *to)
{
	int			lo = 0;
	int			hi = b->nparts;

	*from = 0;
	*to = b->nparts;
	if (!b->parts_ordered)
		return;
	if (range->has_lower)
	{
		/* the first part whose lower bound is above the range's */
		while (lo < hi)
		{
			int			mid = lo + (hi - lo) / 2;
			const PsPart *p = &b->parts[mid];

			if (ps_bytes_cmp(p->lower, p->lower_len, range->lower, range->lower_len) <= 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		*from = Max(lo - 1, 0);
	}
	lo = *from;
	hi = b->nparts;
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;
		const PsPart *p = &b->parts[mid];

		if (!past_keys(range, p->lower, p->lower_len))
			lo = mid + 1;
		else
			hi = mid;
	}
	*to = lo;
}

/* True if part j of batch b may hold updates in [min_time, max_time]. */
static bool
part_in_window(const PsBatch *b, int j, int64 min_time, int64 max_time)
{
	int64		time = b->single_time ? b->time : b->parts[j].time;

	/* every update of a part of one time is at it */
	return !((b->single_time || b->parts[j].has_time) &&
			 (time < min_time || time > max_time));
}

/*
 * How many of parts [lo, hi) of batch b may hold updates in [min_time,
 * max_time]: all or none in a single_time batch, and all in a batch whose
 * parts are noted to have no time of their own, without reading them
 * (assert-enabled builds read them to check the note).
 */
static int
parts_in_window(const PsBatch *b, int lo, int hi, int64 min_time,
				int64 max_time)
{
	int			n = 0;
	int			noted = -1;

	if (lo >= hi)
		return 0;
	if (b->single_time)
		noted = part_in_window(b, lo, min_time, max_time) ? hi - lo : 0;
	else if (b->parts_ordered && !b->parts_timed)
		noted = hi - lo;
#ifndef USE_ASSERT_CHECKING
	if (noted >= 0)
		return noted;
#endif
	for (int j = lo; j < hi; j++)
		n += part_in_window(b, j, min_time, max_time) ? 1 : 0;
	Assert(noted < 0 || noted == n);
	return n;
}

/*
 * ps_merge_begin, returning only the updates whose keys are in range (all
 * if range is NULL): parts that cannot hold such keys are never opened,
 * and a part is read only until its keys pass the range.  Parts of one
 * time (their own, or their batch's) outside [min_time, max_time] are
 * never opened either.
 */
PsMerge *
ps_merge_begin_keys(const char *shard, const PsState *state, int64 min_time,
					int64 max_time, bool read_only, const PsKeyRange *range)
{
	PsMerge    *m = palloc0(sizeof(PsMerge));
	int		   *from = palloc(sizeof(int) * Max(state->nbatches, 1));
	int		   *to = palloc(sizeof(int) * Max(state->nbatches, 1));
	int			most = 0;

	m->shard = pstrdup(shard);
	m->cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink merge",
								   ALLOCSET_DEFAULT_SIZES);
	m->read_only = read_only;
	m->min_time = min_time;
	m->max_time = max_time;
	if (range)
		m->keys = *range;
	/* each batch's parts that may hold keys of the range */
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		from[i] = to[i] = 0;
		if (b->lower > max_time || b->upper <= min_time)
			continue;
		batch_parts_for_keys(b, &m->keys, &from[i], &to[i]);
		most += to[i] - from[i];
		m->parts.skipped +=
			parts_in_window(b, 0, from[i], min_time, max_time) +
			parts_in_window(b, to[i], b->nparts, min_time, max_time);
	}
	/* cursors for those in the time window whose bounds do not rule it out */
	m->cursors = palloc0(sizeof(PartCursor) * Max(most, 1));
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		for (int j = from[i]; j < to[i]; j++)
		{
			PartCursor *c;

			if (!part_in_window(b, j, min_time, max_time))
				continue;
			if (part_outside_keys(&m->keys, &b->parts[j]))
			{
				m->parts.skipped++;
				continue;
			}
			c = &m->cursors[m->ncursors++];
			c->part = &b->parts[j];
			c->single_time = b->single_time || b->parts[j].has_time;
			c->time = b->single_time ? b->time : b->parts[j].time;
		}
	}
	pfree(from);
	pfree(to);
	m->heap = binaryheap_allocate(Max(m->ncursors, 1), cursor_cmp, NULL);
	for (int i = 0; i < m->ncursors; i++)
	{
		PartCursor *c = &m->cursors[i];

		c->cur.key = c->part->lower;
		c->cur.key_len = c->part->lower_len;
		c->prefix = ps_key_prefix(c->cur.key, c->cur.key_len);
		c->cur.val = "";
		c->cur.val_len = 0;
		c->cur.time = PG_INT64_MIN;
		binaryheap_add_unordered(m->heap, PointerGetDatum(c));
	}
	binaryheap_build(m->heap);
	return m;
}

/* Frees the retired blocks, all but the one whose raw bytes are keep. */
static void
release_retired(PsMerge *m, const char *keep)
{
	RetiredBlock *r = m->retired;

	m->retired = NULL;
	while (r)
	{
		RetiredBlock *next = r->next;

		if (keep != NULL && r->decoded.raw == keep)
		{
			r->next = NULL;
			m->retired = r;
		}
		else
		{
			ps_decoded_part_free(&r->decoded);
			pfree(r);
		}
		r = next;
	}
}

/*
 * The heap's top cursor, loaded: parts whose lower bound the merge reached
 * are opened on the way.  NULL once every part is exhausted.
 */
static PartCursor *
loaded_top(PsMerge *m)
{
	for (;;)
	{
		PartCursor *top;

		if (binaryheap_empty(m->heap))
			return NULL;
		top = (PartCursor *) DatumGetPointer(binaryheap_first(m->heap));
		if (top->loaded)
			return top;
		/* the merge reached this part's lower bound: load it */
		if (cursor_load(m, top))
			binaryheap_replace_first(m->heap, PointerGetDatum(top));
		else
			(void) binaryheap_remove_first(m->heap);
	}
}

/*
 * Moves to the next update in (key, val, time) order and sets *src to the
 * raw bytes of its block; false when every part is exhausted.  Blocks left
 * behind are retired, not freed, so every update returned so far stays
 * valid.
 */
static bool
merge_step(PsMerge *m, PsUpdate *out, const char **src)
{
	PartCursor *top = loaded_top(m);

	if (top == NULL)
		return false;
	if (top->reader.undecoded)
		cursor_decode(m, top);
	*out = top->cur;
	*src = top->decoded.raw;
	top->block_returned = true;
	m->nread++;
	if (cursor_advance(m, top))
		binaryheap_replace_first(m->heap, PointerGetDatum(top));
	else
		(void) binaryheap_remove_first(m->heap);
	return true;
}

/*
 * Returns the next update in (key, val, time) order.  Its bytes stay valid
 * until the next call.  False when every part is exhausted.
 */
bool
ps_merge_next(PsMerge *m, PsUpdate *out)
{
	const char *src;

	release_retired(m, NULL);
	return merge_step(m, out, &src);
}

/*
 * Makes the merge connect to SPI itself, for as long as it opens a part or
 * reads a block of one, and only then: for a caller that keeps the merge
 * across calls of its own (a foreign scan's rows, pulled one at a time by
 * the executor) and is not connected meanwhile.  Every read still uses the
 * active snapshot, which must be the one the state was read with.
 */
void
ps_merge_connect_spi(PsMerge *m)
{
	m->own_spi = true;
}

/* What the merge's key range saved so far (ps_merge_begin_keys). */
PsMergeParts
ps_merge_parts(const PsMerge *m)
{
	PsMergeParts parts = m->parts;

	parts.opened = 0;
	memset(&parts.blocks, 0, sizeof(PsLookupBlocks));
	for (int i = 0; i < m->ncursors; i++)
	{
		const PsLookupBlocks *b = &m->cursors[i].reader.blocks;

		if (!m->cursors[i].loaded)
			continue;
		parts.opened++;
		parts.blocks.decoded += b->decoded;
		parts.blocks.from_cache += b->from_cache;
		parts.blocks.passed += b->passed;
		parts.blocks.filtered += b->filtered;
	}
	return parts;
}

/* Adds what a merge's key range saved (ps_merge_parts) to sum. */
void
ps_merge_parts_add(PsMergeParts *sum, const PsMergeParts *parts)
{
	sum->skipped += parts->skipped;
	sum->opened += parts->opened;
	sum->cut_short += parts->cut_short;
	sum->blocks.decoded += parts->blocks.decoded;
	sum->blocks.from_cache += parts->blocks.from_cache;
	sum->blocks.passed += parts->blocks.passed;
	sum->blocks.filtered += parts->blocks.filtered;
}

/* The updates the merge has read from its parts so far. */
uint64
ps_merge_updates_read(const PsMerge *m)
{
	return m->nread;
}

/*
 * Makes a merge split sums that leave bigint instead of raising 22003: such
 * a run of equal (key, val, time) is returned as several updates of that
 * (key, val, time), each diff in range (+-9223372036854775807 and a
 * remainder), which sum to the exact total.  For merges, whose result is
 * read again by this code (in 128 bits).
 */
void
ps_merge_split_overflow(PsMerge *m)
{
	m->split_overflow = true;
}

/*
 * Starts returning a split sum of the run of u (see
 * ps_merge_split_overflow): copies u's key and val, which must outlive the
 * run's parts, and keeps the sum to return.
 */
static void
start_carry(PsMerge *m, const PsUpdate *u, PsDiffSum sum)
{
	char	   *bytes = MemoryContextAlloc(m->cxt, (Size) u->key_len + u->val_len + 1);

	if (m->carry_of.key)
		pfree(unconstify(char *, m->carry_of.key));
	memcpy(bytes, u->key, u->key_len);
	memcpy(bytes + u->key_len, u->val, u->val_len);
	m->carry_of = *u;
	m->carry_of.key = bytes;
	m->carry_of.val = bytes + u->key_len;
	m->carry = sum;
	m->carry_valid = true;
}

/*
 * Returns the next piece of a split sum into out: +-PG_INT64_MAX while the
 * rest is out of range, then the rest.  False once nothing (but zero) is
 * left.
 */
static bool
next_carry(PsMerge *m, PsUpdate *out)
{
	int64		piece;

	if (!m->carry_valid)
		return false;
	if (ps_diff_sum_fits(m->carry))
	{
		piece = ps_diff_sum_value(m->carry);
		m->carry_valid = false;
	}
	else
	{
		piece = int128_compare(m->carry, int64_to_int128(0)) > 0 ?
			PG_INT64_MAX : -PG_INT64_MAX;
		ps_diff_sum_add(&m->carry, -piece);
	}
	if (piece == 0)
		return false;
	*out = m->carry_of;
	out->diff = piece;
	return true;
}

/*
 * Makes the merge keep each block's encoded bytes, so that
 * ps_merge_next_or_block can hand blocks on whole.  Only for a merge of
 * every time (ps_merge_begin's window PG_INT64_MIN to PG_INT64_MAX), before
 * its first update is read.
 */
void
ps_merge_hand_on_blocks(PsMerge *m)
{
	Assert(m->min_time == PG_INT64_MIN && m->max_time == PG_INT64_MAX);
	Assert(m->nread == 0);
	m->hand_on_blocks = true;
}

/* The cursor next after the heap's top (the smaller of its children), or NULL. */
static PartCursor *
second_cursor(PsMerge *m)
{
	binaryheap *h = m->heap;

	if (h->bh_size < 2)
		return NULL;
	if (h->bh_size == 2 || cursor_cmp(h->bh_nodes[1], h->bh_nodes[2], NULL) >= 0)
		return (PartCursor *) DatumGetPointer(h->bh_nodes[1]);
	return (PartCursor *) DatumGetPointer(h->bh_nodes[2]);
}

/*
 * Whether the block cursor c stands in could be handed on as it is, given
 * its updates' times in the merge: a one-time block can, its time moved
 * to its batch's (or part's) and then to time_floor (*retime, to *time,
 * if that is not its own); a block of several times can if the cursor
 * keeps them and none is below time_floor.
 */
static bool
block_times_fit(const PartCursor *c, int64 time_floor, bool *retime,
				int64 *time)
{
	int64		own;

	if (ps_part_block_one_time(c->reader.block, c->reader.block_len, &own))
	{
		*time = Max(c->single_time ? c->time : own, time_floor);
		*retime = *time != own;
		return true;
	}
	if (c->single_time)
		return false;
	for (uint32 i = 0; i < c->decoded.nupdates; i++)
		if (c->decoded.updates[i].time < time_floor)
			return false;
	*retime = false;
	*time = 0;
	return true;
}

/*
 * The heap's top cursor if the block it stands at the start of can be
 * handed on whole: of WHOLE_BLOCK_MIN_RAW raw bytes or more, its times
 * fitting (block_times_fit), sorting after `after` (the run being summed,
 * if any) and its last update before every other part's next one (at its
 * time in the merge: time_floor at least).  Else NULL.
 */
static PartCursor *
whole_block_at_top(PsMerge *m, int64 time_floor, const PsUpdate *after,
				   bool *retime, int64 *time)
{
	PartCursor *top = loaded_top(m);
	PartCursor *next;
	PsUpdate	first;
	PsUpdate	last;

	if (top == NULL || top->pos != 0 || top->reader.block == NULL ||
		top->reader.block_raw < WHOLE_BLOCK_MIN_RAW ||
		top->reader.block_nupdates == 0 ||
		!block_times_fit(top, time_floor, retime, time))
		return NULL;
	first = top->reader.first;
	last = top->reader.last;
	if (*retime)
		first.time = last.time = *time;
	if (after && ps_update_cmp_kvt(after, &first) >= 0)
		return NULL;
	next = second_cursor(m);
	if (next)
	{
		PsUpdate	head = next->cur;

		head.time = Max(head.time, time_floor);
		if (ps_update_cmp_kvt(&last, &head) >= 0)
			return NULL;
	}
	return top;
}

/*
 * Hands on the block cursor c stands at the start of (see
 * whole_block_at_top) into *block, moved to `time` if retime, and moves
 * the cursor past it.
 */
static void
hand_on_block(PsMerge *m, PartCursor *c, bool retime, int64 time,
			  PsMergeBlock *block)
{
	const PsUpdate *first = &c->reader.first;
	const PsUpdate *last = &c->reader.last;
	uint64		len = c->reader.block_len;
	uint64		first_at = len;
	uint64		last_at = first_at + first->key_len + first->val_len;
	char	   *buf;
	const char *why = NULL;
	PsPartInfo	info;

	if (m->handed_on)
		pfree(m->handed_on);
	buf = MemoryContextAlloc(m->cxt, last_at + last->key_len + last->val_len + 1);
	m->handed_on = buf;
	memcpy(buf, c->reader.block, len);
	memcpy(buf + first_at, first->key, first->key_len);
	memcpy(buf + first_at + first->key_len, first->val, first->val_len);
	memcpy(buf + last_at, last->key, last->key_len);
	memcpy(buf + last_at + last->key_len, last->val, last->val_len);
	if (retime && !ps_part_block_retime(buf, len, time, &info, &why))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("part \"%s\" of shard \"%s\" is corrupted: %s",
						c->part->blob_key ? c->part->blob_key : "(inline)",
						m->shard, why)));
	block->data = buf;
	block->len = len;
	block->nupdates = c->reader.block_nupdates;
	block->undecoded = c->reader.undecoded;
	block->first = *first;
	block->first.key = buf + first_at;
	block->first.val = buf + first_at + first->key_len;
	block->last = *last;
	block->last.key = buf + last_at;
	block->last.val = buf + last_at + last->key_len;
	if (retime)
		block->first.time = block->last.time = time;
	m->nread += c->reader.block_nupdates;
	/* past the block's last update (a block left undecoded has none loaded) */
	c->pos = c->reader.undecoded ? 0 : c->decoded.nupdates - 1;
	if (cursor_advance(m, c))
		binaryheap_replace_first(m->heap, PointerGetDatum(c));
	else
		(void) binaryheap_remove_first(m->heap);
}

/*
 * ps_merge_next_consolidated, and, if block is not NULL, a whole block
 * into it instead of an update whenever one can be handed on (block->data
 * is then set).
 */
static bool
next_consolidated(PsMerge *m, bool by_time, int64 time_floor, PsUpdate *out,
				  PsMergeBlock *block)
{
	PsUpdate	u;
	const char *src;
	PartCursor *whole;
	bool		retime;
	int64		time;

	Assert(block == NULL || (by_time && m->hand_on_blocks));
	if (block)
		block->data = NULL;
	if (next_carry(m, out))
		return true;
	/* the last result is consumed; only the pending update's block is needed */
	release_retired(m, m->pending_valid ? m->pending_raw : NULL);
	for (;;)
	{
		PsDiffSum		sum;

		if (!m->pending_valid)
		{
			if (block &&
				(whole = whole_block_at_top(m, time_floor, NULL, &retime, &time)))
			{
				hand_on_block(m, whole, retime, time, block);
				return true;
			}
			if (!merge_step(m, &m->pending, &m->pending_raw))
				return false;
			m->pending.time = Max(m->pending.time, time_floor);
		}
		/* the pending update starts this run */
		*out = m->pending;
		m->pending_valid = false;
		sum = ps_diff_sum_of(out->diff);
		/* the run ends where a block to hand on starts */
		while (!(block && whole_block_at_top(m, time_floor, out, &retime, &time)) &&
			   merge_step(m, &u, &src))
		{
			CHECK_FOR_INTERRUPTS();
			u.time = Max(u.time, time_floor);
			if (by_time ? ps_update_cmp_kvt(out, &u) == 0 :
				ps_update_cmp_kv(out, &u) == 0)
			{
				ps_diff_sum_add(&sum, u.diff);
				continue;
			}
			m->pending = u;
			m->pending_raw = src;
			m->pending_valid = true;
			break;
		}
		if (!ps_diff_sum_fits(sum))
		{
			if (!m->split_overflow)
				ps_raise_read_diff_overflow(m->shard, out->key, out->key_len,
											out->val, out->val_len,
											by_time ? out->time : m->max_time, by_time);
			start_carry(m, out, sum);
			if (next_carry(m, out))
				return true;
			continue;
		}
		out->diff = ps_diff_sum_value(sum);
		if (out->diff != 0)
			return true;
	}
}

/*
 * Returns the next consolidated update: times below time_floor advanced to
 * it, runs equal in (key, val, time) (by_time) or in (key, val) summed (in
 * 128 bits: only the total must fit), zero sums skipped.  A total that
 * leaves bigint raises 22003 naming the key and val, or is split (see
 * ps_merge_split_overflow).  The result's time is that of the run's first
 * update.  Its bytes stay valid until the next call.
 */
bool
ps_merge_next_consolidated(PsMerge *m, bool by_time, int64 time_floor,
						   PsUpdate *out)
{
	return next_consolidated(m, by_time, time_floor, out, NULL);
}

/*
 * As ps_merge_next_consolidated by (key, val, time), for a merge that hands
 * on blocks (ps_merge_hand_on_blocks): returns either the next update, or,
 * with block->data set, the next whole block of a part, whose updates sort
 * after every update returned before and before every one after, with no
 * (key, val, time) of another part among them.  Its time is the merge's
 * (its batch's, time_floor at least).  The block's bytes stay valid until
 * the next call.
 */
bool
ps_merge_next_or_block(PsMerge *m, int64 time_floor, PsUpdate *out,
					   PsMergeBlock *block)
{
	return next_consolidated(m, true, time_floor, out, block);
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


/* Raises PS002 or PS003 unless time t is readable in state. */
static void
check_readable(const char *shard, const PsState *state, int64 t, const char *argname)
{
	if (t >= state->upper)
		ereport(ERROR,
				(errcode(ERRCODE_PS_NOT_YET_READABLE),
				 errmsg("%s " INT64_FORMAT " is not yet readable in shard \"%s\"",
						argname, t, shard),
				 errdetail("current upper is " INT64_FORMAT, state->upper)));
	if (t < state->since)
		ereport(ERROR,
				(errcode(ERRCODE_PS_COMPACTED_AWAY),
				 errmsg("%s " INT64_FORMAT " is no longer readable in shard \"%s\"",
						argname, t, shard),
				 errdetail("current since is " INT64_FORMAT, state->since)));
}

/*
 * The as_of of a snapshot: upper - 1 unless given.  Raises PS002 if it is
 * not below upper, PS003 if it is below since.  A new shard's default
 * snapshot is -1: it has no batch, so it reads no rows (the contract's
 * "snapshot() of a new, empty shard returns no rows").
 */
int64
ps_snapshot_as_of(const char *shard, const PsState *state, bool as_of_null,
				  int64 as_of)
{
	if (as_of_null && state->upper == 0)
		return -1;
	if (as_of_null)
		as_of = state->upper - 1;
	check_readable(shard, state, as_of, "as_of");
	return as_of;
}

/*
 * The window [*min_time, *max_time] of a listen: as_of < time < until
 * (until defaults to upper), and the time below which updates are shown at
 * *time_floor.  as_of may be since - 1, "nothing seen yet": the window then
 * holds everything the shard has, history before since shown at since (as
 * a merge would have left it).  Raises PS003 if as_of is below since - 1
 * and PS002 if until passes upper; returns false if the window is empty.
 */
bool
ps_listen_window(const char *shard, const PsState *state, int64 as_of,
				 bool until_null, int64 until, int64 *min_time, int64 *max_time,
				 int64 *time_floor)
{
	bool		from_since = as_of == state->since - 1;

	if (until_null)
		until = state->upper;
	if (as_of < state->since && !from_since)
		check_readable(shard, state, as_of, "as_of");
	if (until > state->upper)
		ereport(ERROR,
				(errcode(ERRCODE_PS_NOT_YET_READABLE),
				 errmsg("until " INT64_FORMAT " is not yet readable in shard \"%s\"",
						until, shard),
				 errdetail("current upper is " INT64_FORMAT, state->upper)));
	if (as_of == PG_INT64_MAX || until <= as_of + 1)
		return false;
	*min_time = from_since ? PG_INT64_MIN : as_of + 1;
	*max_time = until - 1;
	*time_floor = from_since ? state->since : PG_INT64_MIN;
	return true;
}
