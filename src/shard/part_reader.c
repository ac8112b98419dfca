/*-------------------------------------------------------------------------
 *
 * part_reader.c
 *	  Reading a part a block at a time.
 *
 * A merge of many runs holds one block of each run in memory, not one
 * part: a blob part is fetched a block at a time (only the blob rows that
 * block is in), each block checked and decoded on its own; a merge that
 * may hand blocks on whole leaves bounded blocks undecoded until it needs
 * their updates.  What the blocks add up to (updates, bytes, diff sum,
 * chained checksum) is checked against the state once the last block is
 * read, and each block's first update (or first bound) against the
 * previous block's last.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "shard/block_cache.h"
#include "shard/read.h"
#include "store/store.h"

/* Blocks one lookup's reader may put in the block cache */
#define LOOKUP_CACHED_BLOCKS	4

/* Raises ERRCODE_DATA_CORRUPTED: the reader's part is damaged (why). */
static void
raise_corrupted(const PsPartReader *r, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("part \"%s\" of shard \"%s\" is corrupted: %s",
					r->part->blob_key ? r->part->blob_key : "(inline)",
					r->shard, why)));
}

/* Raises ERRCODE_DATA_CORRUPTED: the part is not the one the state describes. */
static void
raise_mismatch(const PsPartReader *r)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("part \"%s\" of shard \"%s\" does not match the shard state: "
					"expected checksum %08x and %llu updates, found checksum %08x and %llu updates",
					r->part->blob_key ? r->part->blob_key : "(inline)", r->shard,
					r->part->checksum, (unsigned long long) r->part->nupdates,
					r->seen.checksum, (unsigned long long) r->seen.nupdates)));
}

/*
 * A message naming shard and part if the part's stored bytes are not as
 * long as the state says (len), else NULL.
 */
char *
ps_part_length_problem(const char *shard, const PsPart *part, uint64 len)
{
	if (len == part->encoded_size)
		return NULL;
	return psprintf("part \"%s\" of shard \"%s\" does not match the shard state: "
					"expected %llu bytes, found %llu bytes",
					part->blob_key ? part->blob_key : "(inline)", shard,
					(unsigned long long) part->encoded_size,
					(unsigned long long) len);
}

/*
 * Starts reading a part of shard: a blob part's row is looked up (raising
 * ERRCODE_DATA_CORRUPTED if it is missing or not of the part's length),
 * but none of its bytes read yet.  Allocates in the current context.
 */
void
ps_part_reader_open(PsPartReader *r, const char *shard, const PsPart *part,
					bool read_only)
{
	char	   *problem;

	memset(r, 0, sizeof(PsPartReader));
	r->shard = shard;
	r->part = part;
	if (part->blob_key == NULL)
		return;
	r->blob = ps_blob_open(part->blob_key, part->encoded_size,
							 CurrentMemoryContext, read_only);
	if (r->blob == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("part \"%s\" of shard \"%s\" is missing",
						part->blob_key, shard)));
	problem = ps_part_length_problem(shard, part, r->blob->length);
	if (problem)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("%s", problem)));
}

/*
 * Starts reading a part of shard for a lookup of keys (which must outlive
 * the reader): where the block cache (block_cache.c) can serve the part,
 * the reader starts at the block that may hold keys, takes blocks the
 * cache keeps decoded from it, and fetches others only as needed, trusting
 * the part's length as the state gives it (a missing or short part is
 * found when its bytes are read); else as ps_part_reader_open.
 */
void
ps_part_reader_open_keys(PsPartReader *r, const char *shard,
						 const PsPart *part, bool read_only,
						 const PsKeyRange *keys)
{
	if (!ps_block_cache_on(part))
	{
		ps_part_reader_open(r, shard, part, read_only);
		return;
	}
	memset(r, 0, sizeof(PsPartReader));
	r->shard = shard;
	r->part = part;
	r->keys = keys;
	r->read_only = read_only;
}

