/*-------------------------------------------------------------------------
 *
 * batch_writer.c
 *	  Encoding a sorted, consolidated stream of updates into the parts of
 *	  one batch, writing blob rows as parts fill.  The stream may hold a
 *	  (key, val, time) more than once (a merge's sum split because it
 *	  leaves bigint): each part holds it once.  A merge may hand on whole
 *	  blocks of its input among the updates (ps_batch_writer_add_block):
 *	  the updates buffered before are encoded as blocks of their own, and
 *	  the part goes on with the block as it is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/settings.h"
#include "codec/part.h"
#include "shard/shard.h"
#include "store/store.h"

/* Starts a batch writer for shard, whose parts go to store (NULL: the table). */
void
ps_batch_writer_init(PsBatchWriter *w, const char *shard, const char *store,
					 bool copy)
{
	memset(w, 0, sizeof(PsBatchWriter));
	w->shard = shard;
	w->store = store;
	w->copy = copy;
	w->cap = 1024;
	w->buf = palloc(sizeof(PsUpdate) * w->cap);
	if (copy)
		initStringInfo(&w->arena);
}

/*
 * Parts of a shard in an object store kept pending, once the batch cannot
 * be inline, to be put at once (their round trips overlap)
 */
#define PARTS_PUT_AT_ONCE	4

/* Puts every pending part to the shard's blob store, at once if it can. */
static void
flush_pending(PsBatchWriter *w)
{
	int			n = list_length(w->pending);
	const char **keys = palloc(sizeof(char *) * Max(n, 1));
	const char **datas = palloc(sizeof(char *) * Max(n, 1));
	uint64	   *lens = palloc(sizeof(uint64) * Max(n, 1));
	ListCell   *lc;

	foreach(lc, w->pending)
	{
		PsPart	   *part = lfirst(lc);
		int			i = foreach_current_index(lc);

		part->blob_key = ps_blob_new_key(w->shard, w->store);
		keys[i] = part->blob_key;
		datas[i] = part->inline_data;
		lens[i] = part->encoded_size;
	}
	ps_blob_put_all(keys, datas, lens, n);
	foreach(lc, w->pending)
	{
		PsPart	   *part = lfirst(lc);

		pfree(part->inline_data);
		part->inline_data = NULL;
		w->counts.blob_puts++;
		w->counts.blob_bytes += part->encoded_size;
	}
	list_free(w->pending);
	w->pending = NIL;
	pfree(keys);
	pfree(datas);
	pfree(lens);
}

/* True if the batch's pending parts can no longer stay inline in its state. */
static bool
past_inline(const PsBatchWriter *w)
{
	return w->pending_bytes >= (uint64) ps_inline_max_bytes ||
		list_length(w->parts) > list_length(w->pending);
}

/*
 * Adds an encoded part (palloc'd data, which the writer takes) whose keys
 * are within bounds (a PsPart's lower and upper bounds).  It stays
 * pending (maybe inline) while the batch is still below inline_max_bytes,
 * and, in an object store, until PARTS_PUT_AT_ONCE are pending.
 */
static void
add_part(PsBatchWriter *w, char *data, const PsPartInfo *info,
		 const PsPart *bounds)
{
	PsPart	   *part = palloc0(sizeof(PsPart));

	part->inline_data = data;
	part->encoded_size = info->encoded_size;
	part->raw_size = info->raw_size;
	part->nupdates = info->nupdates;
	part->diff_sum = info->diff_sum;
	part->checksum = info->checksum;
	part->positive = !info->maybe_nonpositive;
	part->distinct = !info->maybe_repeating;
	ps_part_copy_bounds(part, bounds);
	w->parts = lappend(w->parts, part);
	w->counts.parts++;
	w->pending = lappend(w->pending, part);
	w->pending_bytes += part->encoded_size;
	if (past_inline(w) &&
		(w->store == NULL || list_length(w->pending) >= PARTS_PUT_AT_ONCE))
		flush_pending(w);
}

/* Copies len bytes into the arena; returns the offset (arena may move). */
static uint64
arena_copy(PsBatchWriter *w, const char *data, uint32 len)
{
	uint64		off = w->arena.len;

	appendBinaryStringInfo(&w->arena, data, len);
	return off;
}

/* Turns the buffered updates' arena offsets into pointers (copy only). */
static void
resolve_offsets(PsBatchWriter *w)
{
	if (w->copy)
		for (int i = 0; i < w->n; i++)
		{
			w->buf[i].key = w->arena.data + (uint64) (uintptr_t) w->buf[i].key;
			w->buf[i].val = w->arena.data + (uint64) (uintptr_t) w->buf[i].val;
		}
}

