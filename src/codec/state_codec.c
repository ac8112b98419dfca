/*-------------------------------------------------------------------------
 *
 * state_codec.c
 *	  Versioned binary encoding of shard state (see state.h).
 *
 * Layout, little-endian: magic u32, version u8, 3 reserved bytes, seqno,
 * upper, since (i64 each), row type (u16 length, 0 for none, then bytes),
 * in version 2 only the blob store (u16 length and bytes: a shard whose
 * parts are in the blob table is written as version 1), batch count u32; per batch lower, upper, since (i64), flags u8 (bit 0:
 * single_time, then followed by the batch's time, i64), part count u32; per
 * part a kind byte (0 blob, 1 inline; bit 7 set: the part has a time of its
 * own, PART_HAS_TIME), encoded size, raw size, update count (u64 each),
 * diff sum i64, checksum u32, the part's time (i64) if it has one, then the
 * blob key (u16 length and bytes) or the inline bytes (encoded size of
 * them), then the part's lower bound (u8 length, at most PS_PART_LOWER_MAX,
 * and bytes) and, if bit 6 of the kind byte is set (PART_HAS_UPPER), its
 * upper bound (the same way).  Bit 5 (PART_POSITIVE) says the part is
 * positive (see PsPartInfo in part.h), bit 4 (PART_DISTINCT) that it holds
 * a (key, val) at most once.  A CRC-32C of all that precedes it closes
 * the state.  States written before parts had times or upper bounds of
 * their own never set bits 7 and 6, so they decode as they did.
 *
 * A state diff (magic "PSSD") has the same envelope: magic u32, version
 * u32, then the new seqno, upper and since (i64 each), the batches kept
 * before the change (u32), the batches it removes after them (u32), the
 * batches it adds in their place (u32), and per added batch a kind byte:
 * 0 and the batch as in a state, or 1, the index of a batch of the old
 * state (u32) whose parts it keeps, and its lower, upper, since, flags and
 * time as in a state.  A CRC-32C closes it.
 *
 * Pure code, like the part codec: decode failures return false.
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "lib/stringinfo.h"
#include "port/pg_crc32c.h"
#include "codec/state.h"
#include "codec/update.h"

#define PART_KIND_BLOB		0
#define PART_KIND_INLINE	1
#define PART_HAS_TIME		0x80
#define PART_HAS_UPPER		0x40
#define PART_POSITIVE		0x20
#define PART_DISTINCT		0x10
#define BATCH_SINGLE_TIME	0x01
#define DIFF_BATCH_WHOLE	0
#define DIFF_BATCH_SAME_PARTS 1

/* Smallest encodings, to bound counts read from damaged input */
#define MIN_BATCH_BYTES		29
#define BATCH_HEADER_BYTES	29	/* bounds, flags and part count */
#define MIN_DIFF_BATCH_BYTES 30	/* a kind byte and a batch of no parts */
#define MIN_PART_BYTES		38	/* an inline part of no bytes */

/* A bounds-checked cursor over encoded bytes */
typedef struct Reader
{
	const char *p;
	const char *end;
	bool		ok;
} Reader;

/* Appends a little-endian integer of nbytes. */
static void
put_int(StringInfo buf, uint64 v, int nbytes)
{
	char		b[8];

	for (int i = 0; i < nbytes; i++)
		b[i] = (char) ((v >> (8 * i)) & 0xFF);
	appendBinaryStringInfo(buf, b, nbytes);
}

/* Reads a little-endian integer of nbytes; 0 and !ok past the end. */
static uint64
get_int(Reader *r, int nbytes)
{
	uint64		v = 0;

	if (!r->ok || r->end - r->p < nbytes)
	{
		r->ok = false;
		return 0;
	}
	for (int i = 0; i < nbytes; i++)
		v |= ((uint64) (unsigned char) r->p[i]) << (8 * i);
	r->p += nbytes;
	return v;
}