/* Opens a lookup's blob part for reading, once its bytes are needed. */
static void
open_blob(PsPartReader *r)
{
	if (r->blob != NULL || r->part->blob_key == NULL)
		return;
	r->blob = ps_blob_open_sized(r->part->blob_key, r->part->encoded_size,
								 CurrentMemoryContext, r->read_only);
	if (r->blob == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("part \"%s\" of shard \"%s\" is missing",
						r->part->blob_key, r->shard)));
}

/*
 * The bytes of the block at r->offset, which runs len bytes (or to the
 * part's end), and, if they exist, the header of the next block after
 * them: one fetch.  *to_free is what the caller frees, if not NULL.
 */
static const char *
read_bytes(PsPartReader *r, uint64 len, uint64 *got, void **to_free)
{
	uint64		size = r->part->encoded_size;
	uint64		want = Min(len + PS_PART_HEADER_SIZE, size - r->offset);
	bytea	   *slice;
	char	   *why;

	*to_free = NULL;
	if (r->part->blob_key == NULL)
	{
		*got = want;
		return r->part->inline_data + r->offset;
	}
	open_blob(r);
	slice = ps_blob_read(r->blob, r->offset, want, &why);
	if (slice == NULL)
		raise_corrupted(r, why);
	*to_free = slice;
	*got = VARSIZE_ANY_EXHDR(slice);
	if (*got != want)
		raise_corrupted(r, "part is shorter than the shard state says");
	return VARDATA_ANY(slice);
}

/* Reads the header of the reader's first block into r->next_header. */
static void
read_first_header(PsPartReader *r)
{
	uint64		got;
	void	   *to_free;
	const char *bytes;

	bytes = read_bytes(r, 0, &got, &to_free);
	if (got < PS_PART_HEADER_SIZE)
		raise_corrupted(r, "part is shorter than its header");
	memcpy(r->next_header, bytes, PS_PART_HEADER_SIZE);
	r->have_header = true;
	if (to_free)
		pfree(to_free);
}

/* Checks what the blocks of a fully read part add up to against the state. */
static void
check_whole_part(PsPartReader *r)
{
	const PsPart *p = r->part;

	if (r->seen.checksum != p->checksum || r->seen.nupdates != p->nupdates ||
		r->seen.encoded_size != p->encoded_size ||
		r->seen.diff_sum != p->diff_sum ||
		(p->positive && r->seen.maybe_nonpositive))
		raise_mismatch(r);
}

/* Why a part whose state says it holds a (key, val) once is corrupted */
#define NOT_DISTINCT "part holds a (key, val) twice, and its state says it does not"

/*
 * Checks that a block just decoded holds no (key, val) twice if its part's
 * state says the part does not (check_block_order checks between blocks).
 */
static void
check_distinct(PsPartReader *r, const PsDecodedPart *block)
{
	if (r->part->distinct && ps_updates_repeat_keyval(block->updates, block->nupdates))
		raise_corrupted(r, NOT_DISTINCT);
}

/* Frees the encoded bytes of the block the reader kept, if any. */
static void
forget_block(PsPartReader *r)
{
	if (r->block_free)
		pfree(r->block_free);
	r->block = NULL;
	r->block_len = 0;
	r->block_raw = 0;
	r->block_nupdates = 0;
	r->block_free = NULL;
	r->undecoded = false;
}

/*
 * Checks that the block just read, if it has updates, starts above the
 * last update of the blocks before, and copies its own last update for
 * the next block's check.
 */
static void
check_block_order(PsPartReader *r)
{
	if (r->block_nupdates == 0)
		return;
	if (r->last_copy.data == NULL)
		initStringInfo(&r->last_copy);
	else if (ps_update_cmp_kvt(&r->last_before, &r->first) >= 0)
		raise_corrupted(r, "part is not sorted and consolidated");
	else if (r->part->distinct && ps_update_same_keyval(&r->last_before, &r->first))
		raise_corrupted(r, NOT_DISTINCT);
	resetStringInfo(&r->last_copy);
	appendBinaryStringInfo(&r->last_copy, r->last.key, r->last.key_len);
	appendBinaryStringInfo(&r->last_copy, r->last.val, r->last.val_len);
	r->last_before = r->last;
	r->last_before.key = r->last_copy.data;
	r->last_before.val = r->last_copy.data + r->last.key_len;
}