/* Raises 54000: a part of the writer's shard could not be encoded (why). */
static void
raise_unencodable(PsBatchWriter *w, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("could not encode a part of shard \"%s\": %s",
					w->shard, why)));
}

/* Keeps a copy of update u in *copy, its key and val bytes in buf. */
static void
remember_update(StringInfo buf, PsUpdate *copy, const PsUpdate *u)
{
	if (buf->data == NULL)
		initStringInfo(buf);
	resetStringInfo(buf);
	appendBinaryStringInfo(buf, u->key, u->key_len);
	appendBinaryStringInfo(buf, u->val, u->val_len);
	*copy = *u;
	copy->key = buf->data;
	copy->val = buf->data + u->key_len;
}

/*
 * Appends len bytes of encoded blocks, whose first and last updates are
 * first and last, to the part being filled.  They were encoded, or read
 * and checked, by this process: they are chained to the part's without a
 * second check.  The writer takes data (palloc'd) if own, else copies it.
 * The part may hold a (key, val) twice once the blocks may
 * (maybe_repeating), or the part did, or they start with its last one.
 */
static void
append_blocks(PsBatchWriter *w, char *data, uint64 len, bool own,
			  const PsUpdate *first, const PsUpdate *last,
			  bool maybe_repeating)
{
	PsPartInfo	sum = w->part_info;
	const char *why = NULL;
	bool		empty = w->part_info.encoded_size == 0;

	if (!ps_part_append_checked_blocks(&sum, data, len, &why))
		raise_unencodable(w, why);
	sum.maybe_repeating = maybe_repeating ||
		(!empty && (w->part_info.maybe_repeating ||
					ps_update_same_keyval(&w->part_last, first)));
	remember_update(&w->part_last_bytes, &w->part_last, last);
	ps_part_set_upper(&w->part_bounds, last->key, last->key_len);
	if (empty)
	{
		ps_part_set_lower(&w->part_bounds, first->key, first->key_len);
		w->part_data = own ? data : memcpy(palloc(len), data, len);
		w->part_cap = len;
	}
	else
	{
		if (sum.encoded_size > w->part_cap)
		{
			w->part_cap = Max(w->part_cap * 2, sum.encoded_size);
			w->part_data = repalloc_huge(w->part_data, w->part_cap);
		}
		memcpy(w->part_data + w->part_info.encoded_size, data, len);
		if (own)
			pfree(data);
	}
	w->part_info = sum;
}

/* Encodes the buffered updates as blocks of the part being filled. */
static void
encode_buffered(PsBatchWriter *w)
{
	PsPartInfo	info;
	const char *why = NULL;
	char	   *data;

	if (w->n == 0)
		return;
	resolve_offsets(w);
	data = ps_part_encode(w->buf, w->n, ps_compression_level, &info, &why);
	if (data == NULL)
		raise_unencodable(w, why);
	append_blocks(w, data, info.encoded_size, true, &w->buf[0], &w->buf[w->n - 1],
				  info.maybe_repeating);

	w->n = 0;
	w->raw = 0;
	if (w->copy)
		resetStringInfo(&w->arena);
}

/* Ends the part being filled (if it holds anything): it joins the batch. */
static void
cut_part(PsBatchWriter *w)
{
	encode_buffered(w);
	if (w->part_info.encoded_size == 0)
		return;
	add_part(w, w->part_data, &w->part_info, &w->part_bounds);
	w->part_data = NULL;
	memset(&w->part_info, 0, sizeof(PsPartInfo));
}

/*
 * Adds a part encoded elsewhere (palloc'd data, which the writer takes),
 * whose updates sort after every update added before and whose first and
 * last updates are first and last.  Nothing may be buffered: a writer
 * takes either parts or updates.
 */
void
ps_batch_writer_add_part(PsBatchWriter *w, char *data, const PsPartInfo *info,
						 const PsUpdate *first, const PsUpdate *last)
{
	PsPart		bounds = {0};

	Assert(w->n == 0 && w->part_info.encoded_size == 0);
	if (first)
	{
		ps_part_set_lower(&bounds, first->key, first->key_len);
		ps_part_set_upper(&bounds, last->key, last->key_len);
	}
	add_part(w, data, info, &bounds);
}


/* True if u has the (key, val, time) of the last buffered update. */
static bool
same_as_last(PsBatchWriter *w, const PsUpdate *u)
{
	PsUpdate	last;

	if (w->n == 0)
		return false;
	last = w->buf[w->n - 1];
	if (last.time != u->time || last.key_len != u->key_len ||
		last.val_len != u->val_len)
		return false;
	if (w->copy)
	{
		last.key = w->arena.data + (uint64) (uintptr_t) last.key;
		last.val = w->arena.data + (uint64) (uintptr_t) last.val;
	}
	return ps_update_cmp_kvt(&last, u) == 0;
}