/* Copies len bytes into a new NUL-terminated string; NULL and !ok past the end. */
static char *
get_bytes(Reader *r, uint64 len)
{
	char	   *s;

	if (!r->ok || (uint64) (r->end - r->p) < len)
	{
		r->ok = false;
		return NULL;
	}
	s = palloc(len + 1);
	memcpy(s, r->p, len);
	s[len] = '\0';
	r->p += len;
	return s;
}

/* Reads a name of len bytes; !ok if it is empty or holds a NUL byte. */
static char *
get_name(Reader *r, uint64 len)
{
	char	   *s = get_bytes(r, len);

	if (s && (len == 0 || strlen(s) != len))
		r->ok = false;
	return s;
}

/* Appends one part. */
static void
encode_part(StringInfo buf, const PsPart *part)
{
	appendStringInfoChar(buf, (part->blob_key ? PART_KIND_BLOB : PART_KIND_INLINE) |
						 (part->has_time ? PART_HAS_TIME : 0) |
						 (part->has_upper ? PART_HAS_UPPER : 0) |
						 (part->positive ? PART_POSITIVE : 0) |
						 (part->distinct ? PART_DISTINCT : 0));
	put_int(buf, part->encoded_size, 8);
	put_int(buf, part->raw_size, 8);
	put_int(buf, part->nupdates, 8);
	put_int(buf, (uint64) part->diff_sum, 8);
	put_int(buf, part->checksum, 4);
	if (part->has_time)
		put_int(buf, (uint64) part->time, 8);
	if (part->blob_key)
	{
		size_t		len = strlen(part->blob_key);

		put_int(buf, len, 2);
		appendBinaryStringInfo(buf, part->blob_key, len);
	}
	else
		appendBinaryStringInfo(buf, part->inline_data, part->encoded_size);
	put_int(buf, part->lower_len, 1);
	appendBinaryStringInfo(buf, part->lower, part->lower_len);
	if (part->has_upper)
	{
		put_int(buf, part->upper_len, 1);
		appendBinaryStringInfo(buf, part->upper, part->upper_len);
	}
}

/* Appends a batch's bounds, flags and time: what precedes its parts. */
static void
encode_batch_bounds(StringInfo buf, const PsBatch *b)
{
	put_int(buf, (uint64) b->lower, 8);
	put_int(buf, (uint64) b->upper, 8);
	put_int(buf, (uint64) b->since, 8);
	put_int(buf, b->single_time ? BATCH_SINGLE_TIME : 0, 1);
	if (b->single_time)
		put_int(buf, (uint64) b->time, 8);
}

/* Appends one batch and its parts. */
static void
encode_batch(StringInfo buf, const PsBatch *b)
{
	encode_batch_bounds(buf, b);
	put_int(buf, b->nparts, 4);
	for (int j = 0; j < b->nparts; j++)
		encode_part(buf, &b->parts[j]);
}

/* Appends the CRC-32C of everything in buf. */
static void
close_envelope(StringInfo buf)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf->data, buf->len);
	FIN_CRC32C(crc);
	put_int(buf, crc, 4);
}

/* Encodes a state; returns palloc'd bytes and their length. */
char *
ps_state_encode(const PsState *state, uint64 *len)
{
	StringInfoData buf;
	size_t		type_len = state->row_type ? strlen(state->row_type) : 0;

	initStringInfo(&buf);
	put_int(&buf, PS_STATE_MAGIC, 4);
	put_int(&buf, state->blob_store ? PS_STATE_VERSION_STORE : PS_STATE_VERSION, 4);
	put_int(&buf, (uint64) state->seqno, 8);
	put_int(&buf, (uint64) state->upper, 8);
	put_int(&buf, (uint64) state->since, 8);
	put_int(&buf, type_len, 2);
	appendBinaryStringInfo(&buf, state->row_type ? state->row_type : "", type_len);
	if (state->blob_store)
	{
		put_int(&buf, strlen(state->blob_store), 2);
		appendStringInfoString(&buf, state->blob_store);
	}
	put_int(&buf, state->nbatches, 4);
	for (int i = 0; i < state->nbatches; i++)
		encode_batch(&buf, &state->batches[i]);
	close_envelope(&buf);
	*len = buf.len;
	return buf.data;
}

