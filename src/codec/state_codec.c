/*-------------------------------------------------------------------------
 *
 * state_codec.c
 *	  Versioned binary encoding of shard state (see state.h).
 *
 * Layout, little-endian: magic u32, version u8, 3 reserved bytes, seqno,
 * upper, since (i64 each), row type (u16 length, 0 for none, then bytes),
 * batch count u32; per batch lower, upper, since (i64), flags u8 (bit 0:
 * single_time, then followed by the batch's time, i64), part count u32; per
 * part a kind byte (0 blob, 1 inline), encoded size, raw size, update count
 * (u64 each), diff sum i64, checksum u32, then the blob key (u16 length and
 * bytes) or the inline bytes (encoded size of them), then the part's lower
 * bound (u8 length, at most PS_PART_LOWER_MAX, and bytes).  A CRC-32C of all that
 * precedes it closes the state.
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

#define PART_KIND_BLOB		0
#define PART_KIND_INLINE	1
#define BATCH_SINGLE_TIME	0x01

/* Smallest encodings, to bound counts read from damaged input */
#define MIN_BATCH_BYTES		29
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
	appendStringInfoChar(buf, part->blob_key ? PART_KIND_BLOB : PART_KIND_INLINE);
	put_int(buf, part->encoded_size, 8);
	put_int(buf, part->raw_size, 8);
	put_int(buf, part->nupdates, 8);
	put_int(buf, (uint64) part->diff_sum, 8);
	put_int(buf, part->checksum, 4);
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
}

/* Encodes a state; returns palloc'd bytes and their length. */
char *
ps_state_encode(const PsState *state, uint64 *len)
{
	StringInfoData buf;
	size_t		type_len = state->row_type ? strlen(state->row_type) : 0;
	pg_crc32c	crc;

	initStringInfo(&buf);
	put_int(&buf, PS_STATE_MAGIC, 4);
	put_int(&buf, PS_STATE_VERSION, 4);
	put_int(&buf, (uint64) state->seqno, 8);
	put_int(&buf, (uint64) state->upper, 8);
	put_int(&buf, (uint64) state->since, 8);
	put_int(&buf, type_len, 2);
	appendBinaryStringInfo(&buf, state->row_type ? state->row_type : "", type_len);
	put_int(&buf, state->nbatches, 4);
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];

		put_int(&buf, (uint64) b->lower, 8);
		put_int(&buf, (uint64) b->upper, 8);
		put_int(&buf, (uint64) b->since, 8);
		put_int(&buf, b->single_time ? BATCH_SINGLE_TIME : 0, 1);
		if (b->single_time)
			put_int(&buf, (uint64) b->time, 8);
		put_int(&buf, b->nparts, 4);
		for (int j = 0; j < b->nparts; j++)
			encode_part(&buf, &b->parts[j]);
	}
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf.data, buf.len);
	FIN_CRC32C(crc);
	put_int(&buf, crc, 4);
	*len = buf.len;
	return buf.data;
}

/* Reads one part. */
static void
decode_part(Reader *r, PsPart *part)
{
	int			kind = (int) get_int(r, 1);

	part->encoded_size = get_int(r, 8);
	part->raw_size = get_int(r, 8);
	part->nupdates = get_int(r, 8);
	part->diff_sum = (int64) get_int(r, 8);
	part->checksum = (uint32) get_int(r, 4);
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
	part->lower_len = (uint8) get_int(r, 1);
	if (part->lower_len > PS_PART_LOWER_MAX || (uint64) (r->end - r->p) < part->lower_len)
		r->ok = false;
	else
	{
		memcpy(part->lower, r->p, part->lower_len);
		r->p += part->lower_len;
	}
}

/* Reads one batch and its parts. */
static void
decode_batch(Reader *r, PsBatch *batch)
{
	uint64		nparts;
	uint64		flags;

	batch->lower = (int64) get_int(r, 8);
	batch->upper = (int64) get_int(r, 8);
	batch->since = (int64) get_int(r, 8);
	flags = get_int(r, 1);
	batch->single_time = (flags & BATCH_SINGLE_TIME) != 0;
	if (flags & ~BATCH_SINGLE_TIME)
		r->ok = false;
	batch->time = batch->single_time ? (int64) get_int(r, 8) : 0;
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
}

/* Checks the magic, version and CRC of an encoded state. */
static bool
check_envelope(const char *data, uint64 len, const char **errmsg)
{
	Reader		r = {data, data + len, true};
	pg_crc32c	crc;

	if (len < 4 + 4 + 24 + 2 + 4 + 4)
		*errmsg = "state is too short";
	else if (get_int(&r, 4) != PS_STATE_MAGIC)
		*errmsg = "state has a bad magic number";
	else if (get_int(&r, 4) != PS_STATE_VERSION)
		*errmsg = "state has an unknown format version";
	else
	{
		Reader		tail = {data + len - 4, data + len, true};

		INIT_CRC32C(crc);
		COMP_CRC32C(crc, data, len - 4);
		FIN_CRC32C(crc);
		if ((uint32) get_int(&tail, 4) == (uint32) crc)
			return true;
		*errmsg = "state checksum mismatch";
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
	uint64		type_len;
	uint64		nbatches;

	memset(out, 0, sizeof(PsState));
	if (!check_envelope(data, len, errmsg))
		return false;
	r.p = data + 8;
	r.end = data + len - 4;
	r.ok = true;
	out->seqno = (int64) get_int(&r, 8);
	out->upper = (int64) get_int(&r, 8);
	out->since = (int64) get_int(&r, 8);
	type_len = get_int(&r, 2);
	if (type_len > 0)
		out->row_type = get_name(&r, type_len);
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

/* True if a batch has parts and all of them are inline. */
bool
ps_batch_is_inline(const PsBatch *batch)
{
	for (int i = 0; i < batch->nparts; i++)
		if (batch->parts[i].blob_key)
			return false;
	return batch->nparts > 0;
}
