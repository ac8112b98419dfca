/*-------------------------------------------------------------------------
 *
 * part_codec.c
 *	  Encoding and decoding of parts (see part.h for the format).
 *
 * Pure code: no ereport, no server state.  Every decode check is explicit so
 * that no input, however damaged, makes the decoder read past a buffer.
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include <zstd.h>

#include "common/hashfn.h"
#include "common/int.h"
#include "port/pg_crc32c.h"
#include "codec/part.h"

/* Header field offsets */
#define H_MAGIC		0
#define H_VERSION	4
#define H_FLAGS		5
#define H_BOUNDS	6			/* bounded blocks: the bounds' size, 2 bytes */
#define H_NUPDATES	8
#define H_RAW		12
#define H_COMP		16
#define H_DIFFSUM	20
#define H_CRC		28
#define H_TIME		PS_PART_HEADER_SIZE	/* one-time blocks only */
#define H_FIRST		(H_TIME + PS_PART_TIME_SIZE)	/* bounded blocks only */

/*
 * The process's zstd contexts, made on first use and kept for its life
 * (about 570 kB to compress, 95 kB to decompress): a fresh context per part
 * costs an allocation and a table reset, 10-15% of the codec's time on the
 * sink's 200 kB interval parts.
 */
static ZSTD_CCtx *compress_cxt = NULL;
static ZSTD_DCtx *decompress_cxt = NULL;

/* Stores a little-endian integer of nbytes. */
static inline void
put_le(char *p, uint64 v, int nbytes)
{
	for (int i = 0; i < nbytes; i++)
		p[i] = (char) ((v >> (8 * i)) & 0xFF);
}

/* Loads a little-endian integer of nbytes. */
static inline uint64
get_le(const char *p, int nbytes)
{
	uint64		v = 0;

	for (int i = 0; i < nbytes; i++)
		v |= ((uint64) (unsigned char) p[i]) << (8 * i);
	return v;
}

/* Bytes of the LEB128 form of v. */
static inline int
varint_len(uint64 v)
{
	int			n = 1;

	while (v >= 0x80)
	{
		v >>= 7;
		n++;
	}
	return n;
}

/* Writes the LEB128 form of v at p; returns the bytes written. */
static inline int
varint_put(char *p, uint64 v)
{
	int			n = 0;

	while (v >= 0x80)
	{
		p[n++] = (char) ((v & 0x7F) | 0x80);
		v >>= 7;
	}
	p[n++] = (char) v;
	return n;
}

/* Reads a LEB128 varint; returns false if it is truncated or too long. */
static inline bool
varint_get(const char **p, const char *end, uint64 *v)
{
	uint64		result = 0;

	for (int shift = 0; shift < 64; shift += 7)
	{
		uint8		b;

		if (*p >= end)
			return false;
		b = (uint8) *(*p)++;
		if (shift == 63 && b > 1)
			return false;
		result |= ((uint64) (b & 0x7F)) << shift;
		if ((b & 0x80) == 0)
		{
			*v = result;
			return true;
		}
	}
	return false;
}

/* Maps a signed integer to unsigned so small magnitudes stay small. */
static inline uint64
zigzag(int64 v)
{
	return ((uint64) v << 1) ^ (uint64) (v >> 63);
}

/* Inverse of zigzag. */
static inline int64
unzigzag(uint64 v)
{
	return (int64) ((v >> 1) ^ (~(v & 1) + 1));
}

/* Raw bytes of update u after an update at time prev, in a block with times. */
static uint64
update_raw_size(const PsUpdate *u, int64 prev)
{
	return varint_len(u->key_len) + u->key_len +
		varint_len(u->val_len) + u->val_len +
		varint_len(zigzag((int64) ((uint64) u->time - (uint64) prev))) +
		varint_len(zigzag(u->diff));
}

/*
 * Size of the raw columns of n updates as one block with times: exact for
 * a block of several times, an upper bound for a one-time block.
 */
uint64
ps_part_raw_size(const PsUpdate *updates, int n)
{
	uint64		size = 0;
	int64		prev = 0;

	for (int i = 0; i < n; i++)
	{
		size += update_raw_size(&updates[i], prev);
		prev = updates[i].time;
	}
	return size;
}

/* True if the n updates (at least one) are all at one time. */
static bool
all_one_time(const PsUpdate *updates, int n)
{
	for (int i = 1; i < n; i++)
		if (updates[i].time != updates[0].time)
			return false;
	return true;
}

/* Exact size of the raw columns of n updates as a block (one_time or not). */
static uint64
block_raw_size(const PsUpdate *updates, int n, bool one_time)
{
	uint64		size = ps_part_raw_size(updates, n);

	/* a one-time block has no time column: its deltas are 0 but the first's */
	if (one_time && n > 0)
		size -= (n - 1) + varint_len(zigzag(updates[0].time));
	return size;
}

/* True if the header at data is a bounded block's. */
static inline bool
is_bounded(const char *data)
{
	return (uint8) data[H_VERSION] == PS_PART_VERSION_BOUNDED;
}

/* True if the header at data is that of a block with a key filter. */
static inline bool
has_key_filter(const char *data)
{
	return ((uint8) data[H_FLAGS] & PS_BLOCK_KEY_FILTER) != 0;
}

