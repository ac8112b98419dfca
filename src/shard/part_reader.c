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

#include "shard/read.h"
#include "store/store.h"

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
	if (r->blob == NULL)
	{
		*got = want;
		return r->part->inline_data + r->offset;
	}
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
	resetStringInfo(&r->last_copy);
	appendBinaryStringInfo(&r->last_copy, r->last.key, r->last.key_len);
	appendBinaryStringInfo(&r->last_copy, r->last.val, r->last.val_len);
	r->last_before = r->last;
	r->last_before.key = r->last_copy.data;
	r->last_before.val = r->last_copy.data + r->last.key_len;
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
	if (r->offset >= size)
	{
		check_whole_part(r);
		return false;
	}
	if (r->offset == 0)
		read_first_header(r);
	blen = ps_part_block_length(r->next_header, size - r->offset, &why);
	if (blen == 0)
		raise_corrupted(r, why);
	bytes = read_bytes(r, blen, &got, &to_free);
	if (!ps_part_check_block(bytes, blen, &info, &why))
		raise_corrupted(r, why);
	r->undecoded = r->leave_bounded &&
		ps_part_block_bounds(bytes, blen, &r->first, &r->last);
	if (!r->undecoded)
	{
		if (!ps_part_decode_checked_block(bytes, blen, &info, block, &why))
			raise_corrupted(r, why);
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
	ps_part_add_block_info(&r->seen, &info, r->offset == 0);
	r->offset += blen;
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