/*
 * True if u has the (key, val, time) of the last update added: the last
 * buffered one or, with none buffered, the last of the part being filled.
 */
static bool
same_as_last_added(PsBatchWriter *w, const PsUpdate *u)
{
	if (w->n > 0)
		return same_as_last(w, u);
	/* nothing buffered: the last added ended the part being filled, if any */
	return w->part_info.encoded_size > 0 && ps_update_cmp_kvt(&w->part_last, u) == 0;
}

/*
 * Adds whole encoded blocks (len bytes at data, which the writer copies,
 * read and checked by this process) whose first and last updates are first
 * and last, and whose updates sort after every update added before: the
 * updates buffered are encoded first, and a part is cut before the blocks
 * if they would take it past blob_target_size.  A part holds each (key, val, time) once: blocks that
 * start with the last update added (two blocks of one part whose times a
 * merge moved to the same since) start a new part.
 */
void
ps_batch_writer_add_block(PsBatchWriter *w, const char *data, uint64 len,
						  const PsUpdate *first, const PsUpdate *last)
{
	PsPartInfo	info = {0};
	const char *why = NULL;
	bool		repeats = same_as_last_added(w, first);

	if (!ps_part_append_checked_blocks(&info, data, len, &why))
		raise_unencodable(w, why);
	encode_buffered(w);
	if (w->part_info.encoded_size > 0 &&
		(repeats ||
		 w->part_info.raw_size + info.raw_size > (uint64) ps_blob_target_size ||
		 w->part_info.raw_size + info.raw_size > PS_PART_MAX_RAW ||
		 w->part_info.nupdates + info.nupdates > PS_PART_MAX_UPDATES))
		cut_part(w);
	append_blocks(w, unconstify(char *, data), len, false, first, last,
				  info.maybe_repeating);
}

/*
 * Adds the next update (in (key, val, time) order) to the batch.  A part
 * holds each (key, val, time) once: an update equal to the last one added
 * (a merge's sum split because it leaves bigint, or the last of a whole
 * block) starts a new part.
 */
void
ps_batch_writer_add(PsBatchWriter *w, const PsUpdate *u)
{
	uint64		size = PS_UPDATE_RAW_SIZE(u);
	uint64		raw = w->part_info.raw_size + w->raw;

	if ((w->n > 0 || w->part_info.encoded_size > 0) &&
		(raw + size > (uint64) ps_blob_target_size ||
		 raw + size > PS_PART_MAX_RAW ||
		 w->part_info.nupdates + w->n >= PS_PART_MAX_UPDATES ||
		 same_as_last_added(w, u)))
		cut_part(w);
	if (w->n == w->cap)
	{
		w->cap *= 2;
		w->buf = repalloc_huge(w->buf, sizeof(PsUpdate) * w->cap);
	}
	w->buf[w->n] = *u;
	if (w->copy)
	{
		/* store offsets now; they become pointers when the part is cut */
		w->buf[w->n].key = (const char *) (uintptr_t) arena_copy(w, u->key, u->key_len);
		w->buf[w->n].val = (const char *) (uintptr_t) arena_copy(w, u->val, u->val_len);
	}
	w->n++;
	w->raw += size;
}

/*
 * Cuts the last part, puts those still pending unless the batch stays
 * inline, and fills batch's parts.  A batch whose parts all stayed pending
 * encodes below inline_max_bytes and is kept inline.
 */
void
ps_batch_writer_finish(PsBatchWriter *w, PsBatch *batch)
{
	ListCell   *lc;
	int			i = 0;

	cut_part(w);
	if (w->pending != NIL && past_inline(w))
		flush_pending(w);
	if (w->pending != NIL)
		w->counts.inline_batches++;
	list_free(w->pending);
	w->pending = NIL;

	batch->nparts = list_length(w->parts);
	batch->parts = palloc0(sizeof(PsPart) * Max(batch->nparts, 1));
	foreach(lc, w->parts)
		batch->parts[i++] = *(PsPart *) lfirst(lc);
	pfree(w->buf);
	if (w->copy)
		pfree(w->arena.data);
	if (w->part_last_bytes.data)
		pfree(w->part_last_bytes.data);
}

/*
 * Encodes an array of sorted, consolidated updates into batch's parts, put
 * in store (NULL: the blob table).
 */
void
ps_batch_build(const char *shard, const char *store, const PsUpdate *updates,
			   int n, PsBatch *batch, PsWriteCounts *counts)
{
	PsBatchWriter w;

	ps_batch_writer_init(&w, shard, store, false);
	for (int i = 0; i < n; i++)
		ps_batch_writer_add(&w, &updates[i]);
	ps_batch_writer_finish(&w, batch);
	*counts = w.counts;
}