/* True if the header at data is that of a one-time (or bounded) block. */
static inline bool
is_one_time(const char *data)
{
	return (uint8) data[H_VERSION] == PS_PART_VERSION_ONE_TIME || is_bounded(data);
}

/*
 * Bytes before a block's key filter (or its frame), as its header at data
 * says: the header, and the time and bounds if the block has them.
 */
static uint64
block_prefix_size(const char *data)
{
	switch ((uint8) data[H_VERSION])
	{
		case PS_PART_VERSION_ONE_TIME:
			return H_FIRST;
		case PS_PART_VERSION_BOUNDED:
			return H_FIRST + get_le(data + H_BOUNDS, 2);
		default:
			return PS_PART_HEADER_SIZE;
	}
}

/* Where the key filter of the block at data starts: just before its frame. */
static inline const char *
key_filter_at(const char *data)
{
	return data + block_prefix_size(data);
}

/* Bytes of the key filter of a block of n updates: hash count, then bits. */
static inline uint64
key_filter_size(uint64 n)
{
	return 1 + (n * PS_KEY_FILTER_BITS_PER_KEY + 7) / 8;
}

/*
 * Bytes before a block's frame, as its header at data says: the header,
 * and the time, bounds and key filter if the block has them.
 */
static uint64
block_body_offset(const char *data)
{
	return block_prefix_size(data) +
		(has_key_filter(data) ? key_filter_size(get_le(data + H_NUPDATES, 4)) : 0);
}

/*
 * True if the header at data is of a version we read: its version byte
 * known, no flag after it but those we know, and the two after that zero
 * unless they hold a bounded block's bounds size.
 */
static bool
known_version(const char *data)
{
	if (((uint8) data[H_FLAGS] & ~(PS_BLOCK_POSITIVE | PS_BLOCK_KEY_FILTER)) != 0)
		return false;
	if (is_bounded(data))
		return true;
	return ((uint8) data[H_VERSION] == PS_PART_VERSION ||
			(uint8) data[H_VERSION] == PS_PART_VERSION_ONE_TIME) &&
		get_le(data + H_BOUNDS, 2) == 0;
}

/*
 * Fewest raw bytes of an update in the block whose header is at data: a
 * byte each for its key length, val length, diff and (with times) time.
 */
static uint64
min_update_raw(const char *data)
{
	return (uint8) data[H_VERSION] == PS_PART_VERSION ? 4 : 3;
}

/* Bytes of the bounds of a block whose first and last updates these are. */
static uint64
bounds_size(const PsUpdate *first, const PsUpdate *last)
{
	return varint_len(first->key_len) + varint_len(first->val_len) +
		varint_len(last->key_len) + varint_len(last->val_len) +
		(uint64) first->key_len + first->val_len + last->key_len + last->val_len;
}

/* Writes the bounds of first and last at p (bounds_size bytes). */
static void
write_bounds(char *p, const PsUpdate *first, const PsUpdate *last)
{
	p += varint_put(p, first->key_len);
	p += varint_put(p, first->val_len);
	p += varint_put(p, last->key_len);
	p += varint_put(p, last->val_len);
	memcpy(p, first->key, first->key_len);
	p += first->key_len;
	memcpy(p, first->val, first->val_len);
	p += first->val_len;
	memcpy(p, last->key, last->key_len);
	p += last->key_len;
	memcpy(p, last->val, last->val_len);
}

/* Points bound u at a key of key_len bytes at p and the val after it, at time. */
static inline void
set_bound(PsUpdate *u, const char *p, uint64 key_len, uint64 val_len,
		  int64 time)
{
	u->key = p;
	u->key_len = (uint32) key_len;
	u->val = p + key_len;
	u->val_len = (uint32) val_len;
	u->time = time;
	u->diff = 0;
}

/*
 * Reads the bounds of the bounded block at data (whose header says how
 * many bytes they take, all of them present) into first and last, which
 * point into data, at the block's time with no diff; either may be NULL.
 * False if they are malformed.
 */
static bool
parse_bounds(const char *data, PsUpdate *first, PsUpdate *last)
{
	const char *p = data + H_FIRST;
	const char *end = p + get_le(data + H_BOUNDS, 2);
	uint64		len[4];
	uint64		total = 0;
	int64		time = (int64) get_le(data + H_TIME, PS_PART_TIME_SIZE);

	for (int i = 0; i < 4; i++)
	{
		if (!varint_get(&p, end, &len[i]) || len[i] > PS_PART_BOUNDS_MAX)
			return false;
		total += len[i];
	}
	if (total != (uint64) (end - p))
		return false;
	if (first)
		set_bound(first, p, len[0], len[1], time);
	if (last)
		set_bound(last, p + len[0] + len[1], len[2], len[3], time);
	return true;
}

/* True if updates[i] has the key of the update before it. */
static inline bool
key_repeats(const PsUpdate *updates, int64 i)
{
	return i > 0 && updates[i].key_len == updates[i - 1].key_len &&
		memcmp(updates[i].key, updates[i - 1].key, updates[i].key_len) == 0;
}