/* Adds a block of info's figures and blen bytes to what the reader has read. */
static void
count_block(PsPartReader *r, const PsPartInfo *info, uint64 blen)
{
	ps_part_add_block_info(&r->seen, info, r->offset == 0);
	r->offset += blen;
}

/*
 * Fetches the block at r->offset and checks it: its bytes (*bytes, blen
 * long, followed by the next block's header if got says so) and figures
 * into *info; *to_free is what the caller frees, if not NULL.
 */
static const char *
fetch_block(PsPartReader *r, uint64 *blen, uint64 *got, void **to_free,
			PsPartInfo *info)
{
	const char *why = NULL;
	const char *bytes;

	if (!r->have_header)
		read_first_header(r);
	*blen = ps_part_block_length(r->next_header, r->part->encoded_size - r->offset,
								 &why);
	if (*blen == 0)
		raise_corrupted(r, why);
	bytes = read_bytes(r, *blen, got, to_free);
	if (!ps_part_check_block(bytes, *blen, info, &why))
		raise_corrupted(r, why);
	return bytes;
}

/*
 * Fills *known (but its info) with what a lookup learned of the block of
 * blen bytes at its reader's offset, of which, with the next block's
 * header, got bytes were fetched: its first and last update (NULL if it
 * has none), whose keys must live until the cache has learned them.
 */
static void
know_block(const PsPartReader *r, PsKnownBlock *known, const char *bytes,
		   uint64 blen, uint64 got, const PsUpdate *first,
		   const PsUpdate *last)
{
	known->offset = r->offset;
	known->len = blen;
	memcpy(known->header, r->next_header, PS_PART_HEADER_SIZE);
	known->has_next = got > blen;
	if (known->has_next)
		memcpy(known->next_header, bytes + blen, Min(got - blen, PS_PART_HEADER_SIZE));
	known->has_updates = first != NULL;
	if (first != NULL)
	{
		known->first_key = unconstify(char *, first->key);
		known->first_key_len = first->key_len;
		known->last_key = unconstify(char *, last->key);
		known->last_key_len = last->key_len;
	}
}

/*
 * True if a lookup of one key may stop at a block it knows this of: one
 * whose key filter does not hold the key and whose last key is not before
 * it, so that neither it nor a block after it holds the key.
 */
static bool
filter_ends_lookup(const PsPartReader *r, const PsKnownBlock *known)
{
	return known->has_filter && known->has_updates &&
		ps_key_range_is_one_key(r->keys) &&
		!ps_key_before_range(r->keys, known->last_key, known->last_key_len) &&
		!ps_key_filter_may_hold(&known->filter, r->keys->lower, r->keys->lower_len);
}

/*
 * Fetches and decodes the block at a lookup reader's offset into block
 * (the updates of its keys only, if the block cache keeps the block) and
 * teaches the cache the block; *known gets what is known of it.  A
 * bounded block whose last key sorts before the lookup's keys is checked
 * (its checksum covers its bounds) but not decoded, nor is one whose key
 * filter tells a lookup of one key that the key is not in the rest of
 * the part (r->key_absent); another block the lookup walks past is
 * decoded but not kept: block is left empty.  A lookup of one key
 * teaches the cache the key filter of a block it decodes and does not
 * walk past, so that the next one may stop at the block, bounded or not,
 * without decoding it.
 */