/* Bytes of one part's encoding. */
static uint64
part_encoded_size(const PsPart *part)
{
	uint64		n = 1 + 8 * 4 + 4 + 1 + part->lower_len + (part->has_time ? 8 : 0) +
		(part->has_upper ? 1 + part->upper_len : 0);

	if (part->blob_key)
		n += 2 + strlen(part->blob_key);
	else
		n += part->encoded_size;
	return n;
}

/* Bytes ps_state_encode would give for state, without encoding it. */
uint64
ps_state_encoded_size(const PsState *state)
{
	uint64		n = 4 + 4 + 8 * 3 + 2 + 4 + 4;

	if (state->row_type)
		n += strlen(state->row_type);
	if (state->blob_store)
		n += 2 + strlen(state->blob_store);
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		n += BATCH_HEADER_BYTES + (b->single_time ? 8 : 0);
		for (int j = 0; j < b->nparts; j++)
			n += part_encoded_size(&b->parts[j]);
	}
	return n;
}


/* Reads a part's bound: a length byte (at most PS_PART_LOWER_MAX), then bytes. */
static void
decode_bound(Reader *r, char *bound, uint8 *len)
{
	*len = (uint8) get_int(r, 1);
	if (*len > PS_PART_LOWER_MAX || (uint64) (r->end - r->p) < *len)
		r->ok = false;
	else
	{
		memcpy(bound, r->p, *len);
		r->p += *len;
	}
}
/* Reads one part. */
static void
decode_part(Reader *r, PsPart *part)
{
	int			kind = (int) get_int(r, 1);

	part->has_time = (kind & PART_HAS_TIME) != 0;
	part->has_upper = (kind & PART_HAS_UPPER) != 0;
	part->positive = (kind & PART_POSITIVE) != 0;
	part->distinct = (kind & PART_DISTINCT) != 0;
	kind &= ~(PART_HAS_TIME | PART_HAS_UPPER | PART_POSITIVE | PART_DISTINCT);
	part->encoded_size = get_int(r, 8);
	part->raw_size = get_int(r, 8);
	part->nupdates = get_int(r, 8);
	part->diff_sum = (int64) get_int(r, 8);
	part->checksum = (uint32) get_int(r, 4);
	part->time = part->has_time ? (int64) get_int(r, 8) : 0;
	part->blob_key = NULL;
	part->inline_data = NULL;
	if (kind == PART_KIND_BLOB)
	{
		part->blob_key = get_name(r, get_int(r, 2));
	}
	else if (kind == PART_KIND_INLINE)
		part->inline_data = get_bytes(r, part->encoded_size);
	else
		r->ok = false;
	decode_bound(r, part->lower, &part->lower_len);
	if (part->has_upper)
		decode_bound(r, part->upper, &part->upper_len);
	else
		part->upper_len = 0;
}

/* Reads a batch's bounds, flags and time. */
static void
decode_batch_bounds(Reader *r, PsBatch *batch)
{
	uint64		flags;

	batch->lower = (int64) get_int(r, 8);
	batch->upper = (int64) get_int(r, 8);
	batch->since = (int64) get_int(r, 8);
	flags = get_int(r, 1);
	batch->single_time = (flags & BATCH_SINGLE_TIME) != 0;
	if (flags & ~BATCH_SINGLE_TIME)
		r->ok = false;
	batch->time = batch->single_time ? (int64) get_int(r, 8) : 0;
}

/*
 * True if every key of part a sorts below every key of part b: a's upper
 * bound sorts below b's lower bound (bounds are prefixes of the keys).
 */
bool
ps_part_ends_before(const PsPart *a, const PsPart *b)
{
	return a->has_upper &&
		ps_bytes_cmp(a->upper, a->upper_len, b->lower, b->lower_len) < 0;
}