/* The filter bit a step past bit `at`, in a filter of nbits bits. */
static inline uint32
next_probe(uint32 at, uint32 step, uint32 nbits)
{
	at += step;
	return at >= nbits ? at - nbits : at;
}

/*
 * Where the probes of key in a filter of nbits bits start, and their step
 * (double hashing of one 64-bit hash: never 0, below nbits).
 */
static inline void
key_filter_probes(const char *key, uint32 key_len, uint32 nbits,
				  uint32 *at, uint32 *step)
{
	uint64		h = hash_bytes_extended((const unsigned char *) key,
										(int) key_len, PS_KEY_FILTER_SEED);

	*at = (uint32) h % nbits;
	*step = 1 + (uint32) (h >> 32) % (nbits - 1);
}

/*
 * True if key may be one of the keys the filter was made of; false if it
 * is certainly not.
 */
bool
ps_key_filter_may_hold(const PsKeyFilter *filter, const char *key,
					   uint32 key_len)
{
	uint32		nbits = filter->nbytes * 8;
	uint32		at;
	uint32		step;

	key_filter_probes(key, key_len, nbits, &at, &step);
	for (uint32 i = 0; i < filter->nhashes; i++)
	{
		if ((filter->bits[at / 8] & (1 << (at % 8))) == 0)
			return false;
		at = next_probe(at, step, nbits);
	}
	return true;
}

/*
 * Writes the key filter of n sorted updates at p (key_filter_size(n)
 * bytes): PS_KEY_FILTER_HASHES bits set per distinct key.
 */
static void
write_key_filter(char *p, const PsUpdate *updates, int n)
{
	uint8	   *bits = (uint8 *) p + 1;
	uint32		nbytes = (uint32) key_filter_size(n) - 1;
	uint32		nbits = nbytes * 8;

	p[0] = PS_KEY_FILTER_HASHES;
	memset(bits, 0, nbytes);
	for (int i = 0; i < n; i++)
	{
		uint32		at;
		uint32		step;

		if (key_repeats(updates, i))
			continue;
		key_filter_probes(updates[i].key, updates[i].key_len, nbits, &at, &step);
		for (int h = 0; h < PS_KEY_FILTER_HASHES; h++)
		{
			bits[at / 8] |= 1 << (at % 8);
			at = next_probe(at, step, nbits);
		}
	}
}

/*
 * Points filter at the key filter of the block at data, whose header says
 * it has one and whose bytes are all present.
 */
static void
parse_key_filter(const char *data, PsKeyFilter *filter)
{
	const char *p = key_filter_at(data);

	filter->nhashes = (uint8) p[0];
	filter->bits = (const uint8 *) p + 1;
	filter->nbytes = (uint32) key_filter_size(get_le(data + H_NUPDATES, 4)) - 1;
}

/*
 * Checks that the key filter of the block at data, if it has one, holds
 * every key of its n updates; false with *errmsg if not.
 */
static bool
check_key_filter(const char *data, const PsUpdate *updates, uint32 n,
				 const char **errmsg)
{
	PsKeyFilter filter;

	if (!has_key_filter(data))
		return true;
	parse_key_filter(data, &filter);
	for (uint32 i = 0; i < n; i++)
	{
		if (key_repeats(updates, i))
			continue;
		if (!ps_key_filter_may_hold(&filter, updates[i].key, updates[i].key_len))
		{
			*errmsg = "part block key filter does not hold a key of the block";
			return false;
		}
	}
	return true;
}

/*
 * Writes the raw columns of n updates into buf (block_raw_size bytes); a
 * one_time block's have no times.
 */
static void
write_columns(char *buf, const PsUpdate *updates, int n, bool one_time)
{
	char	   *p = buf;
	int64		prev = 0;

	for (int i = 0; i < n; i++)
		p += varint_put(p, updates[i].key_len);
	for (int i = 0; i < n; i++)
	{
		memcpy(p, updates[i].key, updates[i].key_len);
		p += updates[i].key_len;
	}
	for (int i = 0; i < n; i++)
		p += varint_put(p, updates[i].val_len);
	for (int i = 0; i < n; i++)
	{
		memcpy(p, updates[i].val, updates[i].val_len);
		p += updates[i].val_len;
	}
	for (int i = 0; i < n && !one_time; i++)
	{
		p += varint_put(p, zigzag((int64) ((uint64) updates[i].time - (uint64) prev)));
		prev = updates[i].time;
	}
	for (int i = 0; i < n; i++)
		p += varint_put(p, zigzag(updates[i].diff));
}

/*
 * The hash table size (log2 of its slots) for zstd's fastest levels, 2 and
 * below.  For blocks of our size they hash into 2^13 (level 1) to 2^15
 * slots; 2^16 (256 kB) finds the same matches with fewer collisions: at
 * the same ratio, test/unit/codec_bench encodes the sustained workload's
 * rows with spread keys about a fifth faster, those with prefixed keys as
 * fast.  Levels 3 and up already use 2^16 or more.
 */
#define FAST_LEVEL_HASH_LOG		16

/*
 * Compresses raw_size bytes at raw into dst (capacity bound) at zstd level
 * `level`; returns the compressed size or a zstd error code.
 */