static void
lookup_fetch(PsPartReader *r, PsDecodedPart *block, PsKnownBlock *known)
{
	uint64		blen;
	uint64		got;
	void	   *to_free;
	const char *bytes = fetch_block(r, &blen, &got, &to_free, &known->info);
	const char *why = NULL;
	bool		keep = r->cached < LOOKUP_CACHED_BLOCKS;
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext old;
	PsDecodedPart decoded;
	PsUpdate	first;
	PsUpdate	last;
	bool		bounded = ps_part_block_bounds(bytes, blen, &first, &last);
	bool		walked_past;

	known->has_filter = false;
	if (bounded && ps_key_before_range(r->keys, last.key, last.key_len))
	{
		know_block(r, known, bytes, blen, got, &first, &last);
		ps_block_cache_learn(r->part, known, NULL, NULL);
		r->blocks.passed++;
		memset(block, 0, sizeof(PsDecodedPart));
		if (to_free)
			pfree(to_free);
		return;
	}
	if (ps_key_range_is_one_key(r->keys))
		known->has_filter = ps_part_block_key_filter(bytes, blen, &known->filter);
	if (bounded)
		know_block(r, known, bytes, blen, got, &first, &last);
	if (bounded && filter_ends_lookup(r, known))
	{
		ps_block_cache_learn(r->part, known, NULL, NULL);
		r->blocks.filtered++;
		r->key_absent = true;
		memset(block, 0, sizeof(PsDecodedPart));
		if (to_free)
			pfree(to_free);
		return;
	}
	if (keep)
		cxt = AllocSetContextCreate(CurrentMemoryContext,
									"persist_sink cached block",
									ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	if (!ps_part_decode_checked_block(bytes, blen, &known->info, &decoded, &why))
		raise_corrupted(r, why);
	MemoryContextSwitchTo(old);
	check_distinct(r, &decoded);
	r->blocks.decoded++;
	know_block(r, known, bytes, blen, got,
			   decoded.nupdates > 0 ? &decoded.updates[0] : NULL,
			   decoded.nupdates > 0 ? &decoded.updates[decoded.nupdates - 1] : NULL);
	walked_past = decoded.nupdates > 0 &&
		ps_key_before_range(r->keys, known->last_key, known->last_key_len);
	/* a block the lookup walks past is learned without its filter, nor kept */
	known->has_filter = known->has_filter && !walked_past;
	if (keep && walked_past)
	{
		ps_block_cache_learn(r->part, known, NULL, NULL);
		MemoryContextDelete(cxt);
		memset(block, 0, sizeof(PsDecodedPart));
	}
	else if (keep)
	{
		r->cached++;
		ps_block_cache_copy_range(&decoded, r->keys, block);
		ps_block_cache_learn(r->part, known, &decoded, cxt);
	}
	else
	{
		*block = decoded;
		ps_block_cache_learn(r->part, known, NULL, NULL);
	}
	/* the cache has copied the key filter, which points into the bytes */
	if (to_free)
		pfree(to_free);
}

/*
 * ps_part_reader_next of a lookup: starts at the block the block cache
 * says may hold its keys, stops before a block it knows starts past them
 * (a lookup of one key also at one whose key filter does not hold it),
 * takes the updates of its keys of a block the cache keeps, and fetches
 * other blocks (teaching the cache).  A part read from its first block to
 * its end is checked as a whole, as any part.
 */
static bool
lookup_next(PsPartReader *r, PsDecodedPart *block)
{
	uint64		size = r->part->encoded_size;
	PsKnownBlock known;
	bool		is_known;

	if (!r->sought)
	{
		r->sought = true;
		r->offset = ps_block_cache_seek(r->part, r->keys, r->next_header);
		r->partial = r->offset > 0;
		r->have_header = r->offset > 0;
	}
	if (r->key_absent)
	{
		r->partial = true;
		return false;
	}
	if (r->offset >= size)
	{
		if (!r->partial)
			check_whole_part(r);
		return false;
	}
	is_known = ps_block_cache_known(r->part, r->offset, &known);
	if (is_known && known.has_updates &&
		ps_key_past_range(r->keys, known.first_key, known.first_key_len))
	{
		r->partial = true;
		return false;
	}
	if (is_known && filter_ends_lookup(r, &known))
	{
		r->blocks.filtered++;
		r->partial = true;
		return false;
	}
	if (is_known)
		memcpy(r->next_header, known.header, PS_PART_HEADER_SIZE);
	if (is_known && ps_block_cache_copy(r->part, r->offset, r->keys, block))
		r->blocks.from_cache++;
	else
	{
		r->have_header |= is_known;
		lookup_fetch(r, block, &known);
	}
	if (known.has_next)
		memcpy(r->next_header, known.next_header, PS_PART_HEADER_SIZE);
	r->block_nupdates = block->nupdates;
	if (block->nupdates > 0)
	{
		r->first = block->updates[0];
		r->last = block->updates[block->nupdates - 1];
	}
	check_block_order(r);
	count_block(r, &known.info, known.len);
	return true;
}

/*
 * Reads the reader's next block into block, allocated in the current
 * context: decoded, or, with leave_bounded, left undecoded if it is a
 * bounded block (r->undecoded; block is then empty, r->first and r->last
 * are its bounds, ps_part_reader_decode decodes it).  Each block's first
 * update must sort above the last of the block before.  With keep_block
 * (which leave_bounded needs), the block's encoded bytes stay in r->block
 * until the next call.  False, with the part checked against the state,
 * once every block is read.  Raises ERRCODE_DATA_CORRUPTED on damage.
 * A lookup's reader (ps_part_reader_open_keys) reads as lookup_next does.
 */
bool
ps_part_reader_next(PsPartReader *r, PsDecodedPart *block)
{
	uint64		size = r->part->encoded_size;
	uint64		blen;
	uint64		got;
	void	   *to_free;
	const char *bytes;
	const char *why = NULL;
	PsPartInfo	info;

	Assert(r->keep_block || !r->leave_bounded);
	forget_block(r);
	memset(block, 0, sizeof(PsDecodedPart));
	if (r->keys)
		return lookup_next(r, block);
	if (r->offset >= size)
	{
		check_whole_part(r);
		return false;
	}
	bytes = fetch_block(r, &blen, &got, &to_free, &info);
	r->undecoded = r->leave_bounded &&
		ps_part_block_bounds(bytes, blen, &r->first, &r->last);
	if (!r->undecoded)
	{
		if (!ps_part_decode_checked_block(bytes, blen, &info, block, &why))
			raise_corrupted(r, why);
		check_distinct(r, block);
		if (block->nupdates > 0)
		{
			r->first = block->updates[0];
			r->last = block->updates[block->nupdates - 1];
		}
	}
	if (got > blen)
		memcpy(r->next_header, bytes + blen, Min(got - blen, PS_PART_HEADER_SIZE));
	r->block_nupdates = info.nupdates;
	check_block_order(r);
	if (r->keep_block)
	{
		r->block = bytes;
		r->block_len = blen;
		r->block_raw = info.raw_size;
		r->block_free = to_free;
	}
	else if (to_free)
		pfree(to_free);
	count_block(r, &info, blen);
	return true;
}

/*
 * Decodes the bounded block the reader left undecoded into block,
 * allocated in the current context; decoding checks its updates against
 * its bounds.  Raises ERRCODE_DATA_CORRUPTED on damage.
 */
void
ps_part_reader_decode(PsPartReader *r, PsDecodedPart *block)
{
	PsPartInfo	info = {0};
	const char *why = NULL;

	Assert(r->undecoded && r->block != NULL);
	/* checked when read: only its counts are needed */
	info.nupdates = r->block_nupdates;
	info.raw_size = r->block_raw;
	if (!ps_part_decode_checked_block(r->block, r->block_len, &info, block, &why))
		raise_corrupted(r, why);
	check_distinct(r, block);
	r->first = block->updates[0];
	r->last = block->updates[block->nupdates - 1];
	r->undecoded = false;
}

/* Frees what the reader holds (not the blocks it decoded). */
void
ps_part_reader_close(PsPartReader *r)
{
	forget_block(r);
	if (r->blob)
		ps_blob_close(r->blob);
	r->blob = NULL;
	if (r->last_copy.data)
		pfree(r->last_copy.data);
	r->last_copy.data = NULL;
}