/*
 * Notes whether a batch's parts follow one another (parts_ordered) and
 * whether any has a time of its own (parts_timed).
 */
static void
note_parts_order(PsBatch *batch)
{
	batch->parts_ordered = batch->nparts == 0 ||
		batch->parts[batch->nparts - 1].has_upper;
	for (int i = 1; i < batch->nparts && batch->parts_ordered; i++)
		batch->parts_ordered = ps_part_ends_before(&batch->parts[i - 1], &batch->parts[i]);
	batch->parts_timed = false;
	for (int i = 0; i < batch->nparts; i++)
		batch->parts_timed |= batch->parts[i].has_time;
}

/*
 * Notes in a batch made in memory what decoding notes (parts_ordered,
 * parts_timed), so that reads of a state holding it use them.
 */
void
ps_batch_note_parts(PsBatch *batch)
{
	note_parts_order(batch);
}

/* Reads one batch. */
static void
decode_batch(Reader *r, PsBatch *batch)
{
	uint64		nparts;

	decode_batch_bounds(r, batch);
	nparts = get_int(r, 4);
	batch->nparts = 0;
	batch->parts = NULL;
	if (!r->ok || nparts > (uint64) (r->end - r->p) / MIN_PART_BYTES)
	{
		r->ok = false;
		return;
	}
	batch->parts = palloc0(sizeof(PsPart) * Max(nparts, 1));
	for (uint64 i = 0; i < nparts && r->ok; i++)
		decode_part(r, &batch->parts[batch->nparts++]);
	note_parts_order(batch);
}

/*
 * Checks the magic, version and CRC of an encoded state (diff false) or
 * state diff (diff true).
 */
static bool
check_envelope(const char *data, uint64 len, bool diff, const char **errmsg)
{
	Reader		r = {data, data + len, true};
	pg_crc32c	crc;
	uint64		version;

	if (len < (diff ? 4 + 4 + 24 + 12 + 4 : 4 + 4 + 24 + 2 + 4 + 4))
		*errmsg = diff ? "state diff is too short" : "state is too short";
	else if (get_int(&r, 4) != (diff ? PS_DIFF_MAGIC : PS_STATE_MAGIC))
		*errmsg = diff ? "state diff has a bad magic number" : "state has a bad magic number";
	else if ((version = get_int(&r, 4)) != (diff ? PS_DIFF_VERSION : PS_STATE_VERSION) &&
			 (diff || version != PS_STATE_VERSION_STORE))
		*errmsg = diff ? "state diff has an unknown format version" :
			"state has an unknown format version";
	else
	{
		Reader		tail = {data + len - 4, data + len, true};

		INIT_CRC32C(crc);
		COMP_CRC32C(crc, data, len - 4);
		FIN_CRC32C(crc);
		if ((uint32) get_int(&tail, 4) == (uint32) crc)
			return true;
		*errmsg = diff ? "state diff checksum mismatch" : "state checksum mismatch";
	}
	return false;
}

/*
 * Decodes a state into out (allocations in the current memory context).
 * Returns false with *errmsg if the bytes are not a valid state.
 */
bool
ps_state_decode(const char *data, uint64 len, PsState *out,
				const char **errmsg)
{
	Reader		r;
	uint64		version;
	uint64		type_len;
	uint64		nbatches;

	memset(out, 0, sizeof(PsState));
	if (!check_envelope(data, len, false, errmsg))
		return false;
	r.p = data + 4;
	r.end = data + len - 4;
	r.ok = true;
	version = get_int(&r, 4);
	out->seqno = (int64) get_int(&r, 8);
	out->upper = (int64) get_int(&r, 8);
	out->since = (int64) get_int(&r, 8);
	type_len = get_int(&r, 2);
	if (type_len > 0)
		out->row_type = get_name(&r, type_len);
	if (version == PS_STATE_VERSION_STORE)
	{
		uint64		store_len = get_int(&r, 2);

		if (store_len == 0)
			r.ok = false;
		else
			out->blob_store = get_name(&r, store_len);
	}
	nbatches = get_int(&r, 4);
	if (r.ok && nbatches <= (uint64) (r.end - r.p) / MIN_BATCH_BYTES)
	{
		out->batches = palloc0(sizeof(PsBatch) * Max(nbatches, 1));
		for (uint64 i = 0; i < nbatches && r.ok; i++)
			decode_batch(&r, &out->batches[out->nbatches++]);
	}
	else
		r.ok = false;
	if (r.ok && r.p == r.end)
		return true;
	*errmsg = r.ok ? "state has trailing bytes" : "state is truncated or malformed";
	return false;
}