static size_t
compress_block(ZSTD_CCtx *cxt, char *dst, size_t bound, const char *raw,
			   size_t raw_size, int level)
{
	size_t		r;

	r = ZSTD_CCtx_reset(cxt, ZSTD_reset_session_and_parameters);
	if (!ZSTD_isError(r))
		r = ZSTD_CCtx_setParameter(cxt, ZSTD_c_compressionLevel, level);
	if (!ZSTD_isError(r) && level <= 2)
		r = ZSTD_CCtx_setParameter(cxt, ZSTD_c_hashLog, FAST_LEVEL_HASH_LOG);
	if (ZSTD_isError(r))
		return r;
	return ZSTD_compress2(cxt, dst, bound, raw, raw_size);
}

/* The process's compression context; NULL if it cannot be allocated. */
static ZSTD_CCtx *
compress_context(void)
{
	if (compress_cxt == NULL)
		compress_cxt = ZSTD_createCCtx();
	return compress_cxt;
}

/* The process's decompression context; NULL if it cannot be allocated. */
static ZSTD_DCtx *
decompress_context(void)
{
	if (decompress_cxt == NULL)
		decompress_cxt = ZSTD_createDCtx();
	return decompress_cxt;
}

/*
 * CRC-32C of the block of len bytes at part: its header up to the CRC
 * field, then everything after the header (its time, if any, and frame).
 */
static uint32
part_crc(const char *part, uint64 len)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, part, H_CRC);
	COMP_CRC32C(crc, part + PS_PART_HEADER_SIZE, len - PS_PART_HEADER_SIZE);
	FIN_CRC32C(crc);
	return (uint32) crc;
}

/* True if every diff of the n updates is above 0 and they sum to a bigint. */
static bool
diffs_positive(const PsUpdate *updates, uint32 n)
{
	int64		sum = 0;

	for (uint32 i = 0; i < n; i++)
		if (updates[i].diff <= 0 || pg_add_s64_overflow(sum, updates[i].diff, &sum))
			return false;
	return true;
}

/*
 * Encodes n sorted, consolidated updates as one block compressed at zstd
 * level `level`: a one-time block if they are all at one time.  Returns
 * the palloc'd block and fills info, or NULL with *errmsg.
 */
static char *
encode_block(const PsUpdate *updates, int n, int level, PsPartInfo *info,
			 const char **errmsg)
{
	size_t		bound;
	size_t		comp;
	char	   *raw;
	char	   *part;
	uint64		diff_sum = 0;
	bool		positive;
	bool		one_time = n > 0 && all_one_time(updates, n);
	uint64		raw_size = block_raw_size(updates, n, one_time);
	uint64		bounds = 0;
	uint64		filter = raw_size >= PS_PART_FILTERED_MIN_RAW ? key_filter_size(n) : 0;
	uint64		body = one_time ? H_FIRST : PS_PART_HEADER_SIZE;
	ZSTD_CCtx  *cxt = compress_context();

	if (cxt == NULL)
	{
		*errmsg = "out of memory for a zstd compression context";
		return NULL;
	}
	if (one_time && raw_size >= PS_PART_BOUNDED_MIN_RAW)
	{
		bounds = bounds_size(&updates[0], &updates[n - 1]);
		if (bounds > PS_PART_BOUNDS_MAX)
			bounds = 0;
		body += bounds;
	}
	body += filter;
	raw = palloc(raw_size + 1);
	write_columns(raw, updates, n, one_time);

	bound = ZSTD_compressBound(raw_size);
	part = palloc(body + bound);
	comp = compress_block(cxt, part + body, bound, raw, raw_size, level);
	pfree(raw);
	if (ZSTD_isError(comp))
	{
		pfree(part);
		*errmsg = ZSTD_getErrorName(comp);
		return NULL;
	}

	for (int i = 0; i < n; i++)
		diff_sum += (uint64) updates[i].diff;
	positive = diffs_positive(updates, n);

	memset(part, 0, PS_PART_HEADER_SIZE);
	put_le(part + H_MAGIC, PS_PART_MAGIC, 4);
	part[H_VERSION] = bounds > 0 ? PS_PART_VERSION_BOUNDED :
		one_time ? PS_PART_VERSION_ONE_TIME : PS_PART_VERSION;
	part[H_FLAGS] = (positive ? PS_BLOCK_POSITIVE : 0) |
		(filter > 0 ? PS_BLOCK_KEY_FILTER : 0);
	put_le(part + H_NUPDATES, (uint64) n, 4);
	put_le(part + H_RAW, raw_size, 4);
	put_le(part + H_COMP, comp, 4);
	put_le(part + H_DIFFSUM, diff_sum, 8);
	if (one_time)
		put_le(part + H_TIME, (uint64) updates[0].time, PS_PART_TIME_SIZE);
	if (bounds > 0)
	{
		put_le(part + H_BOUNDS, bounds, 2);
		write_bounds(part + H_FIRST, &updates[0], &updates[n - 1]);
	}
	if (filter > 0)
		write_key_filter(part + body - filter, updates, n);
	put_le(part + H_CRC, part_crc(part, body + comp), 4);

	info->nupdates = n;
	info->raw_size = raw_size;
	info->encoded_size = body + comp;
	info->diff_sum = (int64) diff_sum;
	info->checksum = (uint32) get_le(part + H_CRC, 4);
	info->maybe_nonpositive = !positive;
	info->maybe_repeating = !one_time && ps_updates_repeat_keyval(updates, n);
	return part;
}