/* Copies a part into dst, its key or inline bytes included. */
static void
copy_part(const PsPart *src, PsPart *dst)
{
	*dst = *src;
	if (src->blob_key)
		dst->blob_key = pstrdup(src->blob_key);
	if (src->inline_data)
	{
		dst->inline_data = palloc(Max(src->encoded_size, 1));
		memcpy(dst->inline_data, src->inline_data, src->encoded_size);
	}
}

/*
 * Copies a state into dst, sharing nothing with src (allocations in the
 * current memory context).
 */
void
ps_state_copy(const PsState *src, PsState *dst)
{
	*dst = *src;
	dst->row_type = src->row_type ? pstrdup(src->row_type) : NULL;
	dst->blob_store = src->blob_store ? pstrdup(src->blob_store) : NULL;
	dst->batches = palloc(sizeof(PsBatch) * Max(src->nbatches, 1));
	for (int i = 0; i < src->nbatches; i++)
	{
		const PsBatch *b = &src->batches[i];
		PsBatch    *c = &dst->batches[i];

		*c = *b;
		c->parts = b->parts ? palloc(sizeof(PsPart) * Max(b->nparts, 1)) : NULL;
		for (int j = 0; j < b->nparts; j++)
			copy_part(&b->parts[j], &c->parts[j]);
	}
}

/* Updates held by a batch. */
uint64
ps_batch_updates(const PsBatch *batch)
{
	uint64		n = 0;

	for (int i = 0; i < batch->nparts; i++)
		n += batch->parts[i].nupdates;
	return n;
}

/* Encoded bytes of a batch's parts. */
uint64
ps_batch_encoded_bytes(const PsBatch *batch)
{
	uint64		n = 0;

	for (int i = 0; i < batch->nparts; i++)
		n += batch->parts[i].encoded_size;
	return n;
}

/* Orders two parts' lower bounds as keys are ordered (memcmp, shorter first). */
static int
lower_cmp(const PsPart *a, const PsPart *b)
{
	int			c = memcmp(a->lower, b->lower, Min(a->lower_len, b->lower_len));

	if (c != 0)
		return c;
	return (a->lower_len > b->lower_len) - (a->lower_len < b->lower_len);
}

/* True if part b cannot continue the sorted run part a is in. */
static bool
starts_run(const PsPart *a, const PsPart *b)
{
	if (a->has_time != b->has_time || (a->has_time && a->time != b->time))
		return true;
	return lower_cmp(b, a) < 0;
}

/*
 * The sorted runs a batch's parts form, in order: none without parts, else
 * 1 plus one for every part that starts a run: its lower bound sorts below
 * the one before it, or its time of its own differs from that one's.  The
 * parts of one run have ascending lower bounds (a prefix keeps the order of
 * the keys) and one time if they have their own, so a batch the compactor
 * listed together from n batches counts n runs, less any of one time (or
 * none) whose key range follows the run before it (those read as one run).
 */
int
ps_batch_runs(const PsBatch *batch)
{
	int			runs = batch->nparts > 0;

	for (int i = 1; i < batch->nparts; i++)
		runs += starts_run(&batch->parts[i - 1], &batch->parts[i]);
	return runs;
}

/* True if a batch has parts and all of them are inline. */
bool
ps_batch_is_inline(const PsBatch *batch)
{
	for (int i = 0; i < batch->nparts; i++)
		if (batch->parts[i].blob_key)
			return false;
	return batch->nparts > 0;
}