/*
 * The checksum of a part: that of its first block, then, block after
 * block, the CRC-32C of the checksum so far and the next block's.
 */
uint32
ps_part_chain_checksum(uint32 sofar, uint32 block_checksum, bool first)
{
	char		both[8];
	pg_crc32c	crc;

	if (first)
		return block_checksum;
	put_le(both, sofar, 4);
	put_le(both + 4, block_checksum, 4);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, both, sizeof(both));
	FIN_CRC32C(crc);
	return (uint32) crc;
}

/* How many of the n updates (at least one) the next block holds, and their raw bytes. */
static int
next_block_updates(const PsUpdate *updates, int n, uint64 *raw_size)
{
	int64		prev = 0;
	int			k = 0;

	*raw_size = 0;
	while (k < n)
	{
		uint64		size = update_raw_size(&updates[k], prev);

		if (k > 0 && *raw_size + size > PS_PART_BLOCK_RAW)
			break;
		*raw_size += size;
		prev = updates[k].time;
		k++;
	}
	return k;
}

/* Adds a block's info to a part's. */
void
ps_part_add_block_info(PsPartInfo *part, const PsPartInfo *block, bool first)
{
	int64		sum;

	/* positive blocks make a positive part while their sum is a bigint */
	if (block->maybe_nonpositive ||
		pg_add_s64_overflow(first ? 0 : part->diff_sum, block->diff_sum, &sum))
		part->maybe_nonpositive = true;
	part->maybe_repeating = (!first && part->maybe_repeating) ||
		block->maybe_repeating;
	part->nupdates += block->nupdates;
	part->raw_size += block->raw_size;
	part->encoded_size += block->encoded_size;
	part->diff_sum = (int64) ((uint64) part->diff_sum + (uint64) block->diff_sum);
	part->checksum = ps_part_chain_checksum(part->checksum, block->checksum, first);
}

/*
 * Encodes n sorted, consolidated updates as a part of blocks of at most
 * PS_PART_BLOCK_RAW raw bytes (or one update) each, compressed at zstd
 * level `level`.  Returns the palloc'd part and fills info, or NULL with
 * *errmsg.
 */
char *
ps_part_encode(const PsUpdate *updates, int n, int level, PsPartInfo *info,
			   const char **errmsg)
{
	char	   *part = NULL;
	uint64		capacity = 0;
	int			done = 0;

	if (ps_part_raw_size(updates, n) > PS_PART_MAX_RAW ||
		(uint64) n > PS_PART_MAX_UPDATES)
	{
		*errmsg = "updates too large for one part";
		return NULL;
	}
	memset(info, 0, sizeof(PsPartInfo));
	do
	{
		uint64		raw_size;
		int			k = next_block_updates(&updates[done], n - done, &raw_size);
		PsPartInfo	binfo;
		char	   *block = encode_block(&updates[done], k, level, &binfo, errmsg);

		if (block == NULL)
		{
			if (part)
				pfree(part);
			return NULL;
		}
		if (part == NULL)
		{
			/* most parts are one block: keep it as the part */
			part = block;
			capacity = binfo.encoded_size;
		}
		else
		{
			if (info->encoded_size + binfo.encoded_size > capacity)
			{
				capacity = Max(capacity * 2, info->encoded_size + binfo.encoded_size);
				part = repalloc(part, capacity);
			}
			memcpy(part + info->encoded_size, block, binfo.encoded_size);
			pfree(block);
		}
		ps_part_add_block_info(info, &binfo, done == 0);
		if (done > 0 && ps_update_same_keyval(&updates[done - 1], &updates[done]))
			info->maybe_repeating = true;
		done += k;
	} while (done < n);
	return part;
}

/* Reads n varint lengths and points each update's bytes into the raw buffer. */
static bool
read_bytes_column(const char **p, const char *end, PsUpdate *updates,
				  uint32 n, bool is_key)
{
	uint64		total = 0;
	uint64		len;
	const char *data;

	for (uint32 i = 0; i < n; i++)
	{
		if (!varint_get(p, end, &len) || len > PS_PART_MAX_RAW)
			return false;
		if (is_key)
			updates[i].key_len = (uint32) len;
		else
			updates[i].val_len = (uint32) len;
		total += len;
	}
	if (total > (uint64) (end - *p))
		return false;
	data = *p;
	for (uint32 i = 0; i < n; i++)
	{
		if (is_key)
		{
			updates[i].key = data;
			data += updates[i].key_len;
		}
		else
		{
			updates[i].val = data;
			data += updates[i].val_len;
		}
	}
	*p = data;
	return true;
}

/*
 * Parses the raw columns into updates; a one-time block's have no times,
 * its updates are all at `time`.  False if they are malformed.
 */