/* True if two optional strings are equal. */
static bool
same_string(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/*
 * True if two parts are the same part: same blob row or inline bytes, same
 * figures, same time of their own if any.
 */
static bool
same_part(const PsPart *a, const PsPart *b)
{
	if (a->encoded_size != b->encoded_size || a->raw_size != b->raw_size ||
		a->nupdates != b->nupdates || a->diff_sum != b->diff_sum ||
		a->checksum != b->checksum || a->lower_len != b->lower_len ||
		a->has_time != b->has_time || (a->has_time && a->time != b->time) ||
		a->positive != b->positive || a->distinct != b->distinct ||
		memcmp(a->lower, b->lower, a->lower_len) != 0 ||
		!same_string(a->blob_key, b->blob_key))
		return false;
	if (a->blob_key != NULL || a->inline_data == b->inline_data)
		return true;
	if (a->inline_data == NULL || b->inline_data == NULL)
		return false;
	return memcmp(a->inline_data, b->inline_data, a->encoded_size) == 0;
}

/* True if two batches hold the same parts, whatever their bounds. */
bool
ps_batch_same_parts(const PsBatch *a, const PsBatch *b)
{
	if (a->nparts != b->nparts)
		return false;
	if (a->parts == b->parts)
		return true;
	for (int i = 0; i < a->nparts; i++)
		if (!same_part(&a->parts[i], &b->parts[i]))
			return false;
	return true;
}

/* True if two batches are equal in every field and part. */
bool
ps_batch_equal(const PsBatch *a, const PsBatch *b)
{
	return a->lower == b->lower && a->upper == b->upper &&
		a->since == b->since && a->single_time == b->single_time &&
		(!a->single_time || a->time == b->time) &&
		ps_batch_same_parts(a, b);
}

/* Index of a batch of from[lo, hi) with the parts of b, or -1. */
static int
find_same_parts(const PsState *from, int lo, int hi, const PsBatch *b)
{
	for (int i = lo; i < hi; i++)
		if (b->nparts > 0 && ps_batch_same_parts(&from->batches[i], b))
			return i;
	return -1;
}

/*
 * Encodes the diff that takes state `from` to state `to` (whose seqno is
 * from's + 1, and whose row type is from's); returns palloc'd bytes and
 * their length.  The batches both share at the start and at the end are
 * kept; a batch in between whose parts an old one in between had is
 * written by reference.
 */
char *
ps_state_diff_encode(const PsState *from, const PsState *to, uint64 *len)
{
	StringInfoData buf;
	int			prefix = 0;
	int			suffix = 0;
	int			old_end;
	int			new_end;

	while (prefix < from->nbatches && prefix < to->nbatches &&
		   ps_batch_equal(&from->batches[prefix], &to->batches[prefix]))
		prefix++;
	while (suffix < from->nbatches - prefix && suffix < to->nbatches - prefix &&
		   ps_batch_equal(&from->batches[from->nbatches - 1 - suffix],
						  &to->batches[to->nbatches - 1 - suffix]))
		suffix++;
	old_end = from->nbatches - suffix;
	new_end = to->nbatches - suffix;

	initStringInfo(&buf);
	put_int(&buf, PS_DIFF_MAGIC, 4);
	put_int(&buf, PS_DIFF_VERSION, 4);
	put_int(&buf, (uint64) to->seqno, 8);
	put_int(&buf, (uint64) to->upper, 8);
	put_int(&buf, (uint64) to->since, 8);
	put_int(&buf, prefix, 4);
	put_int(&buf, old_end - prefix, 4);
	put_int(&buf, new_end - prefix, 4);
	for (int i = prefix; i < new_end; i++)
	{
		const PsBatch *b = &to->batches[i];
		int			same = find_same_parts(from, prefix, old_end, b);

		if (same < 0)
		{
			appendStringInfoChar(&buf, DIFF_BATCH_WHOLE);
			encode_batch(&buf, b);
		}
		else
		{
			appendStringInfoChar(&buf, DIFF_BATCH_SAME_PARTS);
			put_int(&buf, same, 4);
			encode_batch_bounds(&buf, b);
		}
	}
	close_envelope(&buf);
	*len = buf.len;
	return buf.data;
}

/* Reads one added batch of a diff, against the old state's batches. */
static void
decode_diff_batch(Reader *r, const PsState *old, PsBatch *batch)
{
	int			kind = (int) get_int(r, 1);

	if (kind == DIFF_BATCH_WHOLE)
		decode_batch(r, batch);
	else if (kind == DIFF_BATCH_SAME_PARTS)
	{
		uint64		same = get_int(r, 4);

		decode_batch_bounds(r, batch);
		if (!r->ok || same >= (uint64) old->nbatches)
		{
			r->ok = false;
			return;
		}
		batch->nparts = old->batches[same].nparts;
		batch->parts = old->batches[same].parts;
		batch->parts_ordered = old->batches[same].parts_ordered;
		batch->parts_timed = old->batches[same].parts_timed;
	}
	else
		r->ok = false;
}

/*
 * Frees what decoding a diff's batch allocated, unless it shares the parts
 * of one of the state's batches.
 */
static void
free_whole_batch(const PsState *state, PsBatch *batch)
{
	if (batch->parts == NULL)
		return;
	for (int i = 0; i < state->nbatches; i++)
		if (state->batches[i].parts == batch->parts)
			return;
	for (int j = 0; j < batch->nparts; j++)
	{
		if (batch->parts[j].blob_key)
			pfree(batch->parts[j].blob_key);
		if (batch->parts[j].inline_data)
			pfree(batch->parts[j].inline_data);
	}
	pfree(batch->parts);
}

/*
 * Applies an encoded diff to state, which becomes the state at the diff's
 * seqno (allocations in the current memory context; the replaced batch
 * array is freed, parts it shared are kept).  Returns false with *errmsg,
 * and state unchanged, if the bytes are not a valid diff of this state.
 */
bool
ps_state_diff_apply(PsState *state, const char *data, uint64 len,
					const char **errmsg)
{
	Reader		r;
	int64		seqno;
	int64		upper;
	int64		since;
	uint64		prefix;
	uint64		removed;
	uint64		added;
	PsBatch    *batches;
	int			n = 0;

	if (!check_envelope(data, len, true, errmsg))
		return false;
	r.p = data + 8;
	r.end = data + len - 4;
	r.ok = true;
	seqno = (int64) get_int(&r, 8);
	upper = (int64) get_int(&r, 8);
	since = (int64) get_int(&r, 8);
	prefix = get_int(&r, 4);
	removed = get_int(&r, 4);
	added = get_int(&r, 4);
	if (seqno != state->seqno + 1)
	{
		*errmsg = "state diff does not follow the state's seqno";
		return false;
	}
	if (prefix + removed > (uint64) state->nbatches ||
		added > (uint64) (r.end - r.p) / MIN_DIFF_BATCH_BYTES)
	{
		*errmsg = "state diff does not fit the state";
		return false;
	}
	batches = palloc0(sizeof(PsBatch) * Max(state->nbatches - removed + added, 1));
	for (uint64 i = 0; i < prefix; i++)
		batches[n++] = state->batches[i];
	for (uint64 i = 0; i < added && r.ok; i++)
		decode_diff_batch(&r, state, &batches[n++]);
	if (!r.ok || r.p != r.end)
	{
		for (int i = (int) prefix; i < n; i++)
			free_whole_batch(state, &batches[i]);
		pfree(batches);
		*errmsg = r.ok ? "state diff has trailing bytes" :
			"state diff is truncated or malformed";
		return false;
	}
	for (int i = (int) (prefix + removed); i < state->nbatches; i++)
		batches[n++] = state->batches[i];
	if (state->batches)
		pfree(state->batches);
	state->batches = batches;
	state->nbatches = n;
	state->seqno = seqno;
	state->upper = upper;
	state->since = since;
	return true;
}