static bool
parse_columns(const char *raw, uint64 raw_size, PsUpdate *updates, uint32 n,
			  bool one_time, int64 time, const char **errmsg)
{
	const char *p = raw;
	const char *end = raw + raw_size;
	int64		prev = 0;
	uint64		v;

	*errmsg = "malformed part columns";
	if (!read_bytes_column(&p, end, updates, n, true) ||
		!read_bytes_column(&p, end, updates, n, false))
		return false;
	for (uint32 i = 0; i < n; i++)
	{
		if (one_time)
		{
			updates[i].time = time;
			continue;
		}
		if (!varint_get(&p, end, &v))
			return false;
		updates[i].time = (int64) ((uint64) prev + (uint64) unzigzag(v));
		prev = updates[i].time;
	}
	for (uint32 i = 0; i < n; i++)
	{
		if (!varint_get(&p, end, &v))
			return false;
		updates[i].diff = unzigzag(v);
	}
	if (p != end)
	{
		*errmsg = "part columns have trailing bytes";
		return false;
	}
	return true;
}

/*
 * Checks that updates are strictly ordered, without zero diffs, sum up,
 * and are positive if their block says so.
 */
static bool
check_order(const PsUpdate *updates, uint32 n, int64 diff_sum, bool positive,
			const char **errmsg)
{
	uint64		sum = 0;

	for (uint32 i = 0; i < n; i++)
	{
		if (updates[i].diff == 0)
		{
			*errmsg = "part holds a zero diff";
			return false;
		}
		if (i > 0 && ps_update_cmp_kvt(&updates[i - 1], &updates[i]) >= 0)
		{
			*errmsg = "part is not sorted and consolidated";
			return false;
		}
		sum += (uint64) updates[i].diff;
	}
	if ((int64) sum != diff_sum)
	{
		*errmsg = "part diff sum does not match its header";
		return false;
	}
	if (positive && !diffs_positive(updates, n))
	{
		*errmsg = "part block says its diffs are positive, and they are not";
		return false;
	}
	return true;
}

/* Validates a part's header against its length; false with *errmsg. */
static bool
check_header(const char *data, uint64 len, const char **errmsg)
{
	if (len < PS_PART_HEADER_SIZE)
		*errmsg = "part is shorter than its header";
	else if ((uint32) get_le(data + H_MAGIC, 4) != PS_PART_MAGIC)
		*errmsg = "part has a bad magic number";
	else if (!known_version(data))
		*errmsg = "part has an unknown format version";
	else if (len < block_body_offset(data) ||
			 get_le(data + H_COMP, 4) != len - block_body_offset(data))
		*errmsg = "part length does not match its header";
	else if ((uint32) get_le(data + H_CRC, 4) != part_crc(data, len))
		*errmsg = "part checksum mismatch";
	else if (get_le(data + H_RAW, 4) > PS_PART_MAX_RAW)
		*errmsg = "part raw size out of range";
	else if (get_le(data + H_NUPDATES, 4) >
			 get_le(data + H_RAW, 4) / min_update_raw(data) ||
			 get_le(data + H_NUPDATES, 4) > PS_PART_MAX_UPDATES)
		*errmsg = "part update count out of range";
	else if (is_bounded(data) &&
			 (get_le(data + H_NUPDATES, 4) == 0 || !parse_bounds(data, NULL, NULL)))
		*errmsg = "part block bounds are malformed";
	else if (has_key_filter(data) &&
			 (get_le(data + H_NUPDATES, 4) == 0 ||
			  (uint8) *key_filter_at(data) == 0 ||
			  (uint8) *key_filter_at(data) > PS_KEY_FILTER_HASHES_MAX))
		*errmsg = "part block key filter is malformed";
	else
		return true;
	return false;
}

/* True if update u has the key and val of bound b. */
static bool
matches_bound(const PsUpdate *u, const PsUpdate *b)
{
	return u->key_len == b->key_len && u->val_len == b->val_len &&
		memcmp(u->key, b->key, b->key_len) == 0 &&
		memcmp(u->val, b->val, b->val_len) == 0;
}

/*
 * Encoded bytes of the block whose header starts at data (avail bytes
 * readable there): its header and frame.  0 with *errmsg if that is not a
 * block's header or the block runs past avail.
 */
uint64
ps_part_block_length(const char *data, uint64 avail, const char **errmsg)
{
	uint64		len;

	if (avail < PS_PART_HEADER_SIZE)
		*errmsg = "part is shorter than its header";
	else if ((uint32) get_le(data + H_MAGIC, 4) != PS_PART_MAGIC)
		*errmsg = "part has a bad magic number";
	else if (!known_version(data))
		*errmsg = "part has an unknown format version";
	else if ((len = block_body_offset(data) + get_le(data + H_COMP, 4)) > avail)
		*errmsg = "part length does not match its header";
	else
		return len;
	return 0;
}

/*
 * Decompresses and parses the block of len bytes at data into raw (its
 * header's raw size) and updates (its header's update count), and checks
 * their order; false with *errmsg.
 */
static bool
decode_block_into(const char *data, uint64 len, char *raw, PsUpdate *updates,
				  const char **errmsg)
{
	uint32		n = (uint32) get_le(data + H_NUPDATES, 4);
	uint64		raw_size = get_le(data + H_RAW, 4);
	uint64		body = block_body_offset(data);
	int64		time = 0;
	size_t		got;
	ZSTD_DCtx  *cxt = decompress_context();

	if (cxt == NULL)
	{
		*errmsg = "out of memory for a zstd decompression context";
		return false;
	}
	got = ZSTD_decompressDCtx(cxt, raw, raw_size, data + body, len - body);
	if (ZSTD_isError(got) || got != raw_size)
	{
		*errmsg = ZSTD_isError(got) ? "part frame does not decompress" :
			"part raw size does not match its header";
		return false;
	}
	(void) ps_part_block_one_time(data, len, &time);
	if (!parse_columns(raw, raw_size, updates, n,
					   is_one_time(data), time, errmsg) ||
		!check_order(updates, n, (int64) get_le(data + H_DIFFSUM, 8),
					 ((uint8) data[H_FLAGS] & PS_BLOCK_POSITIVE) != 0, errmsg))
		return false;
	if (is_bounded(data))
	{
		PsUpdate	first;
		PsUpdate	last;

		(void) parse_bounds(data, &first, &last);
		if (!matches_bound(&updates[0], &first) ||
			!matches_bound(&updates[n - 1], &last))
		{
			*errmsg = "part block bounds do not match its updates";
			return false;
		}
	}
	return true;
}

/* A block's info as its (checked) header gives it. */
static void
header_info(const char *data, uint64 len, PsPartInfo *info)
{
	info->nupdates = get_le(data + H_NUPDATES, 4);
	info->raw_size = get_le(data + H_RAW, 4);
	info->encoded_size = len;
	info->diff_sum = (int64) get_le(data + H_DIFFSUM, 8);
	info->checksum = (uint32) get_le(data + H_CRC, 4);
	info->maybe_nonpositive = ((uint8) data[H_FLAGS] & PS_BLOCK_POSITIVE) == 0;
	info->maybe_repeating = (uint8) data[H_VERSION] == PS_PART_VERSION;
}

/*
 * Checks one block of exactly len bytes at data (header, checksum, sizes,
 * bounds) without decompressing it, and fills info (the block's own);
 * false with *errmsg if it is damaged.
 */
bool
ps_part_check_block(const char *data, uint64 len, PsPartInfo *info,
					const char **errmsg)
{
	if (!check_header(data, len, errmsg))
		return false;
	/* a frame must declare the size the header claims before we allocate it */
	if (ZSTD_getFrameContentSize(data + block_body_offset(data),
								 len - block_body_offset(data)) != get_le(data + H_RAW, 4))
	{
		*errmsg = "part frame size does not match its header";
		return false;
	}
	header_info(data, len, info);
	return true;
}

/*
 * Decodes and validates the block of exactly len bytes at data, checked
 * before by ps_part_check_block (which gave info), into out.  Returns false
 * with *errmsg, and nothing allocated, if it is damaged.
 */
bool
ps_part_decode_checked_block(const char *data, uint64 len,
							 const PsPartInfo *info, PsDecodedPart *out,
							 const char **errmsg)
{
	out->raw = palloc(info->raw_size + 1);
	out->updates = palloc(sizeof(PsUpdate) * Max(info->nupdates, 1));
	out->nupdates = (uint32) info->nupdates;
	if (decode_block_into(data, len, out->raw, out->updates, errmsg))
		return true;
	ps_decoded_part_free(out);
	return false;
}

/*
 * Decodes and validates one block of exactly len bytes at data into out
 * and info (the block's own).  Returns false with *errmsg, and nothing
 * allocated, if it is damaged.
 */
bool
ps_part_decode_block(const char *data, uint64 len, PsDecodedPart *out,
					 PsPartInfo *info, const char **errmsg)
{
	return ps_part_check_block(data, len, info, errmsg) &&
		ps_part_decode_checked_block(data, len, info, out, errmsg);
}

/*
 * Extends info by the blocks of len bytes at data, each checked first if
 * check (else only its length is), and fails if the part would grow too
 * large; false with *errmsg.
 */
static bool
chain_blocks(PsPartInfo *info, const char *data, uint64 len, bool check,
			 const char **errmsg)
{
	uint64		off = 0;

	do
	{
		uint64		blen = ps_part_block_length(data + off, len - off, errmsg);
		PsPartInfo	binfo;

		if (blen == 0 ||
			(check && !ps_part_check_block(data + off, blen, &binfo, errmsg)))
			return false;
		Assert(check || ps_part_check_block(data + off, blen, &binfo, errmsg));
		header_info(data + off, blen, &binfo);
		ps_part_add_block_info(info, &binfo, info->encoded_size == 0);
		if (info->raw_size > PS_PART_MAX_RAW || info->nupdates > PS_PART_MAX_UPDATES)
		{
			*errmsg = "part update count out of range";
			return false;
		}
		off += blen;
	} while (off < len);
	return true;
}

/*
 * Extends info, that of a part being assembled (all zero for an empty
 * one), by the blocks of the encoded part of len bytes at data, as if they
 * followed its last block; each block's header is checked.  The caller
 * appends the bytes themselves and makes sure their updates sort after the
 * part's.  False with *errmsg if data is not one or more blocks or the part
 * would grow too large.
 */
bool
ps_part_append_blocks(PsPartInfo *info, const char *data, uint64 len,
					  const char **errmsg)
{
	return chain_blocks(info, data, len, true, errmsg);
}

/*
 * As ps_part_append_blocks, for blocks this process encoded, or read and
 * checked, itself: their headers are taken as they are, without checking
 * checksums and frames a second time.  False with *errmsg only if the part
 * would grow too large (or data is not whole blocks).
 */
bool
ps_part_append_checked_blocks(PsPartInfo *info, const char *data, uint64 len,
							  const char **errmsg)
{
	return chain_blocks(info, data, len, false, errmsg);
}

/*
 * Checks every block of the part of len bytes at data and adds up their
 * infos into info; false with *errmsg.
 */
static bool
check_blocks(const char *data, uint64 len, PsPartInfo *info, const char **errmsg)
{
	memset(info, 0, sizeof(PsPartInfo));
	return ps_part_append_blocks(info, data, len, errmsg);
}

/*
 * Decodes and validates a part, all its blocks, their key filters too
 * (which decoding one block leaves to this and to lookups' tests: a
 * filter matters only to a lookup of one key).  On success fills out (and
 * info, if not NULL) and returns true; otherwise returns false with
 * *errmsg and leaves nothing allocated.
 */
bool
ps_part_decode(const char *data, uint64 len, PsDecodedPart *out,
			   PsPartInfo *info, const char **errmsg)
{
	PsPartInfo	total;
	uint64		off = 0;
	uint64		raw_off = 0;
	uint32		n = 0;

	if (!check_blocks(data, len, &total, errmsg))
		return false;
	out->raw = palloc(total.raw_size + 1);
	out->updates = palloc(sizeof(PsUpdate) * Max(total.nupdates, 1));
	out->nupdates = (uint32) total.nupdates;
	while (off < len)
	{
		uint64		blen = block_body_offset(data + off) +
			get_le(data + off + H_COMP, 4);
		uint32		bn = (uint32) get_le(data + off + H_NUPDATES, 4);

		if (!decode_block_into(data + off, blen, out->raw + raw_off,
							   out->updates + n, errmsg) ||
			!check_key_filter(data + off, out->updates + n, bn, errmsg))
		{
			ps_decoded_part_free(out);
			return false;
		}
		/* blocks follow each other in order */
		if (n > 0 && bn > 0 &&
			ps_update_cmp_kvt(&out->updates[n - 1], &out->updates[n]) >= 0)
		{
			*errmsg = "part is not sorted and consolidated";
			ps_decoded_part_free(out);
			return false;
		}
		raw_off += get_le(data + off + H_RAW, 4);
		n += bn;
		off += blen;
	}
	if (info)
		*info = total;
	return true;
}

/*
 * True, with *time, if the block of len bytes at data (checked before) is
 * a one-time block.
 */
bool
ps_part_block_one_time(const char *data, uint64 len, int64 *time)
{
	if (len < H_FIRST ||
		((uint8) data[H_VERSION] != PS_PART_VERSION_ONE_TIME && !is_bounded(data)))
		return false;
	*time = (int64) get_le(data + H_TIME, PS_PART_TIME_SIZE);
	return true;
}

/*
 * True, with its first and last update (key, val and time; no diff),
 * which point into data, if the block of len bytes at data (checked
 * before) is a bounded block.
 */
bool
ps_part_block_bounds(const char *data, uint64 len, PsUpdate *first,
					 PsUpdate *last)
{
	if (len < H_FIRST || !is_bounded(data))
		return false;
	return parse_bounds(data, first, last);
}

/*
 * True, with *filter pointing into data, if the block of len bytes at
 * data (checked before) carries a key filter.
 */
bool
ps_part_block_key_filter(const char *data, uint64 len, PsKeyFilter *filter)
{
	if (!has_key_filter(data))
		return false;
	Assert(len >= block_body_offset(data));
	parse_key_filter(data, filter);
	return true;
}

/*
 * Moves the updates of the one-time block of len bytes at data to `time`,
 * in place: its time and checksum are rewritten, its frame is not.  Fills
 * info (the block's).  False with *errmsg if it is not a sound one-time
 * block.
 */
bool
ps_part_block_retime(char *data, uint64 len, int64 time, PsPartInfo *info,
					 const char **errmsg)
{
	int64		old;

	if (!ps_part_check_block(data, len, info, errmsg))
		return false;
	if (!ps_part_block_one_time(data, len, &old))
	{
		*errmsg = "block is not of one time";
		return false;
	}
	put_le(data + H_TIME, (uint64) time, PS_PART_TIME_SIZE);
	put_le(data + H_CRC, part_crc(data, len), 4);
	info->checksum = (uint32) get_le(data + H_CRC, 4);
	return true;
}

/* Frees a decoded part. */
void
ps_decoded_part_free(PsDecodedPart *part)
{
	if (part->raw)
		pfree(part->raw);
	if (part->updates)
		pfree(part->updates);
	part->raw = NULL;
	part->updates = NULL;
	part->nupdates = 0;
}
