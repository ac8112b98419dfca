/*-------------------------------------------------------------------------
 *
 * codec_test.c
 *	  Stand-alone tests of the pure codecs: update sorting and
 *	  consolidation, the part codec and the state codec.
 *
 * Built as frontend code, outside the server (see Makefile).  Every case
 * is driven by a seeded PRNG or fixed data; a failure prints its group,
 * its case (with the seed) and the failed check.  To rerun one seed of the
 * seeded groups:
 *
 *	  codec_test [nseeds [first_seed]]
 *
 * The last line of output is "N passed, M failed", counting cases.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <zstd.h>

#include "common/hashfn.h"
#include "common/int128.h"
#include "common/pg_prng.h"
#include "lib/stringinfo.h"
#include "codec/part.h"
#include "codec/state.h"

#include "../codec_bytes.h"

/* Where a one-time (version 2 or 3) block keeps its time: right after its header */
#define PH_ONE_TIME		PS_PART_HEADER_SIZE
/* Where a bounded (version 3) block's header keeps its bounds' size, and its bounds */
#define PH_BOUNDS		6
#define PH_FIRST		(PH_ONE_TIME + PS_PART_TIME_SIZE)

/* Fixed bytes of a state (envelope, fields, counts, CRC) and of its parts */
#define STATE_FIXED_BYTES	42
#define BATCH_FIXED_BYTES	29
#define PART_FIXED_BYTES	38

/* Most failures printed per group */
#define MAX_REPORTS		10

/* Exchanges two variables of a type */
#define SWAP(type, a, b) \
	do { type swap_tmp_ = (a); (a) = (b); (b) = swap_tmp_; } while (0)

/* zstd levels the round trips use */
static const int levels[] = {1, 3, -1, 9};

/* Values that stress varints, zigzag and time deltas */
static const int64 edge_values[] = {
	0, 1, -1, 2, -2, 63, 64, -64, -65, 8191, 8192, -8193,
	PG_INT32_MAX, PG_INT32_MIN, PG_INT64_MAX, PG_INT64_MIN,
	PG_INT64_MAX - 1, PG_INT64_MIN + 1
};

/* Group and case bookkeeping */
static const char *group_name;
static int	group_cases;
static int	group_failed;
static int	group_reports;
static char group_note[128];
static char case_context[256];
static bool case_failed;
static const char *last_errmsg;
static int	total_passed;
static int	total_failed;

/* A sample encoding that the corruption groups damage */
typedef struct Sample
{
	const char *name;
	char	   *data;
	uint64		len;
} Sample;

#define NPART_SAMPLES	6
#define NSTATE_SAMPLES	4
static Sample part_samples[NPART_SAMPLES];
static Sample state_samples[NSTATE_SAMPLES];

/* Byte strings that generated updates point into */
typedef struct BytePool
{
	int			n;
	char	  **data;
	uint32	   *len;
} BytePool;


/* ---------------------------------------------------------------------
 * Harness
 * ---------------------------------------------------------------------
 */

/* Starts a test group. */
static void
group_begin(const char *name)
{
	group_name = name;
	group_cases = 0;
	group_failed = 0;
	group_reports = 0;
	group_note[0] = '\0';
}

/* Ends a test group and prints its line. */
static void
group_end(void)
{
	if (group_failed == 0)
		printf("ok   %-30s %6d cases%s\n", group_name, group_cases, group_note);
	else
		printf("FAIL %-30s %6d of %d cases failed%s\n", group_name,
			   group_failed, group_cases, group_note);
	fflush(stdout);
}

/* Starts a test case, described (with its seed, if any) for failure reports. */
static void
pg_attribute_printf(1, 2)
case_begin(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(case_context, sizeof(case_context), fmt, ap);
	va_end(ap);
	case_failed = false;
	last_errmsg = NULL;
}

/* Ends the current test case and counts it. */
static void
case_end(void)
{
	group_cases++;
	if (case_failed)
	{
		group_failed++;
		total_failed++;
	}
	else
		total_passed++;
}

/* Records a failed check of the current case; returns false. */
static bool
check_failed(int line, const char *expr)
{
	case_failed = true;
	if (group_reports++ < MAX_REPORTS)
		printf("  failed: %s [%s] line %d: %s%s%s\n", group_name, case_context,
			   line, expr, last_errmsg ? " -- errmsg: " : "",
			   last_errmsg ? last_errmsg : "");
	return false;
}

#define CHECK(cond) ((cond) ? true : check_failed(__LINE__, #cond))

/* Stops the program when the test's own setup goes wrong. */
static void
setup_failed(const char *what)
{
	printf("setup failed: %s\n", what);
	printf("%d passed, %d failed\n", total_passed, total_failed + 1);
	exit(1);
}


/* ---------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------
 */

/* Random integer in [0, n). */
static uint64
rnd(pg_prng_state *rng, uint64 n)
{
	return n <= 1 ? 0 : pg_prng_uint64_range(rng, 0, n - 1);
}

/* An int64 drawn from the edge values, a small range, or anywhere. */
static int64
random_int64(pg_prng_state *rng)
{
	switch (rnd(rng, 3))
	{
		case 0:
			return edge_values[rnd(rng, lengthof(edge_values))];
		case 1:
			return (int64) rnd(rng, 201) - 100;
		default:
			return pg_prng_int64(rng);
	}
}

/*
 * Copies len bytes into a malloc'd block of exactly len bytes, so that
 * valgrind reports any read past the end.  Free with free().
 */
static char *
exact_copy(const char *data, uint64 len)
{
	char	   *copy = malloc(len);

	if (copy == NULL && len > 0)
		setup_failed("out of memory");
	if (len > 0)
		memcpy(copy, data, len);
	return copy;
}

/* Bytes before a block's key filter: its header, and its time and bounds if it has them. */
static uint64
filter_offset(const char *block)
{
	switch ((uint8) block[PH_VERSION])
	{
		case PS_PART_VERSION_ONE_TIME:
			return PH_FIRST;
		case PS_PART_VERSION_BOUNDED:
			return PH_FIRST + load_le(block + PH_BOUNDS, 2);
		default:
			return PS_PART_HEADER_SIZE;
	}
}

/* Bytes before a block's frame: filter_offset, and its key filter if it has one. */
static uint64
frame_offset(const char *block)
{
	return filter_offset(block) +
		((uint8) block[PH_VERSION + 1] & PS_BLOCK_KEY_FILTER ?
		 1 + (load_le(block + PH_NUPDATES, 4) * PS_KEY_FILTER_BITS_PER_KEY + 7) / 8 : 0);
}

/*
 * Recomputes the CRC of a part: header bytes 0..27, then what follows the
 * header (the time of a one-time block, then the frame).
 */
static void
fix_part_crc(char *part, uint64 len)
{
	uint64		body = frame_offset(part) - PS_PART_HEADER_SIZE +
		load_le(part + PH_COMP, 4);

	/* the first block's time and frame, as its header says if they fit */
	if (body > len - PS_PART_HEADER_SIZE)
		body = len - PS_PART_HEADER_SIZE;
	store_le(part + PH_CRC,
			 crc_of(part, PH_CRC, part + PS_PART_HEADER_SIZE, body), 4);
}

/* Recomputes the CRC that closes a state. */
static void
fix_state_crc(char *data, uint64 len)
{
	store_le(data + len - 4, crc_of(data, len - 4, NULL, 0), 4);
}

/* True if errmsg is set and, when want is given, contains it. */
static bool
errmsg_has(const char *errmsg, const char *want)
{
	return errmsg != NULL && (want == NULL || strstr(errmsg, want) != NULL);
}


/* ---------------------------------------------------------------------
 * Reference model of update order, consolidation and raw columns
 * ---------------------------------------------------------------------
 */

/* Reference order of byte strings: unsigned bytes, then the shorter first. */
static int
ref_cmp_bytes(const char *a, uint32 alen, const char *b, uint32 blen)
{
	for (uint32 i = 0; i < alen && i < blen; i++)
	{
		unsigned char ca = (unsigned char) a[i];
		unsigned char cb = (unsigned char) b[i];

		if (ca != cb)
			return ca < cb ? -1 : 1;
	}
	return alen < blen ? -1 : (alen > blen ? 1 : 0);
}

/* Reference order of updates by (key, val). */
static int
ref_cmp_kv(const PsUpdate *a, const PsUpdate *b)
{
	int			c = ref_cmp_bytes(a->key, a->key_len, b->key, b->key_len);

	return c != 0 ? c : ref_cmp_bytes(a->val, a->val_len, b->val, b->val_len);
}

/* Reference order of updates by (key, val, time). */
static int
ref_cmp_kvt(const PsUpdate *a, const PsUpdate *b)
{
	int			c = ref_cmp_kv(a, b);

	if (c != 0)
		return c;
	return a->time < b->time ? -1 : (a->time > b->time ? 1 : 0);
}

/* qsort adapter for ref_cmp_kvt. */
static int
ref_qsort_cmp(const void *a, const void *b)
{
	return ref_cmp_kvt((const PsUpdate *) a, (const PsUpdate *) b);
}

/* Sign of a comparison result. */
static int
sign_of(int c)
{
	return (c > 0) - (c < 0);
}

/*
 * Sorts and consolidates updates in place the slow, obvious way, summing
 * in 128 bits.  Returns false if some total is outside the int64 range.
 */
static bool
ref_consolidate(PsUpdate *u, int *n)
{
	int			out = 0;
	int			i = 0;

	if (*n > 1)
		qsort(u, *n, sizeof(PsUpdate), ref_qsort_cmp);
	while (i < *n)
	{
		INT128		sum = int64_to_int128(0);
		int			j = i;

		while (j < *n && ref_cmp_kvt(&u[i], &u[j]) == 0)
			int128_add_int64(&sum, u[j++].diff);
		if (int128_compare(sum, int64_to_int128(PG_INT64_MAX)) > 0 ||
			int128_compare(sum, int64_to_int128(PG_INT64_MIN)) < 0)
			return false;
		if (int128_compare(sum, int64_to_int128(0)) != 0)
		{
			u[out] = u[i];
			u[out].diff = int128_to_int64(sum);
			out++;
		}
		i = j;
	}
	*n = out;
	return true;
}

/* Appends the LEB128 form of v. */
static void
ref_varint(StringInfo buf, uint64 v)
{
	do
	{
		uint8		b = v & 0x7F;

		v >>= 7;
		if (v != 0)
			b |= 0x80;
		appendStringInfoChar(buf, (char) b);
	} while (v != 0);
}

/* Zigzag: 0, -1, 1, -2, 2 ... map to 0, 1, 2, 3, 4 ... */
static uint64
ref_zigzag(int64 v)
{
	return v >= 0 ? (uint64) v * 2 : (uint64) (-(v + 1)) * 2 + 1;
}

/*
 * Appends the raw columns of n updates as part.h documents them: with a
 * time column, or without one (those of a one-time block).
 */
static void
ref_columns(StringInfo buf, const PsUpdate *u, int n, bool with_times)
{
	int64		prev = 0;

	for (int i = 0; i < n; i++)
		ref_varint(buf, u[i].key_len);
	for (int i = 0; i < n; i++)
		appendBinaryStringInfo(buf, u[i].key, u[i].key_len);
	for (int i = 0; i < n; i++)
		ref_varint(buf, u[i].val_len);
	for (int i = 0; i < n; i++)
		appendBinaryStringInfo(buf, u[i].val, u[i].val_len);
	for (int i = 0; i < n && with_times; i++)
	{
		/* the delta wraps around, like the codec's */
		ref_varint(buf, ref_zigzag((int64) ((uint64) u[i].time - (uint64) prev)));
		prev = u[i].time;
	}
	for (int i = 0; i < n; i++)
		ref_varint(buf, ref_zigzag(u[i].diff));
}

/* Sum of the diffs of n updates, wrapping around like the part header's. */
static int64
wrapping_diff_sum(const PsUpdate *u, int n)
{
	uint64		sum = 0;

	for (int i = 0; i < n; i++)
		sum += (uint64) u[i].diff;
	return (int64) sum;
}

/*
 * True if every diff of n updates is above 0 and they sum to a bigint: a
 * positive block or part (PS_BLOCK_POSITIVE), summed in 128 bits.
 */
static bool
ref_positive(const PsUpdate *u, int n)
{
	INT128		sum = int64_to_int128(0);

	for (int i = 0; i < n; i++)
	{
		if (u[i].diff <= 0)
			return false;
		int128_add_int64(&sum, u[i].diff);
	}
	return int128_compare(sum, int64_to_int128(PG_INT64_MAX)) <= 0;
}

/* True if two of n sorted updates share a key and val (at two times). */
static bool
ref_repeating(const PsUpdate *u, int n)
{
	for (int i = 1; i < n; i++)
		if (u[i].key_len == u[i - 1].key_len && u[i].val_len == u[i - 1].val_len &&
			memcmp(u[i].key, u[i - 1].key, u[i].key_len) == 0 &&
			memcmp(u[i].val, u[i - 1].val, u[i].val_len) == 0)
			return true;
	return false;
}

/* Checks that two arrays of updates are equal, field by field. */
static bool
updates_equal(const PsUpdate *a, const PsUpdate *b, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (!CHECK(a[i].key_len == b[i].key_len) ||
			!CHECK(a[i].val_len == b[i].val_len) ||
			!CHECK(memcmp(a[i].key, b[i].key, a[i].key_len) == 0) ||
			!CHECK(memcmp(a[i].val, b[i].val, a[i].val_len) == 0) ||
			!CHECK(a[i].time == b[i].time) ||
			!CHECK(a[i].diff == b[i].diff))
			return false;
	}
	return true;
}

/* Checks that two part infos are equal, field by field. */
static void
infos_equal(const PsPartInfo *a, const PsPartInfo *b)
{
	CHECK(a->nupdates == b->nupdates);
	CHECK(a->raw_size == b->raw_size);
	CHECK(a->encoded_size == b->encoded_size);
	CHECK(a->diff_sum == b->diff_sum);
	CHECK(a->checksum == b->checksum);
	CHECK(a->maybe_nonpositive == b->maybe_nonpositive);
}


/* ---------------------------------------------------------------------
 * Update generation
 * ---------------------------------------------------------------------
 */

/*
 * Fills a pool with n >= 4 byte strings: the empty string, "\0", "\0\0",
 * "\xff", then random strings over small or full alphabets.
 */
static void
pool_init(BytePool *pool, pg_prng_state *rng, int n)
{
	static const uint32 lens[] = {0, 1, 1, 2, 3, 4, 7, 8, 16, 31, 127, 128, 300};

	pool->n = n;
	pool->data = palloc(sizeof(char *) * n);
	pool->len = palloc(sizeof(uint32) * n);
	for (int i = 0; i < n; i++)
	{
		uint32		len;
		int			alphabet = (int) rnd(rng, 3);
		char	   *d;

		if (i < 4)
			len = (i == 0) ? 0 : (i == 2 ? 2 : 1);
		else
			len = lens[rnd(rng, lengthof(lens))];
		d = palloc(Max(len, 1));
		for (uint32 j = 0; j < len; j++)
		{
			if (i == 3)
				d[j] = (char) 0xFF;
			else if (i < 4)
				d[j] = 0;
			else if (alphabet == 0)
				d[j] = (char) ((const uint8[]) {0x00, 0x01, 0xFF})[rnd(rng, 3)];
			else if (alphabet == 1)
				d[j] = (char) ('a' + rnd(rng, 3));
			else
				d[j] = (char) rnd(rng, 256);
		}
		pool->data[i] = d;
		pool->len[i] = len;
	}
}

/* Frees a pool. */
static void
pool_free(BytePool *pool)
{
	for (int i = 0; i < pool->n; i++)
		pfree(pool->data[i]);
	pfree(pool->data);
	pfree(pool->len);
}

/*
 * Fills u[0..n) with random updates over the pools.  time_mode: 0 a narrow
 * range (many equal times), 1 edge values, 2 anywhere.  diff_mode: 0 small
 * non-zero, 1 small with zeros, 2 edge values (sums may overflow), 3 pairs
 * that cancel.  The result is shuffled.
 */
static void
gen_updates(pg_prng_state *rng, PsUpdate *u, int n, const BytePool *keys,
			const BytePool *vals, int time_mode, int diff_mode)
{
	for (int i = 0; i < n; i++)
	{
		int			k = (int) rnd(rng, keys->n);
		int			v = (int) rnd(rng, vals->n);

		if (diff_mode == 3 && i % 2 == 1)
		{
			/* the negation of the previous update (INT64_MIN has none) */
			u[i] = u[i - 1];
			u[i].diff = u[i - 1].diff == PG_INT64_MIN ? 1 : -u[i - 1].diff;
			continue;
		}
		u[i].key = keys->data[k];
		u[i].key_len = keys->len[k];
		u[i].val = vals->data[v];
		u[i].val_len = vals->len[v];
		if (time_mode == 0)
			u[i].time = (int64) rnd(rng, 5) - 2;
		else if (time_mode == 1)
			u[i].time = edge_values[rnd(rng, lengthof(edge_values))];
		else
			u[i].time = random_int64(rng);
		if (diff_mode == 0)
			u[i].diff = (1 + (int64) rnd(rng, 5)) * (pg_prng_bool(rng) ? 1 : -1);
		else if (diff_mode == 1)
			u[i].diff = (int64) rnd(rng, 7) - 3;
		else
			u[i].diff = random_int64(rng);
	}
	for (int i = n - 1; i > 0; i--)
	{
		int			j = (int) rnd(rng, i + 1);
		PsUpdate	t = u[i];

		u[i] = u[j];
		u[j] = t;
	}
}

/*
 * Sorts and consolidates updates with the codec's functions, for building
 * sample parts; the updates must not overflow.
 */
static void
sort_consolidate_or_die(PsUpdate *u, int *n)
{
	ps_updates_sort(u, *n);
	if (!ps_updates_consolidate(u, n))
		setup_failed("sample updates overflow");
}


/* ---------------------------------------------------------------------
 * Part round trips
 * ---------------------------------------------------------------------
 */

/* The CRC-32C of two checksums, little-endian, in order: a chain step. */
static uint32
crc_of_pair(uint32 first, uint32 second)
{
	char		both[8];

	store_le(both, first, 4);
	store_le(both + 4, second, 4);
	return crc_of(both, sizeof(both), NULL, 0);
}

/* True if there are updates and they are all at one time. */
static bool
ref_one_time(const PsUpdate *u, int n)
{
	for (int i = 1; i < n; i++)
		if (u[i].time != u[0].time)
			return false;
	return n > 0;
}

/*
 * Appends the bounds of a block whose first and last updates these are, as
 * part.h documents them: four varint lengths, then the bytes.
 */
static void
ref_bounds(StringInfo buf, const PsUpdate *first, const PsUpdate *last)
{
	ref_varint(buf, first->key_len);
	ref_varint(buf, first->val_len);
	ref_varint(buf, last->key_len);
	ref_varint(buf, last->val_len);
	appendBinaryStringInfo(buf, first->key, first->key_len);
	appendBinaryStringInfo(buf, first->val, first->val_len);
	appendBinaryStringInfo(buf, last->key, last->key_len);
	appendBinaryStringInfo(buf, last->val, last->val_len);
}

/*
 * Appends the key filter of n sorted updates as part.h documents it: its
 * hash count, then 10 bits an update, the bits of each distinct key set.
 */
static void
ref_key_filter(StringInfo buf, const PsUpdate *u, int n, int nhashes)
{
	uint32		nbytes = (uint32) (n * PS_KEY_FILTER_BITS_PER_KEY + 7) / 8;
	uint64		nbits = (uint64) nbytes * 8;
	uint8	   *bits = palloc0(nbytes);

	appendStringInfoChar(buf, (char) nhashes);
	for (int i = 0; i < n; i++)
	{
		uint64		h;
		uint64		a;
		uint64		s;

		if (i > 0 && u[i].key_len == u[i - 1].key_len &&
			memcmp(u[i].key, u[i - 1].key, u[i].key_len) == 0)
			continue;
		h = hash_bytes_extended((const unsigned char *) u[i].key,
								(int) u[i].key_len, PS_KEY_FILTER_SEED);
		a = (h & 0xFFFFFFFF) % nbits;
		s = 1 + (h >> 32) % (nbits - 1);
		for (int k = 0; k < nhashes; k++)
		{
			uint64		b = (a + k * s) % nbits;

			bits[b / 8] |= 1 << (b % 8);
		}
	}
	appendBinaryStringInfo(buf, (char *) bits, nbytes);
	pfree(bits);
}

/*
 * Checks a part's blocks against the format: each header, time, bounds,
 * checksum and frame of raw columns, block after block over updates u,
 * each block as large as PS_PART_BLOCK_RAW allows (counting a time column)
 * and of version 2, with its time after the header and no time column,
 * exactly when its updates are all at one time, or of version 3, with its
 * bounds after its time, when they are also of PS_PART_BOUNDED_MIN_RAW raw
 * bytes or more and their bounds fit PS_PART_BOUNDS_MAX; their sizes and
 * chained checksums add up to info.
 */
static void
check_part_blocks(const char *part, const PsPartInfo *info, const PsUpdate *u,
				  int n)
{
	uint64		off = 0;
	uint64		raw_total = 0;
	uint32		chain = 0;
	int			done = 0;

	while (off < info->encoded_size && CHECK(info->encoded_size - off > PS_PART_HEADER_SIZE))
	{
		const char *b = part + off;
		uint64		comp = load_le(b + PH_COMP, 4);
		int			bn = (int) load_le(b + PH_NUPDATES, 4);
		bool		one_time;
		uint64		body;
		uint8		version;
		StringInfoData raw;
		StringInfoData timed;
		StringInfoData bounds;
		int			bounds_len;
		bool		filtered;
		char	   *frame_raw;
		size_t		got;

		CHECK(load_le(b + PH_MAGIC, 4) == PS_PART_MAGIC);
		if (!CHECK(bn <= n - done) || !CHECK(bn > 0 || n == 0))
			return;
		one_time = ref_one_time(&u[done], bn);
		initStringInfo(&raw);
		ref_columns(&raw, &u[done], bn, !one_time);
		initStringInfo(&bounds);
		if (one_time && raw.len >= PS_PART_BOUNDED_MIN_RAW)
			ref_bounds(&bounds, &u[done], &u[done + bn - 1]);
		if (bounds.len > PS_PART_BOUNDS_MAX)
			resetStringInfo(&bounds);
		bounds_len = bounds.len;
		version = bounds.len > 0 ? PS_PART_VERSION_BOUNDED :
			one_time ? PS_PART_VERSION_ONE_TIME : PS_PART_VERSION;
		/* a block of 16kB of columns or more has a key filter, after its bounds */
		filtered = raw.len >= PS_PART_FILTERED_MIN_RAW;
		if (filtered)
			ref_key_filter(&bounds, &u[done], bn, PS_KEY_FILTER_HASHES);
		body = (one_time ? PH_FIRST : PS_PART_HEADER_SIZE) + bounds.len;
		/* the version byte, the flags byte, the bounds' size or zero */
		if (!CHECK((uint8) b[PH_VERSION] == version) ||
			!CHECK((uint8) b[PH_VERSION + 1] ==
				   ((ref_positive(&u[done], bn) ? PS_BLOCK_POSITIVE : 0) |
					(filtered ? PS_BLOCK_KEY_FILTER : 0))) ||
			!CHECK(load_le(b + PH_BOUNDS, 2) == (uint64) bounds_len) ||
			!CHECK(off + body + comp <= info->encoded_size))
			return;
		if (one_time)
			CHECK((int64) load_le(b + PH_ONE_TIME, PS_PART_TIME_SIZE) == u[done].time);
		/* a block's header says a (key, val) may repeat if it has times */
		{
			PsPartInfo	binfo;
			const char *why = NULL;

			if (CHECK(ps_part_check_block(b, body + comp, &binfo, &why)))
				CHECK(binfo.maybe_repeating == !one_time);
		}
		if (bounds.len > 0)
			CHECK(memcmp(b + body - bounds.len, bounds.data, bounds.len) == 0);
		pfree(bounds.data);
		CHECK((int64) load_le(b + PH_DIFFSUM, 8) == wrapping_diff_sum(&u[done], bn));
		/* header up to the CRC, then the time (if any) and the frame */
		CHECK(load_le(b + PH_CRC, 4) ==
			  crc_of(b, PH_CRC, b + PS_PART_HEADER_SIZE, body - PS_PART_HEADER_SIZE + comp));
		chain = off == 0 ? (uint32) load_le(b + PH_CRC, 4) :
			crc_of_pair(chain, (uint32) load_le(b + PH_CRC, 4));

		/* the frame holds exactly the documented raw columns of its updates */
		CHECK(load_le(b + PH_RAW, 4) == (uint64) raw.len);
		/* blocks are cut by the size of their columns with times */
		initStringInfo(&timed);
		ref_columns(&timed, &u[done], bn, true);
		CHECK(raw.len <= timed.len);
		CHECK(bn == 1 || timed.len <= PS_PART_BLOCK_RAW);
		/* a block ends only where the next update would not fit */
		if (done + bn < n)
		{
			resetStringInfo(&timed);
			ref_columns(&timed, &u[done], bn + 1, true);
			CHECK(timed.len > PS_PART_BLOCK_RAW);
		}
		pfree(timed.data);
		frame_raw = palloc(raw.len + 1);
		got = ZSTD_decompress(frame_raw, raw.len + 1, b + body, comp);
		if (CHECK(!ZSTD_isError(got)) && CHECK(got == (size_t) raw.len))
			CHECK(memcmp(frame_raw, raw.data, raw.len) == 0);
		pfree(frame_raw);
		raw_total += raw.len;
		pfree(raw.data);
		done += bn;
		off += body + comp;
	}
	CHECK(done == n);
	CHECK(off == info->encoded_size);
	CHECK(raw_total == info->raw_size);
	CHECK(chain == info->checksum);
}

/*
 * Encodes sorted, consolidated updates, checks the part's blocks against
 * the format, decodes it and checks every field.
 */
static void
check_part_roundtrip(const PsUpdate *u, int n, int level)
{
	PsPartInfo	info;
	PsPartInfo	dinfo;
	PsDecodedPart dec;
	const char *errmsg = NULL;
	char	   *part;
	char	   *copy;

	memset(&info, 0xAB, sizeof(info));
	part = ps_part_encode(u, n, level, &info, &errmsg);
	last_errmsg = errmsg;
	if (!CHECK(part != NULL))
		return;

	CHECK(info.nupdates == (uint64) n);
	CHECK(info.diff_sum == wrapping_diff_sum(u, n));
	CHECK(info.maybe_nonpositive == !ref_positive(u, n));
	CHECK(info.maybe_repeating == ref_repeating(u, n));
	CHECK(info.encoded_size > PS_PART_HEADER_SIZE);
	check_part_blocks(part, &info, u, n);

	/* decode from a block of exactly the encoded size */
	copy = exact_copy(part, info.encoded_size);
	pfree(part);
	memset(&dinfo, 0xCD, sizeof(dinfo));
	errmsg = NULL;
	if (CHECK(ps_part_decode(copy, info.encoded_size, &dec, &dinfo, &errmsg)))
	{
		CHECK(dec.nupdates == (uint32) n);
		if (dec.nupdates == (uint32) n)
			updates_equal(dec.updates, u, n);
		for (uint32 i = 0; i < dec.nupdates; i++)
		{
			const PsUpdate *d = &dec.updates[i];

			CHECK(d->key >= dec.raw && d->key + d->key_len <= dec.raw + info.raw_size);
			CHECK(d->val >= dec.raw && d->val + d->val_len <= dec.raw + info.raw_size);
		}
		infos_equal(&dinfo, &info);
		ps_decoded_part_free(&dec);
		CHECK(dec.raw == NULL && dec.updates == NULL && dec.nupdates == 0);
	}
	else
		last_errmsg = errmsg;

	/* info is optional */
	errmsg = NULL;
	if (CHECK(ps_part_decode(copy, info.encoded_size, &dec, NULL, &errmsg)))
		ps_decoded_part_free(&dec);
	free(copy);
}

/*
 * Sorts and consolidates updates with the codec, checks the result against
 * the reference model, and round-trips it through a part.  Returns false
 * if the diffs overflow (which the codec must agree on).
 */
static bool
roundtrip_updates(const PsUpdate *in, int n, int level)
{
	PsUpdate   *work = palloc(sizeof(PsUpdate) * Max(n, 1));
	PsUpdate   *ref = palloc(sizeof(PsUpdate) * Max(n, 1));
	int			m = n;
	int			refm = n;
	bool		ok;
	bool		ref_ok;

	if (n > 0)
	{
		memcpy(work, in, sizeof(PsUpdate) * n);
		memcpy(ref, in, sizeof(PsUpdate) * n);
	}
	ref_ok = ref_consolidate(ref, &refm);

	ps_updates_sort(work, n);
	for (int i = 1; i < n; i++)
		if (!CHECK(ref_cmp_kvt(&work[i - 1], &work[i]) <= 0))
			break;
	ok = ps_updates_consolidate(work, &m);
	CHECK(ok == ref_ok);
	if (ok && ref_ok)
	{
		if (CHECK(m == refm) && updates_equal(work, ref, m))
			check_part_roundtrip(work, m, level);
	}
	pfree(work);
	pfree(ref);
	return ref_ok;
}

/* Round-trips random updates for many seeds. */
static void
test_part_roundtrip(int nseeds, uint64 first_seed)
{
	int			overflows = 0;

	group_begin("part round-trip");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		BytePool	keys;
		BytePool	vals;
		PsUpdate   *u;
		int			n;
		int			time_mode;
		int			diff_mode;
		int			level;

		pg_prng_seed(&rng, seed);
		switch (rnd(&rng, 20))
		{
			case 0:
				n = 0;
				break;
			case 1:
				n = 1 + (int) rnd(&rng, 3000);
				break;
			default:
				n = (int) rnd(&rng, 300);
				break;
		}
		time_mode = (int) rnd(&rng, 3);
		diff_mode = (int) rnd(&rng, 4);
		level = levels[rnd(&rng, lengthof(levels))];
		pool_init(&keys, &rng, 4 + (int) rnd(&rng, Min(n, 40) + 1));
		pool_init(&vals, &rng, 4 + (int) rnd(&rng, 6));
		u = palloc(sizeof(PsUpdate) * Max(n, 1));
		gen_updates(&rng, u, n, &keys, &vals, time_mode, diff_mode);

		case_begin("seed " UINT64_FORMAT ", %d updates, time mode %d, diff mode %d, level %d",
				   seed, n, time_mode, diff_mode, level);
		if (!roundtrip_updates(u, n, level))
			overflows++;
		case_end();

		pfree(u);
		pool_free(&keys);
		pool_free(&vals);
	}
	snprintf(group_note, sizeof(group_note),
			 " (seeds " UINT64_FORMAT "..." UINT64_FORMAT ", %d overflowing)",
			 first_seed, first_seed + nseeds - 1, overflows);
	group_end();
}

/* Checks the update comparators against the reference order. */
static void
test_update_order(int nseeds, uint64 first_seed)
{
	group_begin("update order");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		BytePool	pool;

		pg_prng_seed(&rng, seed);
		pool_init(&pool, &rng, 4 + (int) rnd(&rng, 12));
		case_begin("seed " UINT64_FORMAT, seed);
		for (int i = 0; i < 100; i++)
		{
			PsUpdate	a;
			PsUpdate	b;
			int			ka = (int) rnd(&rng, pool.n);
			int			kb = (int) rnd(&rng, pool.n);
			int			va = (int) rnd(&rng, pool.n);
			int			vb = (int) rnd(&rng, pool.n);

			a.key = pool.data[ka];
			a.key_len = pool.len[ka];
			a.val = pool.data[va];
			a.val_len = pool.len[va];
			a.time = (int64) rnd(&rng, 3) - 1;
			a.diff = 1;
			b.key = pool.data[kb];
			b.key_len = pool.len[kb];
			b.val = pool.data[vb];
			b.val_len = pool.len[vb];
			b.time = pg_prng_bool(&rng) ? a.time : edge_values[rnd(&rng, lengthof(edge_values))];
			b.diff = -1;
			if (!CHECK(sign_of(ps_update_cmp_kv(&a, &b)) == ref_cmp_kv(&a, &b)) ||
				!CHECK(sign_of(ps_update_cmp_kvt(&a, &b)) == ref_cmp_kvt(&a, &b)) ||
				!CHECK(sign_of(ps_update_cmp_kvt(&b, &a)) == ref_cmp_kvt(&b, &a)))
				break;
		}
		case_end();
		pool_free(&pool);
	}
	group_end();
}

/*
 * Checks the comparators on byte strings that share long prefixes: every
 * pair of strings made of a common prefix of 0 to 24 bytes, alone or
 * followed by one byte that may differ (0x00, 0x7F, 0x80 or 0xFF) and then
 * 0 or 9 more bytes, so that strings first differ inside, at and after each
 * 8-byte word of the word-wise comparison, and some are prefixes of others.
 */
static void
test_shared_prefix_order(void)
{
	static const uint8 differs[] = {0x00, 0x7F, 0x80, 0xFF};
	const int	nstrings = 25 * lengthof(differs) * 3;
	char	  **data = palloc(sizeof(char *) * nstrings);
	uint32	   *len = palloc(sizeof(uint32) * nstrings);
	int			n = 0;

	group_begin("update order, shared prefixes");
	for (int plen = 0; plen <= 24; plen++)
		for (int d = 0; d < (int) lengthof(differs); d++)
			for (int tail = 0; tail < 3; tail++)
			{
				uint32		l = plen + (tail == 0 ? 0 : 1 + (tail == 1 ? 0 : 9));
				char	   *b = palloc(Max(l, 1));

				for (uint32 j = 0; j < l; j++)
					b[j] = j < (uint32) plen ? (char) ('k' + j % 7) :
						j == (uint32) plen ? (char) differs[d] : (char) (j * 37);
				data[n] = b;
				len[n++] = l;
			}
	case_begin("%d strings, every pair as keys and as vals", n);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
		{
			PsUpdate	a = {data[i], data[0], len[i], len[0], 0, 1};
			PsUpdate	b = {data[j], data[0], len[j], len[0], 0, 1};
			PsUpdate	av = {data[0], data[i], len[0], len[i], 0, 1};
			PsUpdate	bv = {data[0], data[j], len[0], len[j], 0, 1};

			if (!CHECK(sign_of(ps_update_cmp_kv(&a, &b)) == ref_cmp_kv(&a, &b)) ||
				!CHECK(sign_of(ps_update_cmp_kvt(&av, &bv)) == ref_cmp_kvt(&av, &bv)))
			{
				i = n;
				break;
			}
		}
	case_end();
	for (int i = 0; i < n; i++)
		pfree(data[i]);
	pfree(data);
	pfree(len);
	group_end();
}

/*
 * Checks the sort of many updates (the abbreviated sort) against the
 * reference order: keys that all share a prefix of 0 to 24 bytes, then
 * tails of 0 to 19 bytes over { 0x00, 0x01, 0xFF } or 'a' to 'c' (so some
 * keys are the prefix alone, some prefixes of others, some equal in their
 * first 8 bytes after the prefix), vals ("", "\0", "\xff") and times
 * from small sets.  Each
 * update's diff is its place in the input, so the result must hold each
 * once, in order.
 */
static void
test_sort_shared_prefix(int nseeds, uint64 first_seed)
{
	static const int plens[] = {0, 1, 7, 8, 9, 16, 24};
	static const char *const vals[] = {"x", "\0", "\xff"};

	group_begin("sort, keys sharing a prefix");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		int			plen = plens[s % lengthof(plens)];
		int			n = 64 + (int) (seed % 7) * 150;
		PsUpdate   *u = palloc(sizeof(PsUpdate) * n);
		bool	   *seen = palloc0(sizeof(bool) * n);
		char	   *arena = palloc((size_t) n * (24 + 19));
		bool		small_alphabet;

		pg_prng_seed(&rng, seed);
		small_alphabet = pg_prng_bool(&rng);
		case_begin("seed " UINT64_FORMAT ", prefix %d bytes, %d updates",
				   seed, plen, n);
		for (int i = 0; i < n; i++)
		{
			char	   *k = arena + (size_t) i * (24 + 19);
			int			tail = (int) rnd(&rng, 20);

			for (int j = 0; j < plen; j++)
				k[j] = (char) ('p' + j % 5);
			for (int j = plen; j < plen + tail; j++)
				k[j] = small_alphabet ? (char) ('a' + rnd(&rng, 3)) :
					(char) ((const uint8[]) {0x00, 0x01, 0xFF})[rnd(&rng, 3)];
			u[i].key = k;
			u[i].key_len = plen + tail;
			u[i].val = vals[rnd(&rng, lengthof(vals))];
			u[i].val_len = u[i].val[0] == 'x' ? 0 : 1;
			u[i].time = (int64) rnd(&rng, 3) - 1;
			u[i].diff = i;
		}
		ps_updates_sort(u, n);
		for (int i = 0; i < n; i++)
		{
			if (!CHECK(u[i].diff >= 0 && u[i].diff < n && !seen[u[i].diff]) ||
				(i > 0 && !CHECK(ref_cmp_kvt(&u[i - 1], &u[i]) <= 0)))
				break;
			seen[u[i].diff] = true;
		}
		case_end();
		pfree(u);
		pfree(seen);
		pfree(arena);
	}
	group_end();
}

/* Rearranges perm[0..k) into its next permutation; false after the last. */
static bool
next_permutation(int *perm, int k)
{
	int			i = k - 2;
	int			j = k - 1;

	while (i >= 0 && perm[i] >= perm[i + 1])
		i--;
	if (i < 0)
		return false;
	while (perm[j] <= perm[i])
		j--;
	SWAP(int, perm[i], perm[j]);
	for (int a = i + 1, b = k - 1; a < b; a++, b--)
		SWAP(int, perm[a], perm[b]);
	return true;
}

/*
 * Consolidates k updates of one (key, val, time) with the given diffs, in
 * every order, and checks the outcome is the same for all of them.
 */
static void
check_consolidate_orders(const char *name, const int64 *diffs, int k,
						 bool want_ok, int64 want)
{
	int			perm[8];
	int			order = 0;

	for (int i = 0; i < k; i++)
		perm[i] = i;
	do
	{
		PsUpdate	u[8];
		int			m = k;
		bool		ok;

		case_begin("%s, order %d", name, order++);
		for (int i = 0; i < k; i++)
		{
			u[i].key = "k";
			u[i].key_len = 1;
			u[i].val = "";
			u[i].val_len = 0;
			u[i].time = -5;
			u[i].diff = diffs[perm[i]];
		}
		/* already sorted: consolidate sees the diffs in this order */
		ok = ps_updates_consolidate(u, &m);
		if (CHECK(ok == want_ok) && ok)
		{
			if (want == 0)
				CHECK(m == 0);
			else if (CHECK(m == 1))
				CHECK(u[0].diff == want && u[0].time == -5 && u[0].key_len == 1);
		}
		case_end();
	} while (next_permutation(perm, k));
}

/* Consolidation of fixed inputs: cancelling, extremes and overflow. */
static void
test_consolidate_edges(void)
{
	static const int64 cancel[] = {1, -1};
	static const int64 cancel3[] = {5, -2, -3};
	static const int64 zero[] = {0};
	static const int64 max_plus[] = {PG_INT64_MAX, 1};
	static const int64 min_minus[] = {PG_INT64_MIN, -1};
	static const int64 max_min[] = {PG_INT64_MAX, PG_INT64_MIN};
	static const int64 max_pm[] = {PG_INT64_MAX, 1, -1};
	static const int64 min_pm[] = {PG_INT64_MIN, -1, 1};
	static const int64 max2_min2[] = {
		PG_INT64_MAX, PG_INT64_MAX, PG_INT64_MIN, PG_INT64_MIN
	};
	static const int64 max2_min[] = {PG_INT64_MAX, PG_INT64_MAX, PG_INT64_MIN};
	static const int64 max2[] = {PG_INT64_MAX, PG_INT64_MAX};
	static const int64 min3_max2[] = {
		PG_INT64_MIN, PG_INT64_MIN, PG_INT64_MIN, PG_INT64_MAX, PG_INT64_MAX
	};
	static const int64 min_min[] = {PG_INT64_MIN, PG_INT64_MIN};

	group_begin("consolidate edge cases");

	/* nothing to do */
	{
		PsUpdate	u[1];
		int			m = 0;

		case_begin("no updates");
		ps_updates_sort(u, 0);
		CHECK(ps_updates_consolidate(u, &m) && m == 0);
		case_end();
	}

	check_consolidate_orders("1 - 1", cancel, 2, true, 0);
	check_consolidate_orders("5 - 2 - 3", cancel3, 3, true, 0);
	check_consolidate_orders("lone zero", zero, 1, true, 0);
	check_consolidate_orders("MAX + 1", max_plus, 2, false, 0);
	check_consolidate_orders("MIN - 1", min_minus, 2, false, 0);
	check_consolidate_orders("MAX + MIN", max_min, 2, true, -1);
	check_consolidate_orders("MAX + 1 - 1", max_pm, 3, true, PG_INT64_MAX);
	check_consolidate_orders("MIN - 1 + 1", min_pm, 3, true, PG_INT64_MIN);
	check_consolidate_orders("2 MAX + 2 MIN", max2_min2, 4, true, -2);
	check_consolidate_orders("2 MAX + MIN", max2_min, 3, true, PG_INT64_MAX - 1);
	check_consolidate_orders("2 MAX", max2, 2, false, 0);
	check_consolidate_orders("3 MIN + 2 MAX", min3_max2, 5, false, 0);
	check_consolidate_orders("2 MIN", min_min, 2, false, 0);

	/* neighbours are kept apart, and only the overflowing group fails */
	{
		PsUpdate	u[] = {
			{"a", "", 1, 0, 0, -7},
			{"a", "\0", 1, 1, PG_INT64_MIN, PG_INT64_MAX},
			{"a", "\0", 1, 1, PG_INT64_MIN, PG_INT64_MIN},
			{"a", "\0", 1, 1, PG_INT64_MAX, PG_INT64_MIN},
			{"b", "", 1, 0, 0, 1},
			{"b", "", 1, 0, 0, -1},
			{"c", "", 1, 0, 0, 0},
		};
		PsUpdate	want[] = {
			{"a", "", 1, 0, 0, -7},
			{"a", "\0", 1, 1, PG_INT64_MIN, -1},
			{"a", "\0", 1, 1, PG_INT64_MAX, PG_INT64_MIN},
		};
		PsUpdate	overflowing[] = {
			{"c", "", 1, 0, 0, 4},
			{"b", "", 1, 0, 3, PG_INT64_MAX},
			{"b", "", 1, 0, 3, 2},
			{"a", "", 1, 0, 0, -7},
			{"b", "", 1, 0, 3, -1},
			{"b", "", 1, 0, 3, 1},
		};
		int			m = lengthof(u);

		case_begin("mixed groups");
		ps_updates_sort(u, m);
		if (CHECK(ps_updates_consolidate(u, &m)) && CHECK(m == lengthof(want)))
			updates_equal(u, want, m);
		case_end();

		case_begin("mixed groups, one overflowing");
		m = lengthof(overflowing);
		ps_updates_sort(overflowing, m);
		CHECK(!ps_updates_consolidate(overflowing, &m));
		case_end();
	}
	group_end();
}

/* Updates of fixed edge cases, round-tripped at every level. */
static void
test_part_edges(void)
{
	static const char zeros[4] = {0, 0, 0, 0};
	char	   *long_key;
	char	   *long_val;
	PsUpdate   *many;
	int			nmany = 2000;

	group_begin("part edge cases");
	long_key = palloc(70000);
	long_val = palloc(20000);
	for (int i = 0; i < 70000; i++)
		long_key[i] = (char) (i * 31);
	memset(long_val, 0, 20000);
	many = palloc(sizeof(PsUpdate) * nmany);
	for (int i = 0; i < nmany; i++)
	{
		many[i].key = "k";
		many[i].key_len = 1;
		many[i].val = zeros;
		many[i].val_len = i % 3;
		many[i].time = (int64) (i * UINT64CONST(0x9E3779B97F4A7C15));
		many[i].diff = (i % 2) ? PG_INT64_MIN + i : PG_INT64_MAX - i;
	}

	for (int l = 0; l < (int) lengthof(levels); l++)
	{
		int			level = levels[l];
		PsUpdate	one_empty[] = {{"", "", 0, 0, 0, 1}};
		PsUpdate	zero_keys[] = {
			{"\1", "", 1, 0, 0, 1},
			{zeros, zeros, 2, 0, 0, 1},
			{zeros, zeros, 1, 1, 0, 1},
			{"", "", 0, 0, 0, 1},
			{"\0\1", zeros, 2, 2, 0, 1},
			{zeros, "", 0, 1, 0, 1},
			{"\xff", "", 1, 0, 0, 1},
		};
		PsUpdate	extreme_times[] = {
			{"k", "v", 1, 1, PG_INT64_MAX, PG_INT64_MIN},
			{"k", "v", 1, 1, PG_INT64_MIN, PG_INT64_MAX},
			{"k", "v", 1, 1, 0, -1},
			{"k", "v", 1, 1, -1, 1},
			{"k", "v", 1, 1, PG_INT64_MIN + 1, PG_INT64_MIN},
			{"k", "v", 1, 1, PG_INT64_MAX - 1, PG_INT64_MAX},
			{"k", "w", 1, 1, PG_INT64_MIN, 2},
			{"j", "v", 1, 1, PG_INT64_MAX, -2},
		};
		PsUpdate	wrapping_sum[] = {
			{"a", "", 1, 0, 0, PG_INT64_MAX},
			{"b", "", 1, 0, 0, PG_INT64_MAX},
			{"c", "", 1, 0, 0, PG_INT64_MAX},
		};
		PsUpdate	long_bytes[] = {
			{long_key, long_val, 70000, 20000, 42, 1},
			{long_key, long_val, 69999, 20000, 42, 1},
			{long_key, long_val, 128, 127, -42, -1},
		};
		PsUpdate	cancel_all[] = {
			{"x", "", 1, 0, 9, 5},
			{"y", "", 1, 0, 9, PG_INT64_MIN},
			{"x", "", 1, 0, 9, -5},
			{"y", "", 1, 0, 9, PG_INT64_MAX},
			{"y", "", 1, 0, 9, 1},
		};
		PsUpdate	duplicates[] = {
			{"d", "v", 1, 1, 7, 1},
			{"d", "v", 1, 1, 7, 1},
			{"d", "v", 1, 1, 8, 1},
			{"d", "v", 1, 1, 7, 1},
			{"d", "v", 1, 1, 7, 2},
		};

		case_begin("empty part, level %d", level);
		roundtrip_updates(NULL, 0, level);
		case_end();
		case_begin("empty key and val, level %d", level);
		roundtrip_updates(one_empty, lengthof(one_empty), level);
		case_end();
		case_begin("zero-byte keys and vals, level %d", level);
		roundtrip_updates(zero_keys, lengthof(zero_keys), level);
		case_end();
		case_begin("extreme times and diffs, level %d", level);
		roundtrip_updates(extreme_times, lengthof(extreme_times), level);
		case_end();
		case_begin("diff sum wrapping in the header, level %d", level);
		roundtrip_updates(wrapping_sum, lengthof(wrapping_sum), level);
		case_end();
		case_begin("long keys and vals, level %d", level);
		roundtrip_updates(long_bytes, lengthof(long_bytes), level);
		case_end();
		case_begin("all updates cancel, level %d", level);
		roundtrip_updates(cancel_all, lengthof(cancel_all), level);
		case_end();
		case_begin("duplicates consolidate, level %d", level);
		roundtrip_updates(duplicates, lengthof(duplicates), level);
		case_end();
		case_begin("one key, wide time jumps, level %d", level);
		roundtrip_updates(many, nmany, level);
		case_end();
	}
	pfree(long_key);
	pfree(long_val);
	pfree(many);
	group_end();
}


/* ---------------------------------------------------------------------
 * Corrupted parts
 * ---------------------------------------------------------------------
 */

/*
 * Encodes sorted updates as a sample part for the corruption groups; its
 * first block must be of the given version.
 */
static void
make_part_sample(Sample *sample, const char *name, PsUpdate *u, int n,
				 uint8 version)
{
	PsPartInfo	info;
	const char *errmsg = NULL;
	char	   *part;

	sort_consolidate_or_die(u, &n);
	part = ps_part_encode(u, n, 3, &info, &errmsg);
	if (part == NULL)
		setup_failed(errmsg);
	if ((uint8) part[PH_VERSION] != version)
		setup_failed("sample part of another version");
	sample->name = name;
	sample->len = info.encoded_size;
	sample->data = exact_copy(part, info.encoded_size);
	pfree(part);
}

/*
 * Builds the sample parts: empty, small, edge values and random, of
 * version 1 (several times), then small and random one-time parts.
 */
static void
make_part_samples(void)
{
	PsUpdate	small[] = {
		{"a", "x", 1, 1, 1, 1},
		{"a", "y", 1, 1, 5, -2},
		{"b", "x", 1, 1, -3, 7},
	};
	char		big[300];
	PsUpdate	edges[] = {
		{big, "", 300, 0, PG_INT64_MIN, PG_INT64_MAX},
		{"", "", 0, 0, PG_INT64_MAX, PG_INT64_MIN},
		{"\0", "\0\0", 1, 2, 0, -1},
		{big, big, 200, 300, -1, 3},
	};
	pg_prng_state rng;
	BytePool	keys;
	BytePool	vals;
	PsUpdate	u[200];

	memset(big, 'z', sizeof(big));
	make_part_sample(&part_samples[0], "empty part", NULL, 0, PS_PART_VERSION);
	make_part_sample(&part_samples[1], "small part", small, lengthof(small), PS_PART_VERSION);
	make_part_sample(&part_samples[2], "edge-value part", edges, lengthof(edges),
					 PS_PART_VERSION);

	pg_prng_seed(&rng, 4242);
	pool_init(&keys, &rng, 40);
	pool_init(&vals, &rng, 8);
	gen_updates(&rng, u, lengthof(u), &keys, &vals, 2, 0);
	make_part_sample(&part_samples[3], "random part", u, lengthof(u), PS_PART_VERSION);

	for (int i = 0; i < (int) lengthof(small); i++)
		small[i].time = INT64CONST(1234567890123);
	make_part_sample(&part_samples[4], "small one-time part", small, lengthof(small),
					 PS_PART_VERSION_ONE_TIME);
	gen_updates(&rng, u, lengthof(u), &keys, &vals, 2, 0);
	for (int i = 0; i < (int) lengthof(u); i++)
		u[i].time = PG_INT64_MIN;
	make_part_sample(&part_samples[5], "random one-time part", u, lengthof(u),
					 PS_PART_VERSION_ONE_TIME);
	pool_free(&keys);
	pool_free(&vals);
}

/*
 * Decodes len bytes of a part from an exact-size copy and checks it is
 * rejected with a message that contains want (if given) and not avoid.
 */
static void
expect_part_rejected(const char *data, uint64 len, const char *want,
					 const char *avoid)
{
	char	   *copy = exact_copy(data, len);
	PsDecodedPart out;
	PsPartInfo	info;
	const char *errmsg = NULL;
	bool		ok;

	memset(&out, 0, sizeof(out));
	ok = ps_part_decode(copy, len, &out, &info, &errmsg);
	last_errmsg = errmsg;
	if (!CHECK(!ok))
		ps_decoded_part_free(&out);
	else if (CHECK(errmsg_has(errmsg, want)) && avoid != NULL)
		CHECK(strstr(errmsg, avoid) == NULL);
	free(copy);
}

/* Checks that the part of len bytes at data decodes to exactly the n updates u. */
static void
expect_decodes_to(const char *data, uint64 len, const PsUpdate *u, int n)
{
	PsDecodedPart dec;
	const char *errmsg = NULL;

	if (CHECK(ps_part_decode(data, len, &dec, NULL, &errmsg)))
	{
		if (CHECK(dec.nupdates == (uint32) n))
			updates_equal(dec.updates, u, n);
		ps_decoded_part_free(&dec);
	}
	else
		last_errmsg = errmsg;
}

/*
 * Fills n updates with keys "key%08d" of their own (numbered_free frees
 * them) and val (val_len bytes), at time 0 with diff 1.
 */
static void
numbered_updates(PsUpdate *u, int n, const char *val, uint32 val_len)
{
	for (int i = 0; i < n; i++)
	{
		char	   *k = palloc(24);

		snprintf(k, 24, "key%08d", i);
		u[i].key = k;
		u[i].key_len = (uint32) strlen(k);
		u[i].val = val;
		u[i].val_len = val_len;
		u[i].time = 0;
		u[i].diff = 1;
	}
}

/* Frees the keys numbered_updates made. */
static void
numbered_free(PsUpdate *u, int n)
{
	for (int i = 0; i < n; i++)
		pfree(unconstify(char *, u[i].key));
}

/*
 * A part of several blocks: each block decodes on its own to its share of
 * the updates, the block lengths add up, blocks out of order are refused,
 * and a part missing a block decodes (its blocks are sound) to a count and
 * checksum other than the whole part's, which the state would refuse.
 */
static void
test_part_blocks(void)
{
	char		val[100];
	PsUpdate	u[3000];
	PsPartInfo	info;
	PsPartInfo	dinfo;
	PsDecodedPart dec;
	const char *errmsg = NULL;
	char	   *part;
	uint64		blen[64];
	int			nblocks = 0;
	uint64		off = 0;
	int			done = 0;

	group_begin("part blocks");
	memset(val, 'v', sizeof(val));
	numbered_updates(u, lengthof(u), val, sizeof(val));
	for (int i = 0; i < (int) lengthof(u); i++)
	{
		u[i].time = i % 7;
		u[i].diff = 1 + i % 3;
	}
	part = ps_part_encode(u, lengthof(u), 1, &info, &errmsg);
	if (!CHECK(part != NULL))
		return;

	case_begin("block lengths and block decodes");
	while (off < info.encoded_size && nblocks < (int) lengthof(blen))
	{
		PsPartInfo	binfo;

		blen[nblocks] = ps_part_block_length(part + off, info.encoded_size - off, &errmsg);
		if (!CHECK(blen[nblocks] > PS_PART_HEADER_SIZE))
			break;
		if (CHECK(ps_part_decode_block(part + off, blen[nblocks], &dec, &binfo, &errmsg)))
		{
			CHECK(binfo.encoded_size == blen[nblocks]);
			CHECK(done + dec.nupdates <= lengthof(u));
			if (done + dec.nupdates <= lengthof(u))
				updates_equal(dec.updates, &u[done], (int) dec.nupdates);
			done += (int) dec.nupdates;
			ps_decoded_part_free(&dec);
		}
		off += blen[nblocks++];
	}
	CHECK(nblocks >= 3);
	CHECK(off == info.encoded_size);
	CHECK(done == lengthof(u));
	/* a block cut short, or a header with no room for its frame */
	CHECK(ps_part_block_length(part, PS_PART_HEADER_SIZE - 1, &errmsg) == 0);
	CHECK(ps_part_block_length(part, blen[0] - 1, &errmsg) == 0 &&
		  errmsg_has(errmsg, "length"));
	CHECK(!ps_part_decode_block(part, blen[0] + blen[1], &dec, &dinfo, &errmsg) &&
		  errmsg_has(errmsg, "length"));
	case_end();

	if (nblocks >= 3)
	{
		char	   *swapped = malloc(info.encoded_size);
		char	   *missing = malloc(info.encoded_size - blen[1]);

		case_begin("the first two blocks swapped");
		memcpy(swapped, part + blen[0], blen[1]);
		memcpy(swapped + blen[1], part, blen[0]);
		memcpy(swapped + blen[0] + blen[1], part + blen[0] + blen[1],
			   info.encoded_size - blen[0] - blen[1]);
		expect_part_rejected(swapped, info.encoded_size, "not sorted", NULL);
		case_end();

		case_begin("the second block left out");
		memcpy(missing, part, blen[0]);
		memcpy(missing + blen[0], part + blen[0] + blen[1],
			   info.encoded_size - blen[0] - blen[1]);
		if (CHECK(ps_part_decode(missing, info.encoded_size - blen[1], &dec, &dinfo, &errmsg)))
		{
			CHECK(dinfo.nupdates < info.nupdates);
			CHECK(dinfo.checksum != info.checksum);
			ps_decoded_part_free(&dec);
		}
		case_end();
		free(swapped);
		free(missing);
	}
	pfree(part);
	numbered_free(u, lengthof(u));
	group_end();
}

/*
 * Parts encoded from runs that sort one after the other, their blocks put
 * one after the other with ps_part_append_blocks, decode to the runs'
 * updates in order, with the info the assembly computed (the same as
 * ps_part_append_checked_blocks's); runs out of order are refused by the
 * decoder, and a damaged block by the assembly.
 */
static void
test_part_assembly(void)
{
	char		val[100];
	PsUpdate	u[3000];
	int			cuts[] = {0, 1, 700, 1900, 1901, 3000};
	PsPartInfo	info = {0};
	PsPartInfo	dinfo;
	PsDecodedPart dec;
	const char *errmsg = NULL;
	char	   *assembled = malloc(4 * 1024 * 1024);
	char	   *runs[lengthof(cuts) - 1];
	PsPartInfo	rinfo[lengthof(cuts) - 1];
	bool		ok = true;

	group_begin("part assembly");
	memset(val, 'v', sizeof(val));
	numbered_updates(u, lengthof(u), val, sizeof(val));
	for (int i = 0; i < (int) lengthof(u); i++)
	{
		u[i].val_len = 1 + i % sizeof(val);
		u[i].diff = (i % 5) - 2 == 0 ? 7 : (i % 5) - 2;
	}

	case_begin("runs of one, several and many blocks");
	for (int r = 0; r < (int) lengthof(runs); r++)
	{
		runs[r] = ps_part_encode(&u[cuts[r]], cuts[r + 1] - cuts[r], 1, &rinfo[r], &errmsg);
		ok = CHECK(runs[r] != NULL) && ok;
	}
	if (!ok)
		return;
	for (int r = 0; r < (int) lengthof(runs); r++)
	{
		ok = CHECK(ps_part_append_blocks(&info, runs[r], rinfo[r].encoded_size, &errmsg)) && ok;
		memcpy(assembled + info.encoded_size - rinfo[r].encoded_size, runs[r], rinfo[r].encoded_size);
	}
	CHECK(rinfo[lengthof(runs) - 1].encoded_size > PS_PART_HEADER_SIZE * 3);
	CHECK(info.nupdates == lengthof(u));
	if (ok && CHECK(ps_part_decode(assembled, info.encoded_size, &dec, &dinfo, &errmsg)))
	{
		CHECK(dec.nupdates == lengthof(u));
		if (dec.nupdates == lengthof(u))
			updates_equal(dec.updates, u, lengthof(u));
		CHECK(dinfo.nupdates == info.nupdates && dinfo.raw_size == info.raw_size &&
			  dinfo.encoded_size == info.encoded_size &&
			  dinfo.diff_sum == info.diff_sum && dinfo.checksum == info.checksum);
		ps_decoded_part_free(&dec);
	}
	case_end();

	case_begin("blocks chained without a second check: the same info");
	{
		PsPartInfo	checked = {0};

		for (int r = 0; r < (int) lengthof(runs); r++)
			ok = CHECK(ps_part_append_checked_blocks(&checked, runs[r], rinfo[r].encoded_size,
													 &errmsg)) && ok;
		CHECK(memcmp(&checked, &info, sizeof(info)) == 0);
		memset(&checked, 0, sizeof(checked));
		CHECK(!ps_part_append_checked_blocks(&checked, runs[2], rinfo[2].encoded_size - 1,
											 &errmsg) && errmsg_has(errmsg, "length"));
	}
	case_end();

	case_begin("one run alone keeps its own info");
	memset(&info, 0, sizeof(info));
	CHECK(ps_part_append_blocks(&info, runs[3], rinfo[3].encoded_size, &errmsg));
	CHECK(memcmp(&info, &rinfo[3], sizeof(info)) == 0);
	case_end();

	case_begin("runs out of order");
	memset(&info, 0, sizeof(info));
	CHECK(ps_part_append_blocks(&info, runs[2], rinfo[2].encoded_size, &errmsg));
	memcpy(assembled, runs[2], rinfo[2].encoded_size);
	CHECK(ps_part_append_blocks(&info, runs[1], rinfo[1].encoded_size, &errmsg));
	memcpy(assembled + rinfo[2].encoded_size, runs[1], rinfo[1].encoded_size);
	expect_part_rejected(assembled, info.encoded_size, "not sorted", NULL);
	case_end();

	case_begin("a damaged or cut block");
	memset(&info, 0, sizeof(info));
	memcpy(assembled, runs[2], rinfo[2].encoded_size);
	assembled[0] ^= 1;
	CHECK(!ps_part_append_blocks(&info, assembled, rinfo[2].encoded_size, &errmsg) &&
		  errmsg_has(errmsg, "magic"));
	memset(&info, 0, sizeof(info));
	CHECK(!ps_part_append_blocks(&info, runs[2], rinfo[2].encoded_size - 1, &errmsg) &&
		  errmsg_has(errmsg, "length"));
	case_end();

	for (int r = 0; r < (int) lengthof(runs); r++)
		pfree(runs[r]);
	free(assembled);
	numbered_free(u, lengthof(u));
	group_end();
}

/* Every truncation of the sample parts, and extra bytes after them. */
static void
test_part_truncation(void)
{
	group_begin("part truncation");
	for (int s = 0; s < NPART_SAMPLES; s++)
	{
		const Sample *sample = &part_samples[s];
		char	   *longer = palloc(sample->len + 3);

		for (uint64 len = 0; len < sample->len; len++)
		{
			case_begin("%s, truncated to " UINT64_FORMAT " of " UINT64_FORMAT " bytes",
					   sample->name, len, sample->len);
			expect_part_rejected(sample->data, len, NULL, NULL);
			case_end();
		}
		memcpy(longer, sample->data, sample->len);
		memset(longer + sample->len, 0, 3);
		for (uint64 extra = 1; extra <= 3; extra++)
		{
			case_begin("%s, " UINT64_FORMAT " extra bytes", sample->name, extra);
			/* read as the header of another block */
			expect_part_rejected(longer, sample->len + extra, "header", NULL);
			case_end();
		}
		pfree(longer);
	}
	group_end();
}

/* Every single-byte change of the part headers. */
static void
test_part_header_flips(void)
{
	static const uint8 masks[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF};

	group_begin("part header byte flips");
	for (int s = 0; s < NPART_SAMPLES; s++)
	{
		const Sample *sample = &part_samples[s];
		char	   *copy = palloc(sample->len);

		for (int pos = 0; pos < PS_PART_HEADER_SIZE; pos++)
		{
			for (int m = 0; m < (int) lengthof(masks); m++)
			{
				memcpy(copy, sample->data, sample->len);
				copy[pos] ^= masks[m];
				case_begin("%s, byte %d ^ 0x%02x", sample->name, pos, masks[m]);
				expect_part_rejected(copy, sample->len, NULL, NULL);
				case_end();
			}
		}
		pfree(copy);
	}
	group_end();
}

/* Single-byte changes of the frames: all of small ones, a sample of big. */
static void
test_part_body_flips(uint64 seed)
{
	pg_prng_state rng;

	group_begin("part body byte flips");
	pg_prng_seed(&rng, seed);
	for (int s = 0; s < NPART_SAMPLES; s++)
	{
		const Sample *sample = &part_samples[s];
		uint64		frame_len = sample->len - PS_PART_HEADER_SIZE;
		uint64		tries = Min(frame_len, 256);
		char	   *copy = palloc(sample->len);

		for (uint64 t = 0; t < tries; t++)
		{
			uint64		pos = PS_PART_HEADER_SIZE +
				(frame_len <= 256 ? t : rnd(&rng, frame_len));
			uint8		mask = (uint8) (1 + rnd(&rng, 255));

			memcpy(copy, sample->data, sample->len);
			copy[pos] ^= mask;
			case_begin("%s, seed " UINT64_FORMAT ", byte " UINT64_FORMAT " ^ 0x%02x",
					   sample->name, seed, pos, mask);
			expect_part_rejected(copy, sample->len, "checksum", NULL);
			case_end();
		}
		pfree(copy);
	}
	group_end();
}

/* Parts whose stored checksum is wrong. */
static void
test_part_wrong_checksum(void)
{
	group_begin("part wrong checksum");
	for (int s = 0; s < NPART_SAMPLES; s++)
	{
		const Sample *sample = &part_samples[s];
		char	   *copy = palloc(sample->len);
		uint32		crc = (uint32) load_le(sample->data + PH_CRC, 4);
		uint64		body = frame_offset(sample->data);
		uint32		wrong[6];

		wrong[0] = crc + 1;
		wrong[1] = crc ^ 0x80000000;
		wrong[2] = 0;
		wrong[3] = ~crc;
		/* the CRC of the header alone, without the frame */
		wrong[4] = crc_of(sample->data, PH_CRC, NULL, 0);
		/* of a one-time block, without its time; else without the last byte */
		wrong[5] = body > PS_PART_HEADER_SIZE ?
			crc_of(sample->data, PH_CRC, sample->data + body, sample->len - body) :
			crc_of(sample->data, PH_CRC, sample->data + body, sample->len - body - 1);

		/* first make sure the test's CRC matches the codec's */
		case_begin("%s, CRC recomputed by the test", sample->name);
		memcpy(copy, sample->data, sample->len);
		fix_part_crc(copy, sample->len);
		CHECK(memcmp(copy, sample->data, sample->len) == 0);
		case_end();

		for (int w = 0; w < (int) lengthof(wrong); w++)
		{
			if (wrong[w] == crc)
				continue;
			memcpy(copy, sample->data, sample->len);
			store_le(copy + PH_CRC, wrong[w], 4);
			case_begin("%s, wrong checksum %d", sample->name, w);
			expect_part_rejected(copy, sample->len, "checksum", NULL);
			case_end();
		}
		pfree(copy);
	}
	group_end();
}

/*
 * Builds a block around raw columns the way part_codec.c does, with the
 * version and header fields given here and a valid CRC; a one-time block
 * (version 2) gets time after its header.  Returns a malloc'd block of
 * exactly *len bytes.
 */
static char *
forge_block(uint8 version, int64 time, const char *raw, uint64 raw_len,
			uint64 nupdates, uint64 header_raw, int64 diff_sum, uint64 extra,
			uint64 *len)
{
	uint64		body = version == PS_PART_VERSION_ONE_TIME ?
		PS_PART_HEADER_SIZE + PS_PART_TIME_SIZE : PS_PART_HEADER_SIZE;
	size_t		bound = ZSTD_compressBound(raw_len);
	char	   *part = malloc(body + bound + extra);
	size_t		comp;

	if (part == NULL)
		setup_failed("out of memory");
	comp = ZSTD_compress(part + body, bound, raw, raw_len, 1);
	if (ZSTD_isError(comp))
		setup_failed(ZSTD_getErrorName(comp));
	memset(part, 0, PS_PART_HEADER_SIZE);
	memset(part + body + comp, 0, extra);
	store_le(part + PH_MAGIC, PS_PART_MAGIC, 4);
	part[PH_VERSION] = (char) version;
	store_le(part + PH_NUPDATES, nupdates, 4);
	store_le(part + PH_RAW, header_raw, 4);
	store_le(part + PH_COMP, comp + extra, 4);
	store_le(part + PH_DIFFSUM, (uint64) diff_sum, 8);
	if (body > PS_PART_HEADER_SIZE)
		store_le(part + PH_ONE_TIME, (uint64) time, PS_PART_TIME_SIZE);
	*len = body + comp + extra;
	fix_part_crc(part, *len);
	return part;
}

/* Forges a version-1 part (times in the columns) around raw columns. */
static char *
forge_part(const char *raw, uint64 raw_len, uint64 nupdates, uint64 header_raw,
		   int64 diff_sum, uint64 extra, uint64 *len)
{
	return forge_block(PS_PART_VERSION, 0, raw, raw_len, nupdates, header_raw,
					   diff_sum, extra, len);
}

/* Forges a version-1 part of updates encoded by the reference writer. */
static char *
forge_updates(const PsUpdate *u, int n, int64 delta_sum, uint64 *len)
{
	StringInfoData raw;
	char	   *part;

	initStringInfo(&raw);
	ref_columns(&raw, u, n, true);
	part = forge_part(raw.data, raw.len, n, raw.len,
					  wrapping_diff_sum(u, n) + delta_sum, 0, len);
	pfree(raw.data);
	return part;
}

/*
 * Forges a one-time block of updates (their times ignored) at time, its
 * columns by the reference writer, with or without a time column.
 */
static char *
forge_one_time(const PsUpdate *u, int n, int64 time, bool with_times,
			   uint64 *len)
{
	StringInfoData raw;
	char	   *part;

	initStringInfo(&raw);
	ref_columns(&raw, u, n, with_times);
	part = forge_block(PS_PART_VERSION_ONE_TIME, time, raw.data, raw.len, n,
					   raw.len, wrapping_diff_sum(u, n), 0, len);
	pfree(raw.data);
	return part;
}

/* Forges a part of raw bytes given here, with n updates. */
static char *
forge_raw(const char *raw, uint64 raw_len, uint64 n, uint64 *len)
{
	return forge_part(raw, raw_len, n, raw_len, 0, 0, len);
}

/* Checks a forged part is rejected by a structural check, not the CRC. */
static void
expect_forged_rejected(const char *name, char *part, uint64 len,
					   const char *want)
{
	case_begin("%s", name);
	expect_part_rejected(part, len, want, "checksum");
	case_end();
	free(part);
}

/*
 * Forges a bounded block of the n updates u (their times ignored) at time
 * 7: its columns by the reference writer, then the given bounds bytes,
 * whose size its header says is header_bounds.  A malloc'd block.
 */
static char *
forge_bounded(const PsUpdate *u, int n, const StringInfo bounds,
			  uint64 header_bounds, uint64 *len)
{
	StringInfoData raw;
	size_t		bound;
	size_t		comp;
	char	   *part;

	initStringInfo(&raw);
	ref_columns(&raw, u, n, false);
	bound = ZSTD_compressBound(raw.len);
	part = malloc(PH_FIRST + bounds->len + bound);
	if (part == NULL)
		setup_failed("out of memory");
	comp = ZSTD_compress(part + PH_FIRST + bounds->len, bound, raw.data, raw.len, 1);
	if (ZSTD_isError(comp))
		setup_failed(ZSTD_getErrorName(comp));
	memset(part, 0, PS_PART_HEADER_SIZE);
	store_le(part + PH_MAGIC, PS_PART_MAGIC, 4);
	part[PH_VERSION] = PS_PART_VERSION_BOUNDED;
	store_le(part + PH_BOUNDS, header_bounds, 2);
	store_le(part + PH_NUPDATES, n, 4);
	store_le(part + PH_RAW, raw.len, 4);
	store_le(part + PH_COMP, comp, 4);
	store_le(part + PH_DIFFSUM, (uint64) wrapping_diff_sum(u, n), 8);
	store_le(part + PH_ONE_TIME, 7, PS_PART_TIME_SIZE);
	if (bounds->len > 0)
		memcpy(part + PH_FIRST, bounds->data, bounds->len);
	*len = PH_FIRST + bounds->len + comp;
	fix_part_crc(part, *len);
	pfree(raw.data);
	return part;
}

/* The three updates of the forged bounded blocks: keys "b", "b", "c" */
static const PsUpdate forged_block_updates[] = {
	{"b", "x", 1, 1, 7, 1},
	{"b", "y", 1, 1, 7, -2},
	{"c", "", 1, 0, 7, 3},
};

/*
 * Bounded blocks (version 3) forged with a valid CRC: intact ones decode
 * and give their bounds; bounds that are not the block's first and last
 * update, malformed bounds, and sizes in the header that do not fit are
 * rejected, as are the reserved header bytes set in blocks of versions 1
 * and 2.
 */
static void
test_part_bounded_forged(void)
{
	const PsUpdate *u = forged_block_updates;
	static const PsUpdate other = {"a", "x", 1, 1, 7, 1};
	static const PsUpdate other_val = {"c", "\0", 1, 1, 7, 1};
	StringInfoData bounds;
	PsUpdate	first;
	PsUpdate	last;
	char	   *part;
	uint64		len;

	group_begin("part bounded blocks (forged, valid CRC)");
	initStringInfo(&bounds);

	case_begin("intact bounded block");
	ref_bounds(&bounds, &u[0], &u[2]);
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_decodes_to(part, len, u, 3);
	if (CHECK(ps_part_block_bounds(part, len, &first, &last)))
	{
		first.diff = u[0].diff;
		last.diff = u[2].diff;
		updates_equal(&first, &u[0], 1);
		updates_equal(&last, &u[2], 1);
	}
	free(part);
	case_end();

	resetStringInfo(&bounds);
	ref_bounds(&bounds, &other, &u[2]);
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("first bound another key", part, len, "bounds do not match");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &other_val);
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("last bound another val", part, len, "bounds do not match");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[2], &u[0]);
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("bounds swapped", part, len, "bounds do not match");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &u[1]);
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("last bound an inner update", part, len, "bounds do not match");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &u[2]);
	appendStringInfoChar(&bounds, 'z');
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("a byte after the bounds", part, len, "bounds are malformed");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &u[2]);
	bounds.len--;
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("bounds a byte short", part, len, "bounds are malformed");
	resetStringInfo(&bounds);
	appendStringInfoString(&bounds, "\x80\x80");
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	expect_forged_rejected("bounds a truncated varint", part, len, "bounds are malformed");
	resetStringInfo(&bounds);
	part = forge_bounded(u, 3, &bounds, 0, &len);
	expect_forged_rejected("no bounds", part, len, "bounds are malformed");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &u[2]);
	part = forge_bounded(u, 3, &bounds, 0xFFFF, &len);
	expect_forged_rejected("bounds' size past the block", part, len, "length");
	part = forge_bounded(u, 3, &bounds, bounds.len - 1, &len);
	/* the block then ends a byte early, its bounds cut short */
	expect_forged_rejected("bounds' size a byte short", part, len, "bounds are malformed");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &u[0]);
	part = forge_bounded(u, 0, &bounds, bounds.len, &len);
	expect_forged_rejected("a bounded block of no updates", part, len, "bounds are malformed");

	/* the reserved bytes of the other versions */
	part = forge_one_time(u, 3, 7, false, &len);
	store_le(part + PH_BOUNDS, 1, 2);
	fix_part_crc(part, len);
	expect_forged_rejected("one-time block with a bounds' size", part, len, "version");
	part = forge_updates(u, 3, 0, &len);
	part[PH_VERSION + 1] = 4;
	fix_part_crc(part, len);
	expect_forged_rejected("version 1 with an unknown flag", part, len, "version");
	/* a block that says its diffs are positive must hold no other */
	part = forge_updates(u, 3, 0, &len);
	part[PH_VERSION + 1] = PS_BLOCK_POSITIVE;
	fix_part_crc(part, len);
	expect_forged_rejected("version 1 positive with a negative diff", part, len,
						   "positive");
	resetStringInfo(&bounds);
	ref_bounds(&bounds, &u[0], &u[2]);
	part = forge_bounded(u, 3, &bounds, bounds.len, &len);
	part[PH_VERSION + 1] = 0x80;
	fix_part_crc(part, len);
	expect_forged_rejected("version 3 with an unknown flag", part, len, "version");
	pfree(bounds.data);
	group_end();
}

/* Offset of the key filter's bits in the bounded block at part. */
static uint64
block_filter_bits(const char *part)
{
	return PH_FIRST + load_le(part + PH_BOUNDS, 2) + 1;
}

/* Stores v big-endian in 4 bytes at p, so that such keys sort as numbers. */
static void
store_be32(char *p, uint32 v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (char) (v >> (24 - 8 * i));
}

/* The big-endian 4-byte number at p. */
static uint32
load_be32(const char *p)
{
	uint32		v = 0;

	for (int i = 0; i < 4; i++)
		v = (v << 8) | (uint8) p[i];
	return v;
}

/*
 * Forges a bounded block of the three updates u at time 7 whose key
 * filter, after its bounds, is made with nhashes hashes.  A malloc'd block.
 */
static char *
forge_filtered(const PsUpdate *u, int nhashes, uint64 *len)
{
	StringInfoData tail;
	int			bounds_len;
	char	   *part;

	initStringInfo(&tail);
	ref_bounds(&tail, &u[0], &u[2]);
	bounds_len = tail.len;
	ref_key_filter(&tail, u, 3, nhashes);
	part = forge_bounded(u, 3, &tail, bounds_len, len);
	part[PH_VERSION + 1] = PS_BLOCK_KEY_FILTER;
	fix_part_crc(part, *len);
	pfree(tail.data);
	return part;
}

/*
 * Key filters of bounded blocks forged with a valid CRC: an intact one
 * decodes, holds its keys and tells a key it was not made of; one that
 * misses a key of its block, or says it uses no hash or too many, is
 * rejected, and so is the flag on a block without the filter's bytes.
 */
static void
test_part_key_filter_forged(void)
{
	const PsUpdate *u = forged_block_updates;
	PsKeyFilter filter;
	char	   *part;
	uint64		len;
	int			absent = 0;

	group_begin("part key filters (forged, valid CRC)");
	case_begin("intact key filter");
	part = forge_filtered(u, PS_KEY_FILTER_HASHES, &len);
	expect_decodes_to(part, len, u, 3);
	if (CHECK(ps_part_block_key_filter(part, len, &filter)))
	{
		CHECK(filter.nhashes == PS_KEY_FILTER_HASHES);
		CHECK(filter.nbytes == (3 * PS_KEY_FILTER_BITS_PER_KEY + 7) / 8);
		CHECK(ps_key_filter_may_hold(&filter, "b", 1));
		CHECK(ps_key_filter_may_hold(&filter, "c", 1));
		/* 4 bytes, 2 keys of 7 bits: most other keys are told apart */
		for (char k = 'd'; k <= 'z'; k++)
			absent += !ps_key_filter_may_hold(&filter, &k, 1);
		CHECK(absent > 0);
	}
	free(part);
	case_end();

	/* a filter with every bit cleared holds no key of its block */
	part = forge_filtered(u, PS_KEY_FILTER_HASHES, &len);
	memset(part + block_filter_bits(part), 0,
		   (3 * PS_KEY_FILTER_BITS_PER_KEY + 7) / 8);
	fix_part_crc(part, len);
	expect_forged_rejected("a key filter of no keys", part, len,
						   "key filter does not hold");
	part = forge_filtered(u, 0, &len);
	expect_forged_rejected("a key filter of no hashes", part, len,
						   "key filter is malformed");
	part = forge_filtered(u, PS_KEY_FILTER_HASHES_MAX + 1, &len);
	expect_forged_rejected("a key filter of too many hashes", part, len,
						   "key filter is malformed");
	part = forge_one_time(u, 3, 7, false, &len);
	part[PH_VERSION + 1] = PS_BLOCK_KEY_FILTER;
	fix_part_crc(part, len);
	expect_forged_rejected("a key filter's flag on a block without one", part, len,
						   "length does not match");
	/* a block of no updates has no keys to filter (and a filter of no bits) */
	part = forge_one_time(u, 0, 7, false, &len);
	part = realloc(part, len + 1);
	memmove(part + PH_FIRST + 1, part + PH_FIRST, len - PH_FIRST);
	part[PH_FIRST] = PS_KEY_FILTER_HASHES;
	len++;
	part[PH_VERSION + 1] = PS_BLOCK_KEY_FILTER;
	fix_part_crc(part, len);
	expect_forged_rejected("a key filter in a block of no updates", part, len,
						   "key filter is malformed");
	group_end();
}

/*
 * A large part's key filters: each bounded block's holds its keys and
 * tells all but about 1% of keys it was not made of (the rate 10 bits and
 * 7 hashes a key give).
 */
static void
test_part_key_filter_rate(void)
{
	int			n = 20000;
	PsUpdate   *u = palloc(sizeof(PsUpdate) * n);
	char	   *keys = palloc((size_t) n * 16);
	char	   *vals = palloc((size_t) n * 16);
	PsPartInfo	info;
	const char *errmsg = NULL;
	char	   *part;
	uint64		off = 0;
	int			filtered = 0;
	int			tries = 0;
	int			held = 0;

	group_begin("part key filter rate");
	case_begin("20000 updates of 16-byte keys, one time");
	for (int i = 0; i < n; i++)
	{
		/* even numbers, big-endian: sorted, and odd ones are absent */
		memset(&keys[i * 16], 'k', 12);
		store_be32(&keys[i * 16 + 12], (uint32) (2 * i));
		memset(&vals[i * 16], 'v', 16);
		u[i] = (PsUpdate) {&keys[i * 16], &vals[i * 16], 16, 16, 5, 1};
	}
	part = ps_part_encode(u, n, 1, &info, &errmsg);
	if (CHECK(part != NULL))
	{
		while (off < info.encoded_size)
		{
			uint64		blen = frame_offset(part + off) + load_le(part + off + PH_COMP, 4);
			PsKeyFilter filter;
			PsUpdate	first;
			PsUpdate	last;

			if (ps_part_block_key_filter(part + off, blen, &filter) &&
				CHECK(ps_part_block_bounds(part + off, blen, &first, &last)))
			{
				uint32		lo = load_be32(first.key + 12);
				uint32		hi = load_be32(last.key + 12);
				char		probe[16];

				filtered++;
				memset(probe, 'k', 12);
				for (uint32 v = lo; v <= hi; v++)
				{
					store_be32(probe + 12, v);
					if (v % 2 == 0)
						CHECK(ps_key_filter_may_hold(&filter, probe, 16));
					else
					{
						tries++;
						held += ps_key_filter_may_hold(&filter, probe, 16);
					}
				}
			}
			off += blen;
		}
		CHECK(filtered > 10);
		CHECK(tries > 15000);
		CHECK(held * 100 < tries * 2);
		pfree(part);
	}
	case_end();
	pfree(u);
	pfree(keys);
	pfree(vals);
	group_end();
}

/* CRC-valid parts that break the format in one way each. */
static void
test_part_forged(void)
{
	static const PsUpdate base[] = {
		{"a", "x", 1, 1, 1, 1},
		{"a", "y", 1, 1, 5, -2},
		{"b", "x", 1, 1, -3, 7},
	};
	static const uint8 bad_versions[] = {0, 4, 5, 0x81, 0xFF};
	PsUpdate	u[3];
	StringInfoData raw;
	StringInfoData untimed;
	PsDecodedPart dec;
	const char *errmsg = NULL;
	char	   *part;
	uint64		len;
	uint64		raw_len;

	group_begin("part forged (valid CRC)");

	/* the forging itself is right: an intact forged part decodes */
	case_begin("forged intact part");
	part = forge_updates(base, 3, 0, &len);
	if (CHECK(ps_part_decode(part, len, &dec, NULL, &errmsg)))
	{
		if (CHECK(dec.nupdates == 3))
			updates_equal(dec.updates, base, 3);
		ps_decoded_part_free(&dec);
	}
	free(part);
	case_end();

	initStringInfo(&raw);
	ref_columns(&raw, base, 3, true);
	raw_len = raw.len;

	/* order and consolidation */
	memcpy(u, base, sizeof(u));
	SWAP(PsUpdate, u[0], u[1]);
	part = forge_updates(u, 3, 0, &len);
	expect_forged_rejected("vals out of order", part, len, "not sorted");

	memcpy(u, base, sizeof(u));
	SWAP(PsUpdate, u[1], u[2]);
	part = forge_updates(u, 3, 0, &len);
	expect_forged_rejected("keys out of order", part, len, "not sorted");

	memcpy(u, base, sizeof(u));
	u[1] = u[0];
	u[1].diff = 4;
	part = forge_updates(u, 3, 0, &len);
	expect_forged_rejected("equal (key, val, time)", part, len, "not sorted");

	memcpy(u, base, sizeof(u));
	u[1] = u[0];
	u[1].time = 0;
	part = forge_updates(u, 3, 0, &len);
	expect_forged_rejected("times out of order", part, len, "not sorted");

	memcpy(u, base, sizeof(u));
	u[0].key = "\xff";
	u[1].key = "\x01";
	part = forge_updates(u, 2, 0, &len);
	expect_forged_rejected("bytes compared signed", part, len, "not sorted");

	memcpy(u, base, sizeof(u));
	u[1].diff = 0;
	part = forge_updates(u, 3, 0, &len);
	expect_forged_rejected("zero diff", part, len, "zero diff");

	part = forge_updates(base, 3, 1, &len);
	expect_forged_rejected("wrong diff sum", part, len, "diff sum");

	/* header counts and sizes */
	appendStringInfoChar(&raw, 0);
	part = forge_raw(raw.data, raw_len + 1, 3, &len);
	expect_forged_rejected("trailing raw byte", part, len, "trailing");
	part = forge_raw(raw.data, raw_len, 4, &len);
	expect_forged_rejected("update count too high", part, len, "malformed");
	part = forge_raw(raw.data, raw_len, 2, &len);
	expect_forged_rejected("update count too low", part, len, NULL);
	part = forge_raw(raw.data, raw_len, raw_len / 4 + 1, &len);
	expect_forged_rejected("update count past raw size / 4", part, len, "update count");
	part = forge_raw(raw.data, raw_len, 0xFFFFFFFF, &len);
	expect_forged_rejected("update count 2^32 - 1", part, len, "update count");
	part = forge_part(raw.data, raw_len, 3, PS_PART_MAX_RAW + 1, 6, 0, &len);
	expect_forged_rejected("raw size past the limit", part, len, "raw size");
	part = forge_part(raw.data, raw_len, 3, 0xFFFFFFFF, 6, 0, &len);
	expect_forged_rejected("raw size 2^32 - 1", part, len, "raw size");
	part = forge_part(raw.data, raw_len, 3, raw_len + 1, 6, 0, &len);
	expect_forged_rejected("raw size too high", part, len, "frame size");
	part = forge_part(raw.data, raw_len, 3, raw_len - 1, 6, 0, &len);
	expect_forged_rejected("raw size too low", part, len, "frame size");
	part = forge_part(raw.data, 0, 2, 8, 0, 0, &len);
	len = PS_PART_HEADER_SIZE;
	store_le(part + PH_COMP, 0, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("no frame", part, len, "frame size");

	/* the envelope, with a CRC that matches */
	part = forge_raw(raw.data, raw_len, 3, &len);
	store_le(part + PH_MAGIC, PS_PART_MAGIC ^ 1, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("bad magic", part, len, "magic");
	for (int v = 0; v < (int) lengthof(bad_versions); v++)
	{
		char		name[64];

		snprintf(name, sizeof(name), "bad version %d", bad_versions[v]);
		part = forge_raw(raw.data, raw_len, 3, &len);
		part[PH_VERSION] = (char) bad_versions[v];
		fix_part_crc(part, len);
		expect_forged_rejected(name, part, len, "version");
		snprintf(name, sizeof(name), "one-time block as version %d", bad_versions[v]);
		part = forge_one_time(base, 3, 1, false, &len);
		part[PH_VERSION] = (char) bad_versions[v];
		fix_part_crc(part, len);
		expect_forged_rejected(name, part, len, "version");
	}
	part = forge_raw(raw.data, raw_len, 3, &len);
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE + 1, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("frame size too high", part, len, "length");
	part = forge_raw(raw.data, raw_len, 3, &len);
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE - 1, 4);
	fix_part_crc(part, len);
	/* the byte after the shorter frame reads as another block's header */
	expect_forged_rejected("frame size too low", part, len, "header");

	/* the frame */
	part = forge_raw(raw.data, raw_len, 3, &len);
	memset(part + PS_PART_HEADER_SIZE, 0xAA, len - PS_PART_HEADER_SIZE);
	fix_part_crc(part, len);
	expect_forged_rejected("garbage frame", part, len, "frame size");
	part = forge_raw(raw.data, raw_len, 3, &len);
	len--;
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("truncated frame", part, len, "decompress");
	part = forge_part(raw.data, raw_len, 3, raw_len, 6, 1, &len);
	expect_forged_rejected("byte after the frame", part, len, "decompress");

	/* one-time blocks, and the columns of the other version */
	case_begin("forged intact one-time block");
	part = forge_one_time(base, 3, -9, false, &len);
	if (CHECK(ps_part_decode(part, len, &dec, NULL, &errmsg)))
	{
		memcpy(u, base, sizeof(u));
		for (int i = 0; i < 3; i++)
			u[i].time = -9;
		if (CHECK(dec.nupdates == 3))
			updates_equal(dec.updates, u, 3);
		ps_decoded_part_free(&dec);
	}
	free(part);
	case_end();
	initStringInfo(&untimed);
	ref_columns(&untimed, base, 3, false);
	part = forge_one_time(base, 3, 5, true, &len);
	expect_forged_rejected("one-time block with a time column", part, len, "trailing");
	part = forge_raw(untimed.data, untimed.len, 3, &len);
	expect_forged_rejected("version 1 without a time column", part, len, "malformed");
	part = forge_block(PS_PART_VERSION_ONE_TIME, 0, untimed.data, untimed.len,
					   untimed.len / 3 + 1, untimed.len, 6, 0, &len);
	expect_forged_rejected("one-time update count past raw size / 3", part, len,
						   "update count");
	/* past a quarter of the raw size, where version 1 would stop it */
	part = forge_block(PS_PART_VERSION_ONE_TIME, 0, untimed.data, untimed.len,
					   untimed.len / 4 + 1, untimed.len, 6, 0, &len);
	expect_forged_rejected("one-time update count past raw size / 4", part, len,
						   "malformed");
	part = forge_block(PS_PART_VERSION_ONE_TIME, 0, untimed.data, untimed.len, 3,
					   untimed.len + 1, 6, 0, &len);
	expect_forged_rejected("one-time raw size too high", part, len, "frame size");
	part = forge_one_time(base, 3, 0, false, &len);
	part[PH_VERSION] = PS_PART_VERSION;
	fix_part_crc(part, len);
	/* a block of its frame size from the header on: the time starts the frame */
	expect_forged_rejected("one-time block as version 1", part, len, "frame size");
	part = forge_one_time(base, 3, 0, false, &len);
	part[PH_VERSION] = PS_PART_VERSION;
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE, 4);
	fix_part_crc(part, len);
	/* its time reads as the start of the frame */
	expect_forged_rejected("one-time block as version 1, time in the frame", part, len,
						   "frame size");
	part = forge_updates(base, 3, 0, &len);
	part[PH_VERSION] = PS_PART_VERSION_ONE_TIME;
	fix_part_crc(part, len);
	expect_forged_rejected("version 1 block as one-time", part, len, "length");
	part = forge_updates(base, 3, 0, &len);
	part[PH_VERSION] = PS_PART_VERSION_ONE_TIME;
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE - PS_PART_TIME_SIZE, 4);
	fix_part_crc(part, len);
	/* the frame's first bytes read as the time */
	expect_forged_rejected("version 1 block as one-time, frame as time", part, len,
						   "frame size");
	part = forge_one_time(base, 3, 0, false, &len);
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE - PS_PART_TIME_SIZE + 1, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("one-time frame size too high", part, len, "length");
	part = forge_one_time(base, 3, 0, false, &len);
	store_le(part + PH_COMP, len - PS_PART_HEADER_SIZE - PS_PART_TIME_SIZE - 1, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("one-time frame size too low", part, len, "header");
	part = forge_one_time(base, 3, 0, false, &len);
	store_le(part + PH_COMP, 0, 4);
	len = PS_PART_HEADER_SIZE + PS_PART_TIME_SIZE;
	fix_part_crc(part, len);
	expect_forged_rejected("one-time block with no frame", part, len, "frame size");
	part = forge_one_time(base, 3, 0, false, &len);
	len = PS_PART_HEADER_SIZE + PS_PART_TIME_SIZE - 1;
	store_le(part + PH_COMP, 0, 4);
	fix_part_crc(part, len);
	expect_forged_rejected("one-time block cut in its time", part, len, "length");
	pfree(untimed.data);

	/* varints */
	part = forge_raw("\0\0\0\x80", 4, 1, &len);
	expect_forged_rejected("truncated varint", part, len, "malformed");
	part = forge_raw("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\0\0\0", 13, 1, &len);
	expect_forged_rejected("11-byte varint", part, len, "malformed");
	/* bits past 64 would leave a key length of 0 and an otherwise valid part */
	part = forge_raw("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02\0\0\x02", 13, 1, &len);
	expect_forged_rejected("varint past 64 bits", part, len, "malformed");
	part = forge_raw("\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\0\0\x02", 13, 1, &len);
	expect_forged_rejected("key length 2^63", part, len, "malformed");
	part = forge_raw("\x64\0\0\x02", 4, 1, &len);
	expect_forged_rejected("key past the end", part, len, "malformed");
	part = forge_raw("\0\x64\0\x02", 4, 1, &len);
	expect_forged_rejected("val past the end", part, len, "malformed");
	part = forge_raw("\0\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"
					 "\0\0\0\0\x02\x02", 17, 2, &len);
	expect_forged_rejected("second key of 2^63 bytes", part, len, "malformed");
	{
		StringInfoData big;

		/* two keys just under the limit, whose sum is past it */
		initStringInfo(&big);
		ref_varint(&big, PS_PART_MAX_RAW);
		ref_varint(&big, PS_PART_MAX_RAW);
		appendBinaryStringInfo(&big, "\0\0\0\0\x02\x02", 6);
		part = forge_raw(big.data, big.len, 2, &len);
		expect_forged_rejected("key lengths add past the end", part, len, "malformed");
		resetStringInfo(&big);
		ref_varint(&big, (uint64) PS_PART_MAX_RAW + 1);
		appendBinaryStringInfo(&big, "\0\0\x02", 3);
		part = forge_raw(big.data, big.len, 1, &len);
		expect_forged_rejected("key length past the limit", part, len, "malformed");
		resetStringInfo(&big);
		ref_varint(&big, UINT64CONST(0xFFFFFFFF) + 1);
		appendBinaryStringInfo(&big, "\0\0\x02", 3);
		part = forge_raw(big.data, big.len, 1, &len);
		expect_forged_rejected("key length 2^32", part, len, "malformed");
		pfree(big.data);
	}
	pfree(raw.data);
	group_end();
}

/*
 * Random byte changes in the sample parts (header fields or frame) with
 * the CRC recomputed.  A part may still decode: then it must hold up.
 */
static void
test_part_forged_fuzz(int nseeds, uint64 first_seed)
{
	int			accepted = 0;

	group_begin("part forged fuzz");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		const Sample *sample;
		char	   *copy;
		int			nflips;
		PsDecodedPart dec;
		PsPartInfo	info;
		const char *errmsg = NULL;

		pg_prng_seed(&rng, seed);
		sample = &part_samples[1 + rnd(&rng, NPART_SAMPLES - 1)];
		nflips = 1 + (int) rnd(&rng, 3);
		copy = exact_copy(sample->data, sample->len);
		for (int f = 0; f < nflips; f++)
		{
			uint64		pos;

			if (rnd(&rng, 4) == 0)
				pos = PH_NUPDATES + rnd(&rng, PH_CRC - PH_NUPDATES);
			else
				pos = PS_PART_HEADER_SIZE + rnd(&rng, sample->len - PS_PART_HEADER_SIZE);
			copy[pos] ^= (char) (1 + rnd(&rng, 255));
		}
		fix_part_crc(copy, sample->len);

		case_begin("%s, seed " UINT64_FORMAT, sample->name, seed);
		if (ps_part_decode(copy, sample->len, &dec, &info, &errmsg))
		{
			/* what decodes must be a valid part */
			accepted++;
			CHECK(dec.nupdates == info.nupdates);
			/* all at the time of a one-time block */
			if (filter_offset(copy) > PS_PART_HEADER_SIZE)
				for (uint32 i = 0; i < dec.nupdates; i++)
					CHECK(dec.updates[i].time ==
						  (int64) load_le(copy + PH_ONE_TIME, PS_PART_TIME_SIZE));
			CHECK(info.nupdates == load_le(copy + PH_NUPDATES, 4));
			CHECK(wrapping_diff_sum(dec.updates, dec.nupdates) == info.diff_sum);
			for (uint32 i = 0; i < dec.nupdates; i++)
			{
				CHECK(dec.updates[i].diff != 0);
				CHECK(dec.updates[i].key + dec.updates[i].key_len <= dec.raw + info.raw_size);
				CHECK(dec.updates[i].val + dec.updates[i].val_len <= dec.raw + info.raw_size);
				if (i > 0)
					CHECK(ref_cmp_kvt(&dec.updates[i - 1], &dec.updates[i]) < 0);
			}
			ps_decoded_part_free(&dec);
		}
		else
		{
			last_errmsg = errmsg;
			if (CHECK(errmsg != NULL))
				CHECK(strstr(errmsg, "checksum") == NULL);
		}
		case_end();
		free(copy);
	}
	snprintf(group_note, sizeof(group_note), " (%d still valid)", accepted);
	group_end();
}


/*
 * Walks the blocks of a part the codec encoded: counts those of each
 * version (one-time blocks, bounded or not, in *nv2), checks
 * ps_part_block_one_time and ps_part_block_bounds agree with the version
 * byte, each block decodes on its own (a one-time block's updates at its
 * time, another's at several; a bounded block's first and last update
 * its bounds) and their checksums chain to the part's.
 */
static void
walk_part_blocks(const char *part, const PsPartInfo *info, int *nv1, int *nv2)
{
	uint64		off = 0;
	uint32		chain = 0;

	*nv1 = 0;
	*nv2 = 0;
	while (off < info->encoded_size)
	{
		const char *b = part + off;
		const char *errmsg = NULL;
		uint64		blen = ps_part_block_length(b, info->encoded_size - off, &errmsg);
		int64		time = 0;
		bool		one_time;
		bool		bounded;
		PsUpdate	first;
		PsUpdate	last;
		PsDecodedPart dec;
		PsPartInfo	binfo;

		last_errmsg = errmsg;
		if (!CHECK(blen > PS_PART_HEADER_SIZE))
			return;
		one_time = ps_part_block_one_time(b, blen, &time);
		bounded = ps_part_block_bounds(b, blen, &first, &last);
		if (one_time)
		{
			(*nv2)++;
			CHECK((uint8) b[PH_VERSION] ==
				  (bounded ? PS_PART_VERSION_BOUNDED : PS_PART_VERSION_ONE_TIME));
			CHECK(time == (int64) load_le(b + PH_ONE_TIME, PS_PART_TIME_SIZE));
			CHECK(blen == frame_offset(b) + load_le(b + PH_COMP, 4));
		}
		else
		{
			(*nv1)++;
			CHECK(!bounded);
			CHECK((uint8) b[PH_VERSION] == PS_PART_VERSION && load_le(b + PH_BOUNDS, 2) == 0);
			CHECK(blen == frame_offset(b) + load_le(b + PH_COMP, 4));
		}
		if (CHECK(ps_part_decode_block(b, blen, &dec, &binfo, &errmsg)))
		{
			for (uint32 i = 0; i < dec.nupdates && one_time; i++)
				CHECK(dec.updates[i].time == time);
			if (bounded && CHECK(dec.nupdates > 0))
			{
				first.diff = dec.updates[0].diff;
				last.diff = dec.updates[dec.nupdates - 1].diff;
				updates_equal(&first, &dec.updates[0], 1);
				updates_equal(&last, &dec.updates[dec.nupdates - 1], 1);
			}
			if (!one_time)
				CHECK(!ref_one_time(dec.updates, (int) dec.nupdates));
			CHECK(binfo.encoded_size == blen);
			CHECK(binfo.checksum == (uint32) load_le(b + PH_CRC, 4));
			chain = off == 0 ? binfo.checksum : crc_of_pair(chain, binfo.checksum);
			ps_decoded_part_free(&dec);
		}
		else
			last_errmsg = errmsg;
		off += blen;
	}
	CHECK(chain == info->checksum);
}

/*
 * Moves n updates to one time, round-trips them (the reference checker
 * included) and checks the codec makes every block of their part a
 * one-time block at that time, or one empty block of version 1 if they
 * all cancel.  Returns how many one-time blocks the part has.
 */
static int
check_one_time_part(PsUpdate *u, int n, int64 time, int level)
{
	PsPartInfo	info;
	const char *errmsg = NULL;
	char	   *part;
	int			nv1;
	int			nv2;

	for (int i = 0; i < n; i++)
		u[i].time = time;
	CHECK(roundtrip_updates(u, n, level));
	sort_consolidate_or_die(u, &n);
	part = ps_part_encode(u, n, level, &info, &errmsg);
	last_errmsg = errmsg;
	if (!CHECK(part != NULL))
		return 0;
	walk_part_blocks(part, &info, &nv1, &nv2);
	if (n == 0)
		CHECK(nv1 == 1 && nv2 == 0);
	else
		CHECK(nv1 == 0 && nv2 >= 1);
	pfree(part);
	return nv2;
}

/*
 * Retimes a copy of the one-time block of len bytes at block and checks
 * that only its time and CRC change, the info retime fills is the block's
 * with the checksum the decoder then reports, it decodes to the block's
 * updates at time, and retiming it back gives the block again.
 */
static void
check_retime(const char *block, uint64 len, int64 time)
{
	char	   *copy = exact_copy(block, len);
	const uint64 body = PS_PART_HEADER_SIZE + PS_PART_TIME_SIZE;
	PsPartInfo	oinfo;
	PsPartInfo	rinfo;
	PsPartInfo	dinfo;
	PsDecodedPart odec;
	PsDecodedPart ddec;
	const char *errmsg = NULL;
	int64		old = 0;
	int64		got = 0;

	if (!CHECK(ps_part_block_one_time(block, len, &old)) ||
		!CHECK(ps_part_decode_block(block, len, &odec, &oinfo, &errmsg)))
	{
		last_errmsg = errmsg;
		free(copy);
		return;
	}
	memset(&rinfo, 0xAB, sizeof(rinfo));
	if (!CHECK(ps_part_block_retime(copy, len, time, &rinfo, &errmsg)))
	{
		last_errmsg = errmsg;
		ps_decoded_part_free(&odec);
		free(copy);
		return;
	}
	CHECK(rinfo.nupdates == oinfo.nupdates);
	CHECK(rinfo.raw_size == oinfo.raw_size);
	CHECK(rinfo.encoded_size == oinfo.encoded_size && rinfo.encoded_size == len);
	CHECK(rinfo.diff_sum == oinfo.diff_sum);
	CHECK(rinfo.checksum == (uint32) load_le(copy + PH_CRC, 4));
	CHECK(rinfo.checksum ==
		  crc_of(copy, PH_CRC, copy + PS_PART_HEADER_SIZE, len - PS_PART_HEADER_SIZE));
	/* the header but its CRC, and the frame, are as they were */
	CHECK(memcmp(copy, block, PH_CRC) == 0);
	CHECK(memcmp(copy + body, block + body, len - body) == 0);
	CHECK((int64) load_le(copy + PH_ONE_TIME, PS_PART_TIME_SIZE) == time);
	CHECK(ps_part_block_one_time(copy, len, &got) && got == time);
	if ((uint8) block[PH_VERSION] == PS_PART_VERSION_BOUNDED)
	{
		PsUpdate	first;
		PsUpdate	last;

		/* a bounded block's bounds move with it */
		CHECK(ps_part_block_bounds(copy, len, &first, &last) &&
			  first.time == time && last.time == time);
	}
	if (time == old)
		CHECK(memcmp(copy, block, len) == 0);
	if (CHECK(ps_part_decode(copy, len, &ddec, &dinfo, &errmsg)))
	{
		infos_equal(&dinfo, &rinfo);
		if (CHECK(ddec.nupdates == odec.nupdates))
			for (uint32 i = 0; i < ddec.nupdates; i++)
			{
				PsUpdate	moved = odec.updates[i];

				moved.time = time;
				if (!updates_equal(&ddec.updates[i], &moved, 1))
					break;
			}
		ps_decoded_part_free(&ddec);
	}
	else
		last_errmsg = errmsg;

	/* back to its own time: the block as it was */
	if (CHECK(ps_part_block_retime(copy, len, old, &rinfo, &errmsg)))
	{
		CHECK(memcmp(copy, block, len) == 0);
		infos_equal(&rinfo, &oinfo);
	}
	ps_decoded_part_free(&odec);
	free(copy);
}

/*
 * Checks that retiming an exact copy of the len bytes at data is refused
 * with a message that contains want (if given), leaving them as they were.
 */
static void
expect_retime_refused(const char *data, uint64 len, const char *want)
{
	char	   *copy = exact_copy(data, len);
	PsPartInfo	info;
	const char *errmsg = NULL;

	CHECK(!ps_part_block_retime(copy, len, 77, &info, &errmsg));
	last_errmsg = errmsg;
	CHECK(errmsg_has(errmsg, want));
	CHECK(len == 0 || memcmp(copy, data, len) == 0);
	free(copy);
}

/*
 * One-time blocks: updates all at one time make version-2 blocks that
 * round-trip; parts mix them with blocks of several times; version-1
 * blocks at one time still decode; ps_part_block_retime moves a block's
 * updates to another time in place, refusing any other block; and the
 * time is covered by the checksum.
 */
static void
test_part_one_time(void)
{
	static const uint8 masks[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF};
	const int	nu = 4000;
	char		val[100];
	PsUpdate   *u = palloc(sizeof(PsUpdate) * nu);
	PsUpdate   *want = palloc(sizeof(PsUpdate) * nu);
	PsUpdate	r[60];
	pg_prng_state rng;
	BytePool	keys;
	BytePool	vals;
	PsPartInfo	info;
	PsPartInfo	dinfo;
	PsPartInfo	minfo;
	PsDecodedPart dec;
	const char *errmsg = NULL;
	char	   *part;
	char	   *multi;
	char	   *copy;
	uint64		blen0;
	uint64		blen1;
	int64		time;
	int			nv1;
	int			nv2;

	group_begin("part one-time blocks");
	memset(val, 'v', sizeof(val));
	pg_prng_seed(&rng, 777);
	pool_init(&keys, &rng, 30);
	pool_init(&vals, &rng, 6);

	/* every edge time at every level: random, empty and zero-byte updates */
	for (int l = 0; l < (int) lengthof(levels); l++)
		for (int t = 0; t < (int) lengthof(edge_values); t++)
		{
			PsUpdate	one_empty[] = {{"", "", 0, 0, 0, 1}};
			PsUpdate	empties[] = {
				{"", "", 0, 0, 0, -1},
				{"", "\0", 0, 1, 0, 1},
				{"\0", "", 1, 0, 0, PG_INT64_MAX},
				{"\0\0", "", 2, 0, 0, PG_INT64_MIN},
				{"\xff", "", 1, 0, 0, 2},
			};
			int			n = 1 + (int) rnd(&rng, lengthof(r));

			time = edge_values[t];
			case_begin("%d random updates at time " INT64_FORMAT ", level %d",
					   n, time, levels[l]);
			gen_updates(&rng, r, n, &keys, &vals, 2, 0);
			check_one_time_part(r, n, time, levels[l]);
			case_end();
			case_begin("empty key and val at time " INT64_FORMAT ", level %d",
					   time, levels[l]);
			CHECK(check_one_time_part(one_empty, lengthof(one_empty), time, levels[l]) == 1);
			case_end();
			case_begin("empty and zero-byte keys and vals at time " INT64_FORMAT ", level %d",
					   time, levels[l]);
			CHECK(check_one_time_part(empties, lengthof(empties), time, levels[l]) == 1);
			case_end();
		}

	/* a part of several one-time blocks, kept for the cases below */
	numbered_updates(u, nu, val, sizeof(val));
	case_begin("3000 updates at time -42: several one-time blocks");
	CHECK(check_one_time_part(u, 3000, -42, 1) >= 3);
	case_end();
	multi = ps_part_encode(u, 3000, 1, &minfo, &errmsg);
	if (multi == NULL)
		setup_failed(errmsg);
	blen0 = ps_part_block_length(multi, minfo.encoded_size, &errmsg);
	blen1 = ps_part_block_length(multi + blen0, minfo.encoded_size - blen0, &errmsg);
	if (blen0 == 0 || blen1 == 0 || blen0 + blen1 >= minfo.encoded_size)
		setup_failed("a one-time part of fewer than three blocks");

	/* parts that mix one-time blocks with blocks of several times */
	for (int mix = 0; mix < 2; mix++)
	{
		int			n = mix == 0 ? 3000 : nu;

		for (int i = 0; i < n; i++)
			u[i].time = mix == 0 ? (i < 1500 ? 3 : i % 7) :
				(i >= 1000 && i < 3500 ? 9 : i % 7);
		case_begin("%s", mix == 0 ? "a one-time block, then blocks of several times" :
				   "blocks of several times around one-time blocks");
		roundtrip_updates(u, n, 1);
		part = ps_part_encode(u, n, 1, &info, &errmsg);
		last_errmsg = errmsg;
		if (CHECK(part != NULL))
		{
			walk_part_blocks(part, &info, &nv1, &nv2);
			CHECK(nv1 >= (mix == 0 ? 1 : 2) && nv2 >= (mix == 0 ? 1 : 2));
			/* the first block, 1500 updates at one time, carries its bounds */
			CHECK((uint8) part[PH_VERSION] ==
				  (mix == 0 ? PS_PART_VERSION_BOUNDED : PS_PART_VERSION));
			if (CHECK(ps_part_decode(part, info.encoded_size, &dec, &dinfo, &errmsg)))
			{
				if (CHECK(dec.nupdates == (uint32) n))
					updates_equal(dec.updates, u, n);
				infos_equal(&dinfo, &info);
				ps_decoded_part_free(&dec);
			}
			pfree(part);
		}
		case_end();
	}

	case_begin("ps_part_block_one_time");
	for (int s = 0; s < NPART_SAMPLES; s++)
	{
		const Sample *sample = &part_samples[s];
		bool		one_time = (uint8) sample->data[PH_VERSION] == PS_PART_VERSION_ONE_TIME ||
			(uint8) sample->data[PH_VERSION] == PS_PART_VERSION_BOUNDED;

		time = 0;
		CHECK(ps_part_block_one_time(sample->data, sample->len, &time) == one_time);
		if (one_time)
			CHECK(time == (int64) load_le(sample->data + PH_ONE_TIME, PS_PART_TIME_SIZE));
	}
	CHECK(ps_part_block_one_time(part_samples[4].data, part_samples[4].len, &time) &&
		  time == INT64CONST(1234567890123));
	CHECK(ps_part_block_one_time(part_samples[5].data, part_samples[5].len, &time) &&
		  time == PG_INT64_MIN);
	CHECK(ps_part_block_one_time(multi, blen0, &time) && time == -42);
	CHECK(!ps_part_block_one_time(part_samples[1].data, part_samples[1].len, &time));
	case_end();

	/* retime to every edge time */
	for (int t = 0; t < (int) lengthof(edge_values); t++)
	{
		case_begin("retime to " INT64_FORMAT, edge_values[t]);
		check_retime(part_samples[4].data, part_samples[4].len, edge_values[t]);
		check_retime(part_samples[5].data, part_samples[5].len, edge_values[t]);
		check_retime(multi, blen0, edge_values[t]);
		check_retime(multi + blen0, blen1, edge_values[t]);
		case_end();
	}

	case_begin("a block retimed in place inside its part");
	copy = exact_copy(multi, minfo.encoded_size);
	if (CHECK(ps_part_block_retime(copy + blen0, blen1, 1000, &info, &errmsg)) &&
		CHECK(ps_part_decode(copy, minfo.encoded_size, &dec, &dinfo, &errmsg)))
	{
		PsPartInfo	ainfo = {0};
		uint32		first = 0;
		uint32		moved = 0;
		uint32		chain = (uint32) load_le(copy + PH_CRC, 4);

		CHECK(info.checksum == (uint32) load_le(copy + blen0 + PH_CRC, 4));
		/* the part's checksum chains the retimed block's, by hand */
		for (uint64 off = blen0; off < minfo.encoded_size;)
		{
			uint64		blen = frame_offset(copy + off) + load_le(copy + off + PH_COMP, 4);

			chain = crc_of_pair(chain, (uint32) load_le(copy + off + PH_CRC, 4));
			off += blen;
		}
		CHECK(dinfo.checksum == chain);
		CHECK(dinfo.checksum != minfo.checksum);
		for (uint32 i = 0; i < dec.nupdates; i++)
		{
			if (dec.updates[i].time == 1000)
			{
				first = moved == 0 ? i : first;
				moved++;
			}
			else
				CHECK(dec.updates[i].time == -42);
		}
		CHECK(moved == info.nupdates && first > 0);
		walk_part_blocks(copy, &dinfo, &nv1, &nv2);
		CHECK(ps_part_append_blocks(&ainfo, copy, minfo.encoded_size, &errmsg));
		infos_equal(&ainfo, &dinfo);
		ps_decoded_part_free(&dec);
	}
	else
		last_errmsg = errmsg;
	free(copy);
	case_end();

	case_begin("retime refuses blocks of several times");
	for (int s = 0; s < NPART_SAMPLES; s++)
		if ((uint8) part_samples[s].data[PH_VERSION] == PS_PART_VERSION)
			expect_retime_refused(part_samples[s].data, part_samples[s].len,
								  "not of one time");
	case_end();

	case_begin("retime refuses damaged one-time blocks");
	for (int s = 4; s < NPART_SAMPLES; s++)
	{
		const Sample *sample = &part_samples[s];

		copy = exact_copy(sample->data, sample->len);
		/* the time and frame bytes */
		for (uint64 pos = PS_PART_HEADER_SIZE; pos < sample->len; pos++)
		{
			copy[pos] ^= 0x10;
			expect_retime_refused(copy, sample->len, "checksum");
			copy[pos] ^= 0x10;
		}
		copy[PH_MAGIC] ^= 1;
		expect_retime_refused(copy, sample->len, "magic");
		copy[PH_MAGIC] ^= 1;
		copy[PH_VERSION] = 4;
		expect_retime_refused(copy, sample->len, "version");
		free(copy);
		/* cut short, or with a byte more */
		for (uint64 len = 0; len < sample->len; len++)
			expect_retime_refused(sample->data, len, NULL);
		copy = palloc0(sample->len + 1);
		memcpy(copy, sample->data, sample->len);
		expect_retime_refused(copy, sample->len + 1, "length");
		pfree(copy);
	}
	/* a part of several blocks is not one block */
	expect_retime_refused(multi, minfo.encoded_size, "length");
	case_end();

	/* retimed blocks in an assembled part, at its start, middle and end */
	{
		int			starts[] = {0, 1000, 1100, 3000};
		char	   *runs[3];
		PsPartInfo	rinfo[3];
		char	   *assembled = malloc(2 * 1024 * 1024);

		for (int i = 0; i < 3000; i++)
		{
			u[i].time = i >= 1000 && i < 1100 ? 3 : i % 5;
			want[i] = u[i];
			if (i >= 1000 && i < 1100)
				want[i].time = -8;
		}
		for (int run = 0; run < 3; run++)
		{
			runs[run] = ps_part_encode(&u[starts[run]], starts[run + 1] - starts[run], 3,
									   &rinfo[run], &errmsg);
			if (runs[run] == NULL)
				setup_failed(errmsg);
		}
		case_begin("retime of a one-time run");
		CHECK(ps_part_block_length(runs[1], rinfo[1].encoded_size, &errmsg) ==
			  rinfo[1].encoded_size);
		CHECK(ps_part_block_one_time(runs[1], rinfo[1].encoded_size, &time) && time == 3);
		CHECK(!ps_part_block_one_time(runs[0], rinfo[0].encoded_size, &time));
		CHECK(ps_part_block_retime(runs[1], rinfo[1].encoded_size, -8, &info, &errmsg));
		CHECK(info.checksum != rinfo[1].checksum);
		rinfo[1].checksum = info.checksum;
		infos_equal(&info, &rinfo[1]);
		case_end();

		for (int first = 0; first < 3; first++)
			for (int last = first + 1; last <= 3; last++)
			{
				PsPartInfo	ainfo = {0};
				bool		ok = true;

				if (first > 1 || last < 2)
					continue;	/* each with the retimed run */
				case_begin("runs %d to %d assembled, run 1 retimed", first, last - 1);
				for (int run = first; run < last && ok; run++)
				{
					memcpy(assembled + ainfo.encoded_size, runs[run], rinfo[run].encoded_size);
					ok = CHECK(ps_part_append_blocks(&ainfo, runs[run], rinfo[run].encoded_size,
													 &errmsg));
					last_errmsg = errmsg;
				}
				if (first == 1 && last == 2)
					infos_equal(&ainfo, &rinfo[1]);
				if (ok && CHECK(ps_part_decode(assembled, ainfo.encoded_size, &dec, &dinfo,
											   &errmsg)))
				{
					int			n = starts[last] - starts[first];

					if (CHECK(dec.nupdates == (uint32) n))
						updates_equal(dec.updates, &want[starts[first]], n);
					infos_equal(&dinfo, &ainfo);
					ps_decoded_part_free(&dec);
				}
				else
					last_errmsg = errmsg;
				case_end();
			}
		for (int run = 0; run < 3; run++)
			pfree(runs[run]);
		free(assembled);
	}

	/* blocks of version 1 whose updates are all at one time, as once written */
	for (int t = 0; t < (int) lengthof(edge_values); t++)
	{
		PsUpdate	few[] = {
			{"", "", 0, 0, 0, 1},
			{"a", "x", 1, 1, 0, PG_INT64_MIN},
			{"a", "y", 1, 1, 0, -2},
			{"b", "", 1, 0, 0, 7},
		};
		PsUpdate	later[] = {{"c", "z", 1, 1, 0, 5}};
		PsPartInfo	ainfo = {0};
		uint64		len;
		char	   *v2;
		char	   *both;

		time = edge_values[t];
		for (int i = 0; i < (int) lengthof(few); i++)
			few[i].time = time;
		later[0].time = time;
		case_begin("hand-built version-1 block at time " INT64_FORMAT, time);
		part = forge_updates(few, lengthof(few), 0, &len);
		if (CHECK(ps_part_decode(part, len, &dec, &dinfo, &errmsg)))
		{
			if (CHECK(dec.nupdates == lengthof(few)))
				updates_equal(dec.updates, few, lengthof(few));
			CHECK(dinfo.encoded_size == len && dinfo.nupdates == lengthof(few));
			CHECK(dinfo.checksum == (uint32) load_le(part + PH_CRC, 4));
			ps_decoded_part_free(&dec);
		}
		else
			last_errmsg = errmsg;
		CHECK(!ps_part_block_one_time(part, len, &time));
		expect_retime_refused(part, len, "not of one time");

		/* followed by a one-time block of the codec */
		v2 = ps_part_encode(later, 1, 1, &info, &errmsg);
		if (CHECK(v2 != NULL))
		{
			CHECK((uint8) v2[PH_VERSION] == PS_PART_VERSION_ONE_TIME);
			both = malloc(len + info.encoded_size);
			memcpy(both, part, len);
			memcpy(both + len, v2, info.encoded_size);
			CHECK(ps_part_append_blocks(&ainfo, both, len + info.encoded_size, &errmsg));
			if (CHECK(ps_part_decode(both, len + info.encoded_size, &dec, &dinfo, &errmsg)))
			{
				if (CHECK(dec.nupdates == lengthof(few) + 1))
				{
					updates_equal(dec.updates, few, lengthof(few));
					updates_equal(&dec.updates[lengthof(few)], later, 1);
				}
				infos_equal(&dinfo, &ainfo);
				CHECK(dinfo.checksum == crc_of_pair((uint32) load_le(part + PH_CRC, 4),
													info.checksum));
				ps_decoded_part_free(&dec);
			}
			else
				last_errmsg = errmsg;
			free(both);
			pfree(v2);
		}
		free(part);
		case_end();
	}
	case_begin("hand-built version-1 block of 3000 updates at one time");
	for (int i = 0; i < 3000; i++)
		u[i].time = PG_INT64_MAX;
	{
		uint64		len;

		part = forge_updates(u, 3000, 0, &len);
		expect_decodes_to(part, len, u, 3000);
		free(part);
	}
	case_end();

	/* the time is covered by the checksum, in the first block and later ones */
	for (int s = 4; s < NPART_SAMPLES + 2; s++)
	{
		const char *data = s < NPART_SAMPLES ? part_samples[s].data : multi;
		uint64		len = s < NPART_SAMPLES ? part_samples[s].len : minfo.encoded_size;
		uint64		at = s <= NPART_SAMPLES ? PH_ONE_TIME : blen0 + PH_ONE_TIME;

		case_begin("%s, time byte flips", s < NPART_SAMPLES ? part_samples[s].name :
				   s == NPART_SAMPLES ? "one-time part of blocks, first block" :
				   "one-time part of blocks, second block");
		copy = palloc(len);
		for (int pos = 0; pos < PS_PART_TIME_SIZE; pos++)
			for (int m = 0; m < (int) lengthof(masks); m++)
			{
				memcpy(copy, data, len);
				copy[at + pos] ^= masks[m];
				expect_part_rejected(copy, len, "checksum", NULL);
			}
		pfree(copy);
		case_end();
	}

	case_begin("every truncation of a part of one-time blocks");
	for (uint64 len = 0; len < minfo.encoded_size; len++)
	{
		uint64		end = 0;

		/* a cut between blocks leaves a part of the first ones */
		while (end < len)
			end += ps_part_block_length(multi + end, minfo.encoded_size - end, &errmsg);
		if (len > 0 && end == len)
		{
			copy = exact_copy(multi, len);
			if (CHECK(ps_part_decode(copy, len, &dec, &dinfo, &errmsg)))
			{
				CHECK(dinfo.nupdates < minfo.nupdates && dinfo.encoded_size == len);
				ps_decoded_part_free(&dec);
			}
			free(copy);
		}
		else
			expect_part_rejected(multi, len, NULL, NULL);
		if (len < blen0)
		{
			copy = exact_copy(multi, len);
			CHECK(ps_part_block_length(copy, len, &errmsg) == 0);
			CHECK(!ps_part_decode_block(copy, len, &dec, &dinfo, &errmsg));
			free(copy);
		}
	}
	case_end();

	pfree(multi);
	numbered_free(u, nu);
	pfree(u);
	pfree(want);
	pool_free(&keys);
	pool_free(&vals);
	group_end();
}


/* ---------------------------------------------------------------------
 * States
 * ---------------------------------------------------------------------
 */

/* A random NUL-free string of 1 to maxlen bytes. */
static char *
random_name(pg_prng_state *rng, int maxlen)
{
	int			len = 1 + (int) rnd(rng, maxlen);
	char	   *s = palloc(len + 1);

	for (int i = 0; i < len; i++)
		s[i] = (char) (1 + rnd(rng, 255));
	s[len] = '\0';
	return s;
}

/* Fills a part with a real encoded part of a few random updates, inline. */
static void
random_inline_part(pg_prng_state *rng, PsPart *part)
{
	int			n = (int) rnd(rng, 12);
	PsUpdate	u[12];
	char		keys[12][8];
	PsPartInfo	info;
	const char *errmsg = NULL;

	for (int i = 0; i < n; i++)
	{
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		u[i].key = keys[i];
		u[i].key_len = strlen(keys[i]);
		u[i].val = keys[i];
		u[i].val_len = (uint32) rnd(rng, u[i].key_len + 1);
		u[i].time = random_int64(rng);
		u[i].diff = (1 + (int64) rnd(rng, 5)) * (pg_prng_bool(rng) ? 1 : -1);
	}
	sort_consolidate_or_die(u, &n);
	part->blob_key = NULL;
	part->inline_data = ps_part_encode(u, n, 1, &info, &errmsg);
	if (part->inline_data == NULL)
		setup_failed(errmsg);
	part->encoded_size = info.encoded_size;
	part->raw_size = info.raw_size;
	part->nupdates = info.nupdates;
	part->diff_sum = info.diff_sum;
	part->checksum = info.checksum;
}

/*
 * Fills a random state: row type NULL or set, batches with blob parts,
 * real encoded parts inline and random inline bytes (of 0 to 69 bytes).
 * Returns how many real encoded parts it holds.
 */
static int
random_state(pg_prng_state *rng, PsState *st)
{
	int			nreal = 0;

	st->seqno = random_int64(rng);
	st->upper = random_int64(rng);
	st->since = random_int64(rng);
	st->row_type = rnd(rng, 3) == 0 ? NULL :
		random_name(rng, rnd(rng, 10) == 0 ? 400 : 40);
	/* a shard in an object store: state format version 2 */
	st->blob_store = rnd(rng, 4) == 0 ? random_name(rng, 60) : NULL;
	st->nbatches = rnd(rng, 8) == 0 ? 0 : 1 + (int) rnd(rng, 6);
	st->batches = palloc0(sizeof(PsBatch) * Max(st->nbatches, 1));
	for (int b = 0; b < st->nbatches; b++)
	{
		PsBatch    *batch = &st->batches[b];

		batch->lower = random_int64(rng);
		batch->upper = random_int64(rng);
		batch->since = random_int64(rng);
		batch->single_time = pg_prng_bool(rng);
		batch->time = batch->single_time ? random_int64(rng) : 0;
		batch->nparts = (int) rnd(rng, 5);
		batch->parts = palloc0(sizeof(PsPart) * Max(batch->nparts, 1));
		for (int p = 0; p < batch->nparts; p++)
		{
			PsPart	   *part = &batch->parts[p];

			switch (rnd(rng, 3))
			{
				case 0:
					part->blob_key = random_name(rng, 80);
					part->encoded_size = pg_prng_uint64(rng);
					part->raw_size = pg_prng_uint64(rng);
					part->nupdates = pg_prng_uint64(rng);
					part->diff_sum = random_int64(rng);
					part->checksum = pg_prng_uint32(rng);
					part->lower_len = (uint8) rnd(rng, PS_PART_LOWER_MAX + 1);
					for (int q = 0; q < part->lower_len; q++)
						part->lower[q] = (char) pg_prng_uint32(rng);
					break;
				case 1:
					random_inline_part(rng, part);
					nreal++;
					break;
				default:
					part->encoded_size = rnd(rng, 70);
					part->inline_data = palloc(Max(part->encoded_size, 1));
					for (uint64 i = 0; i < part->encoded_size; i++)
						part->inline_data[i] = (char) rnd(rng, 256);
					part->raw_size = pg_prng_uint64(rng);
					part->nupdates = rnd(rng, 1000);
					part->diff_sum = random_int64(rng);
					part->checksum = pg_prng_uint32(rng);
					part->lower_len = (uint8) rnd(rng, PS_PART_LOWER_MAX + 1);
					for (int q = 0; q < part->lower_len; q++)
						part->lower[q] = (char) pg_prng_uint32(rng);
					break;
			}
			part->has_time = rnd(rng, 3) == 0;
			part->time = part->has_time ? random_int64(rng) : 0;
			/* parts written before upper bounds have none */
			part->has_upper = rnd(rng, 3) != 0;
			part->positive = rnd(rng, 2) == 0;
			part->distinct = rnd(rng, 2) == 0;
			part->upper_len = part->has_upper ? (uint8) rnd(rng, PS_PART_LOWER_MAX + 1) : 0;
			for (int q = 0; q < part->upper_len; q++)
				part->upper[q] = (char) pg_prng_uint32(rng);
		}
	}
	return nreal;
}

/* Frees a state, including one that a failed decode left half built. */
static void
state_free(PsState *st)
{
	for (int b = 0; b < st->nbatches; b++)
	{
		PsBatch    *batch = &st->batches[b];

		for (int p = 0; p < batch->nparts; p++)
		{
			if (batch->parts[p].blob_key)
				pfree(batch->parts[p].blob_key);
			if (batch->parts[p].inline_data)
				pfree(batch->parts[p].inline_data);
		}
		if (batch->parts)
			pfree(batch->parts);
	}
	if (st->batches)
		pfree(st->batches);
	if (st->row_type)
		pfree(st->row_type);
	if (st->blob_store)
		pfree(st->blob_store);
	memset(st, 0, sizeof(PsState));
}

/* Length of a state's encoding as state_codec.c documents it. */
static uint64
state_encoded_len(const PsState *st)
{
	uint64		len = STATE_FIXED_BYTES;

	if (st->row_type)
		len += strlen(st->row_type);
	if (st->blob_store)
		len += 2 + strlen(st->blob_store);
	for (int b = 0; b < st->nbatches; b++)
	{
		len += BATCH_FIXED_BYTES + (st->batches[b].single_time ? 8 : 0);
		for (int p = 0; p < st->batches[b].nparts; p++)
		{
			const PsPart *part = &st->batches[b].parts[p];

			len += PART_FIXED_BYTES + part->lower_len + (part->has_time ? 8 : 0) +
				(part->has_upper ? 1 + part->upper_len : 0);
			len += part->blob_key ? 2 + strlen(part->blob_key) : part->encoded_size;
		}
	}
	return len;
}

/* Checks two states are equal, field by field. */
static void
states_equal(const PsState *a, const PsState *b)
{
	CHECK(a->seqno == b->seqno);
	CHECK(a->upper == b->upper);
	CHECK(a->since == b->since);
	if (CHECK((a->row_type == NULL) == (b->row_type == NULL)) && a->row_type)
		CHECK(strcmp(a->row_type, b->row_type) == 0);
	if (CHECK((a->blob_store == NULL) == (b->blob_store == NULL)) && a->blob_store)
		CHECK(strcmp(a->blob_store, b->blob_store) == 0);
	if (!CHECK(a->nbatches == b->nbatches))
		return;
	for (int i = 0; i < a->nbatches; i++)
	{
		const PsBatch *x = &a->batches[i];
		const PsBatch *y = &b->batches[i];

		CHECK(x->lower == y->lower);
		CHECK(x->upper == y->upper);
		CHECK(x->since == y->since);
		CHECK(x->single_time == y->single_time);
		CHECK(x->time == y->time);
		if (!CHECK(x->nparts == y->nparts))
			continue;
		for (int j = 0; j < x->nparts; j++)
		{
			const PsPart *p = &x->parts[j];
			const PsPart *q = &y->parts[j];

			CHECK(p->encoded_size == q->encoded_size);
			CHECK(p->raw_size == q->raw_size);
			CHECK(p->nupdates == q->nupdates);
			CHECK(p->diff_sum == q->diff_sum);
			CHECK(p->checksum == q->checksum);
			CHECK(p->has_time == q->has_time);
			CHECK(p->positive == q->positive);
			CHECK(p->distinct == q->distinct);
			CHECK(p->time == q->time);
			if (CHECK(p->lower_len == q->lower_len))
				CHECK(memcmp(p->lower, q->lower, p->lower_len) == 0);
			if (CHECK(p->has_upper == q->has_upper) &&
				CHECK(p->upper_len == q->upper_len))
				CHECK(memcmp(p->upper, q->upper, p->upper_len) == 0);
			if (CHECK((p->blob_key == NULL) == (q->blob_key == NULL)) && p->blob_key)
				CHECK(strcmp(p->blob_key, q->blob_key) == 0);
			if (CHECK((p->inline_data == NULL) == (q->inline_data == NULL)) &&
				p->inline_data && p->encoded_size == q->encoded_size)
				CHECK(memcmp(p->inline_data, q->inline_data, p->encoded_size) == 0);
		}
		CHECK(ps_batch_updates(x) == ps_batch_updates(y));
		CHECK(ps_batch_encoded_bytes(x) == ps_batch_encoded_bytes(y));
		CHECK(ps_batch_is_inline(x) == ps_batch_is_inline(y));
	}
}

/* Checks the derived figures of a state's batches. */
static void
check_batch_figures(const PsState *st)
{
	for (int b = 0; b < st->nbatches; b++)
	{
		const PsBatch *batch = &st->batches[b];
		uint64		updates = 0;
		uint64		bytes = 0;
		bool		all_inline = batch->nparts > 0;

		for (int p = 0; p < batch->nparts; p++)
		{
			updates += batch->parts[p].nupdates;
			bytes += batch->parts[p].encoded_size;
			if (batch->parts[p].blob_key)
				all_inline = false;
		}
		CHECK(ps_batch_updates(batch) == updates);
		CHECK(ps_batch_encoded_bytes(batch) == bytes);
		CHECK(ps_batch_is_inline(batch) == all_inline);
	}
}

/*
 * Encodes a state, checks the envelope and length against the format,
 * decodes it from an exact-size copy, compares every field, re-encodes the
 * result to the same bytes, and decodes the real inline parts it holds.
 * Returns how many inline parts decoded as parts.
 */
static int
check_state_roundtrip(const PsState *st)
{
	PsState		out;
	PsState		dup;
	uint64		len;
	uint64		len2;
	char	   *data;
	char	   *copy;
	char	   *again;
	const char *errmsg = NULL;
	int			nreal = 0;

	data = ps_state_encode(st, &len);
	CHECK(len == state_encoded_len(st));
	if (!CHECK(len >= STATE_FIXED_BYTES))
	{
		pfree(data);
		return 0;
	}
	CHECK(load_le(data, 4) == PS_STATE_MAGIC);
	CHECK(load_le(data + 4, 4) ==
		  (st->blob_store ? PS_STATE_VERSION_STORE : PS_STATE_VERSION));
	CHECK(load_le(data + len - 4, 4) == crc_of(data, len - 4, NULL, 0));
	check_batch_figures(st);

	copy = exact_copy(data, len);
	pfree(data);
	if (!CHECK(ps_state_decode(copy, len, &out, &errmsg)))
	{
		last_errmsg = errmsg;
		state_free(&out);
		free(copy);
		return 0;
	}
	states_equal(st, &out);
	/* a copy shares nothing with the state: it outlives it, below */
	ps_state_copy(&out, &dup);

	again = ps_state_encode(&out, &len2);
	if (CHECK(len2 == len))
		CHECK(memcmp(again, copy, len) == 0);
	pfree(again);

	for (int b = 0; b < out.nbatches; b++)
	{
		for (int p = 0; p < out.batches[b].nparts; p++)
		{
			const PsPart *part = &out.batches[b].parts[p];
			PsDecodedPart dec;
			PsPartInfo	info;

			if (part->inline_data == NULL ||
				!ps_part_decode(part->inline_data, part->encoded_size, &dec,
								&info, &errmsg))
				continue;
			nreal++;
			CHECK(info.encoded_size == part->encoded_size);
			CHECK(info.raw_size == part->raw_size);
			CHECK(info.nupdates == part->nupdates);
			CHECK(info.diff_sum == part->diff_sum);
			CHECK(info.checksum == part->checksum);
			CHECK(dec.nupdates == part->nupdates);
			ps_decoded_part_free(&dec);
		}
	}
	state_free(&out);
	free(copy);
	states_equal(st, &dup);
	state_free(&dup);
	return nreal;
}

/* Round-trips random states for many seeds. */
static void
test_state_roundtrip(int nseeds, uint64 first_seed)
{
	group_begin("state round-trip");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		PsState		st;
		int			nreal;

		pg_prng_seed(&rng, seed);
		nreal = random_state(&rng, &st);
		case_begin("seed " UINT64_FORMAT ", %d batches", seed, st.nbatches);
		CHECK(check_state_roundtrip(&st) == nreal);
		case_end();
		state_free(&st);
	}
	snprintf(group_note, sizeof(group_note),
			 " (seeds " UINT64_FORMAT "..." UINT64_FORMAT ")",
			 first_seed, first_seed + nseeds - 1);
	group_end();
}

/* A deep copy of a state, through its encoding. */
static void
state_copy(const PsState *st, PsState *out)
{
	uint64		len;
	char	   *data = ps_state_encode(st, &len);
	const char *errmsg = NULL;

	if (!CHECK(ps_state_decode(data, len, out, &errmsg)))
		last_errmsg = errmsg;
	pfree(data);
}

/* Frees the parts of a batch and the array that holds them. */
static void
batch_parts_free(PsBatch *batch)
{
	for (int p = 0; p < batch->nparts; p++)
	{
		if (batch->parts[p].blob_key)
			pfree(batch->parts[p].blob_key);
		if (batch->parts[p].inline_data)
			pfree(batch->parts[p].inline_data);
	}
	if (batch->parts)
		pfree(batch->parts);
	batch->parts = NULL;
	batch->nparts = 0;
}

/*
 * Changes st (a deep copy) the way one CaS may: appends a batch taken from
 * extra, widens the last batch, replaces a run of batches by extra's first
 * (a merge), advances one batch's bounds keeping its parts, or only moves
 * upper and since.  extra's batches that st takes are moved out of it.
 * Returns what it did.
 */
static const char *
random_change(pg_prng_state *rng, PsState *st, PsState *extra)
{
	int			kind = (int) rnd(rng, 5);
	int			n = st->nbatches;

	st->seqno++;
	st->upper = random_int64(rng);
	st->since = rnd(rng, 2) ? st->since : random_int64(rng);
	if (kind == 0 || ((kind == 2 || kind == 3) && n == 0) || kind == 1)
	{
		if (kind == 1 && n > 0)
		{
			st->batches[n - 1].upper = random_int64(rng);
			return "widen";
		}
		if (extra->nbatches == 0)
			return "bounds";
		st->batches = repalloc(st->batches, sizeof(PsBatch) * (n + 1));
		st->batches[n] = extra->batches[0];
		st->nbatches = n + 1;
		extra->batches[0].parts = NULL;
		extra->batches[0].nparts = 0;
		return "append";
	}
	if (kind == 2)
	{
		int			from = (int) rnd(rng, n);
		int			len = 1 + (int) rnd(rng, n - from);

		for (int i = from; i < from + len; i++)
			batch_parts_free(&st->batches[i]);
		if (extra->nbatches > 0)
		{
			st->batches[from] = extra->batches[0];
			extra->batches[0].parts = NULL;
			extra->batches[0].nparts = 0;
			from++;
			len--;
		}
		memmove(&st->batches[from], &st->batches[from + len],
				sizeof(PsBatch) * (n - from - len));
		st->nbatches = n - len;
		return "merge";
	}
	if (kind == 3)
	{
		PsBatch    *b = &st->batches[rnd(rng, n)];

		b->lower = random_int64(rng);
		b->since = random_int64(rng);
		b->single_time = pg_prng_bool(rng);
		b->time = b->single_time ? random_int64(rng) : 0;
		return "rebound";
	}
	return "bounds";
}

/*
 * Applies diff to a deep copy of old, checks it gives `want`, and frees
 * the copy and the parts the diff dropped.
 */
static void
check_diff_applies(const PsState *old, const char *diff, uint64 len,
				   const PsState *want)
{
	PsState		st;
	PsBatch    *before;
	int			nbefore;
	const char *errmsg = NULL;

	state_copy(old, &st);
	nbefore = st.nbatches;
	before = palloc(sizeof(PsBatch) * Max(nbefore, 1));
	memcpy(before, st.batches, sizeof(PsBatch) * nbefore);
	if (!CHECK(ps_state_diff_apply(&st, diff, len, &errmsg)))
		last_errmsg = errmsg;
	else
	{
		uint64		l1;
		uint64		l2;
		char	   *a = ps_state_encode(&st, &l1);
		char	   *b = ps_state_encode(want, &l2);

		states_equal(want, &st);
		if (CHECK(l1 == l2))
			CHECK(memcmp(a, b, l1) == 0);
		pfree(a);
		pfree(b);
	}
	/* the batches of st are new or old; free each parts array once */
	for (int i = 0; i < nbefore; i++)
	{
		bool		kept = false;

		for (int j = 0; j < st.nbatches && !kept; j++)
			kept = st.batches[j].parts == before[i].parts;
		if (!kept)
			batch_parts_free(&before[i]);
	}
	pfree(before);
	state_free(&st);
}

/* Every byte of a diff flipped, and every truncation, is refused, leaving the state. */
static void
check_diff_damage(const PsState *old, const char *diff, uint64 len)
{
	PsState		st;
	char	   *copy = palloc(len);
	const char *errmsg = NULL;

	state_copy(old, &st);
	for (uint64 i = 0; i < len; i++)
	{
		memcpy(copy, diff, len);
		copy[i] ^= 0x5A;
		CHECK(!ps_state_diff_apply(&st, copy, len, &errmsg));
		CHECK(errmsg != NULL);
		CHECK(st.seqno == old->seqno && st.nbatches == old->nbatches);
	}
	for (uint64 cut = 0; cut < len; cut += 1 + len / 16)
		CHECK(!ps_state_diff_apply(&st, diff, cut, &errmsg));
	/* a diff of the next seqno does not follow the state after it */
	st.seqno++;
	CHECK(!ps_state_diff_apply(&st, diff, len, &errmsg));
	st.seqno--;
	states_equal(old, &st);
	pfree(copy);
	state_free(&st);
}

/*
 * State diffs of random states and random changes: a diff applied to the
 * old state gives the new one, byte for byte; a change that keeps a
 * batch's parts writes none of them again; damage is refused.  Also
 * checks ps_state_encoded_size against the encoding.
 */
static void
test_state_diffs(int nseeds, uint64 first_seed)
{
	group_begin("state diffs");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		PsState		old;
		PsState		extra;
		PsState		new;
		char	   *diff;
		uint64		len;
		uint64		full;
		const char *what;

		pg_prng_seed(&rng, seed);
		random_state(&rng, &old);
		random_state(&rng, &extra);
		state_copy(&old, &new);
		what = random_change(&rng, &new, &extra);
		case_begin("seed " UINT64_FORMAT ", %s of %d batches", seed, what, old.nbatches);
		diff = ps_state_diff_encode(&old, &new, &len);
		CHECK(load_le(diff, 4) == PS_DIFF_MAGIC);
		CHECK(load_le(diff + len - 4, 4) == crc_of(diff, len - 4, NULL, 0));
		pfree(ps_state_encode(&new, &full));
		CHECK(ps_state_encoded_size(&new) == full);
		/* widening, new bounds or new frontiers rewrite no part */
		if (strcmp(what, "widen") == 0 || strcmp(what, "rebound") == 0 ||
			strcmp(what, "bounds") == 0)
			CHECK(len <= 4 + 4 + 24 + 12 + 1 + 4 + 33 + 4);
		check_diff_applies(&old, diff, len, &new);
		if (s % 8 == 0)
			check_diff_damage(&old, diff, len);
		case_end();
		pfree(diff);
		state_free(&old);
		state_free(&extra);
		state_free(&new);
	}
	snprintf(group_note, sizeof(group_note),
			 " (seeds " UINT64_FORMAT "..." UINT64_FORMAT ")",
			 first_seed, first_seed + nseeds - 1);
	group_end();
}

/* Makes a blob part with the given key and fields. */
static PsPart
blob_part(const char *key, uint64 encoded_size, uint64 raw_size,
		  uint64 nupdates, int64 diff_sum, uint32 checksum)
{
	PsPart		part;

	memset(&part, 0, sizeof(part));
	part.blob_key = pstrdup(key);
	part.inline_data = NULL;
	part.encoded_size = encoded_size;
	part.raw_size = raw_size;
	part.nupdates = nupdates;
	part.diff_sum = diff_sum;
	part.checksum = checksum;
	return part;
}

/* Makes an inline part of len bytes (i * 7). */
static PsPart
inline_part(uint64 len, uint64 raw_size, uint64 nupdates, int64 diff_sum,
			uint32 checksum)
{
	PsPart		part;

	memset(&part, 0, sizeof(part));
	part.blob_key = NULL;
	part.inline_data = palloc(Max(len, 1));
	for (uint64 i = 0; i < len; i++)
		part.inline_data[i] = (char) (i * 7);
	part.encoded_size = len;
	part.raw_size = raw_size;
	part.nupdates = nupdates;
	part.diff_sum = diff_sum;
	part.checksum = checksum;
	return part;
}

/* Makes a state of one batch holding the given parts (copied). */
static void
one_batch_state(PsState *st, const PsPart *parts, int nparts)
{
	memset(st, 0, sizeof(PsState));
	st->seqno = 7;
	st->upper = 100;
	st->since = 5;
	st->nbatches = 1;
	st->batches = palloc0(sizeof(PsBatch));
	st->batches[0].lower = 0;
	st->batches[0].upper = 100;
	st->batches[0].since = 5;
	st->batches[0].nparts = nparts;
	st->batches[0].parts = palloc(sizeof(PsPart) * Max(nparts, 1));
	memcpy(st->batches[0].parts, parts, sizeof(PsPart) * nparts);
}

/* Round-trips a fixed state as one case, then frees it. */
static void
state_edge_case(const char *name, PsState *st)
{
	case_begin("%s", name);
	check_state_roundtrip(st);
	case_end();
	state_free(st);
}

/* States of fixed edge cases. */
static void
test_state_edges(void)
{
	PsState		st;
	PsPart		parts[3];
	char	   *longname;

	group_begin("state edge cases");

	memset(&st, 0, sizeof(st));
	state_edge_case("empty state", &st);

	memset(&st, 0, sizeof(st));
	st.row_type = pstrdup("public.t");
	st.seqno = PG_INT64_MAX;
	st.upper = PG_INT64_MIN;
	st.since = -1;
	state_edge_case("row type, no batches", &st);

	one_batch_state(&st, NULL, 0);
	state_edge_case("batch without parts", &st);

	parts[0] = inline_part(0, 0, 0, 0, 0);
	one_batch_state(&st, parts, 1);
	state_edge_case("inline part of 0 bytes, last", &st);

	parts[0] = inline_part(1, 0, 0, 0, 0);
	one_batch_state(&st, parts, 1);
	state_edge_case("inline part of 1 byte, last", &st);

	parts[0] = blob_part("k", 1, 2, 3, 4, 5);
	one_batch_state(&st, parts, 1);
	state_edge_case("blob key of 1 byte, last", &st);

	parts[0] = inline_part(0, 1, 2, 3, 4);
	parts[1] = blob_part("key", 5, 6, 7, 8, 9);
	parts[2] = inline_part(0, 1, 2, 3, 4);
	one_batch_state(&st, parts, 3);
	state_edge_case("empty inline parts around a blob", &st);

	parts[0] = blob_part("\xff\x01", PG_UINT64_MAX, PG_UINT64_MAX, PG_UINT64_MAX,
						 PG_INT64_MIN, PG_UINT32_MAX);
	parts[1] = inline_part(33, 0, 0, PG_INT64_MAX, 0);
	one_batch_state(&st, parts, 2);
	st.seqno = PG_INT64_MIN;
	st.upper = PG_INT64_MAX;
	st.since = PG_INT64_MIN;
	st.batches[0].lower = PG_INT64_MIN;
	st.batches[0].upper = PG_INT64_MAX;
	st.batches[0].since = -1;
	st.batches[0].single_time = true;
	state_edge_case("extreme integers", &st);

	longname = palloc(PG_UINT16_MAX + 1);
	memset(longname, 'n', PG_UINT16_MAX);
	longname[PG_UINT16_MAX] = '\0';
	parts[0] = blob_part(longname, 1, 1, 1, 1, 1);
	one_batch_state(&st, parts, 1);
	st.row_type = longname;
	state_edge_case("row type and blob key of 65535 bytes", &st);

	memset(&st, 0, sizeof(st));
	st.nbatches = 1000;
	st.batches = palloc0(sizeof(PsBatch) * st.nbatches);
	for (int b = 0; b < st.nbatches; b++)
	{
		st.batches[b].lower = b;
		st.batches[b].upper = b + 1;
		st.batches[b].single_time = (b % 3 == 0);
		st.batches[b].nparts = b % 2;
		st.batches[b].parts = palloc(sizeof(PsPart));
		if (b % 2)
			st.batches[b].parts[0] = inline_part(b % 5, b, b, -b, b);
	}
	state_edge_case("1000 batches", &st);

	group_end();
}

/*
 * Runs of a batch whose parts have the given lower bounds (NUL-terminated)
 * and times of their own (0: none).
 */
static int
runs_of(const char *const *lowers, const int *times, int n)
{
	PsBatch		batch;
	PsPart		parts[8];
	int			runs;

	memset(&batch, 0, sizeof(batch));
	for (int i = 0; i < n; i++)
	{
		parts[i] = blob_part("k", 1, 1, 1, 1, 1);
		ps_part_set_lower(&parts[i], lowers[i], (uint32) strlen(lowers[i]));
		parts[i].has_time = times[i] != 0;
		parts[i].time = times[i];
	}
	batch.parts = parts;
	batch.nparts = n;
	runs = ps_batch_runs(&batch);
	for (int i = 0; i < n; i++)
		pfree(parts[i].blob_key);
	return runs;
}

/*
 * ps_batch_runs: a new run where a lower bound sorts below the one before,
 * or where the time of a part's own changes.
 */
static void
test_batch_runs(void)
{
	static const struct
	{
		const char *name;
		int			nparts;
		const char *lowers[5];
		int			times[5];
		int			runs;
	}			cases[] = {
		{"no parts: no run", 0, {NULL}, {0}, 0},
		{"ascending and equal lower bounds: one run", 5, {"a", "ab", "b", "b", "c"}, {0}, 1},
		{"one descent: two runs", 4, {"a", "m", "b", "z"}, {0}, 2},
		{"a prefix sorts first: two runs", 2, {"ab", "a"}, {0}, 2},
		{"two descents: three runs", 5, {"x", "a", "y", "b", "zzzzzzzzzzzzzzzzzzzz"}, {0}, 3},
		{"keys equal in their kept prefix: one run", 2,
		{"0123456789abcdefX", "0123456789abcdefA"}, {0}, 1},
		{"ascending lower bounds of one time of their own: one run", 3,
		{"a", "b", "c"}, {7, 7, 7}, 1},
		{"ascending lower bounds of two times: two runs", 3,
		{"a", "b", "c"}, {7, 7, 8}, 2},
		{"a time of its own after none: two runs", 2, {"a", "b"}, {0, 7}, 2},
		{"none after a time of its own: two runs", 2, {"a", "b"}, {7, 0}, 2},
		{"a descent within one time: two runs", 2, {"b", "a"}, {7, 7}, 2},
	};

	group_begin("batch runs");
	for (size_t i = 0; i < lengthof(cases); i++)
	{
		case_begin("%s", cases[i].name);
		CHECK(runs_of(cases[i].lowers, cases[i].times, cases[i].nparts) == cases[i].runs);
		case_end();
	}
	group_end();
}

/* Builds the sample states for the corruption groups. */
static void
make_state_samples(void)
{
	PsState		st;
	PsPart		parts[2];
	pg_prng_state rng;
	char	   *data;

	/* the empty state */
	memset(&st, 0, sizeof(st));
	data = ps_state_encode(&st, &state_samples[0].len);
	state_samples[0].name = "empty state";
	state_samples[0].data = exact_copy(data, state_samples[0].len);
	pfree(data);

	/* a blob part and an inline part, laid out as LAYOUT_* below says */
	parts[0] = blob_part("k1", 1000, 2000, 10, -3, 0xDEADBEEF);
	parts[1] = inline_part(40, 50, 2, 2, 0x01020304);
	one_batch_state(&st, parts, 2);
	st.batches[0].single_time = true;
	st.batches[0].time = 150;
	data = ps_state_encode(&st, &state_samples[1].len);
	state_samples[1].name = "layout state";
	state_samples[1].data = exact_copy(data, state_samples[1].len);
	pfree(data);
	state_free(&st);

	/* random states, the second with a row type */
	for (int i = 2; i < NSTATE_SAMPLES; i++)
	{
		uint64		seed = 7000 + i;

		do
		{
			pg_prng_seed(&rng, seed++);
			random_state(&rng, &st);
			if (st.nbatches > 1 && (i == 2 || st.row_type != NULL))
				break;
			state_free(&st);
		} while (true);
		data = ps_state_encode(&st, &state_samples[i].len);
		state_samples[i].name = i == 2 ? "random state" : "random state with row type";
		state_samples[i].data = exact_copy(data, state_samples[i].len);
		pfree(data);
		state_free(&st);
	}
}

/*
 * Decodes len bytes of a state from an exact-size copy and checks it is
 * rejected with a message that contains want (if given) and not avoid.
 */
static void
expect_state_rejected(const char *data, uint64 len, const char *want,
					  const char *avoid)
{
	char	   *copy = exact_copy(data, len);
	PsState		out;
	const char *errmsg = NULL;
	bool		ok;

	ok = ps_state_decode(copy, len, &out, &errmsg);
	last_errmsg = errmsg;
	if (CHECK(!ok) && CHECK(errmsg_has(errmsg, want)) && avoid != NULL)
		CHECK(strstr(errmsg, avoid) == NULL);
	state_free(&out);
	free(copy);
}

/* Every truncation of the sample states. */
static void
test_state_truncation(void)
{
	group_begin("state truncation");
	for (int s = 0; s < NSTATE_SAMPLES; s++)
	{
		const Sample *sample = &state_samples[s];

		for (uint64 len = 0; len < sample->len; len++)
		{
			case_begin("%s, truncated to " UINT64_FORMAT " of " UINT64_FORMAT " bytes",
					   sample->name, len, sample->len);
			expect_state_rejected(sample->data, len, NULL, NULL);
			case_end();
		}
	}
	group_end();
}

/* Single-byte changes of the sample states: every byte, or a sample. */
static void
test_state_flips(uint64 seed)
{
	static const uint8 masks[] = {0x01, 0x80, 0xFF};
	pg_prng_state rng;

	group_begin("state byte flips");
	pg_prng_seed(&rng, seed);
	for (int s = 0; s < NSTATE_SAMPLES; s++)
	{
		const Sample *sample = &state_samples[s];
		char	   *copy = palloc(sample->len);
		uint64		tries = Min(sample->len, 600);

		for (uint64 t = 0; t < tries; t++)
		{
			uint64		pos = sample->len <= 600 ? t : rnd(&rng, sample->len);

			for (int m = 0; m < (int) lengthof(masks); m++)
			{
				memcpy(copy, sample->data, sample->len);
				copy[pos] ^= masks[m];
				case_begin("%s, seed " UINT64_FORMAT ", byte " UINT64_FORMAT " ^ 0x%02x",
						   sample->name, seed, pos, masks[m]);
				expect_state_rejected(copy, sample->len,
									  pos >= 8 ? "checksum" : NULL, NULL);
				case_end();
			}
		}
		pfree(copy);
	}
	group_end();
}

/* Bytes after a state, and bytes before its CRC with the CRC fixed. */
static void
test_state_trailing(void)
{
	group_begin("state trailing bytes");
	for (int s = 0; s < NSTATE_SAMPLES; s++)
	{
		const Sample *sample = &state_samples[s];
		char	   *buf = palloc(sample->len + 8);

		for (int extra = 1; extra <= 8; extra++)
		{
			/* after the CRC */
			memcpy(buf, sample->data, sample->len);
			memset(buf + sample->len, extra, extra);
			case_begin("%s, %d bytes after the CRC", sample->name, extra);
			expect_state_rejected(buf, sample->len + extra, NULL, NULL);
			case_end();

			/* before the CRC, which is then recomputed */
			memcpy(buf, sample->data, sample->len - 4);
			memset(buf + sample->len - 4, 0, extra);
			fix_state_crc(buf, sample->len + extra);
			case_begin("%s, %d bytes before a valid CRC", sample->name, extra);
			expect_state_rejected(buf, sample->len + extra, "trailing", "checksum");
			case_end();
		}
		pfree(buf);
	}
	group_end();
}

/* States whose stored checksum is wrong. */
static void
test_state_wrong_checksum(void)
{
	group_begin("state wrong checksum");
	for (int s = 0; s < NSTATE_SAMPLES; s++)
	{
		const Sample *sample = &state_samples[s];
		char	   *copy = palloc(sample->len);
		uint32		crc = (uint32) load_le(sample->data + sample->len - 4, 4);
		uint32		wrong[] = {crc + 1, crc ^ 0x80000000, 0, ~crc};

		case_begin("%s, CRC recomputed by the test", sample->name);
		memcpy(copy, sample->data, sample->len);
		fix_state_crc(copy, sample->len);
		CHECK(memcmp(copy, sample->data, sample->len) == 0);
		case_end();

		for (int w = 0; w < (int) lengthof(wrong); w++)
		{
			if (wrong[w] == crc)
				continue;
			memcpy(copy, sample->data, sample->len);
			store_le(copy + sample->len - 4, wrong[w], 4);
			case_begin("%s, wrong checksum %d", sample->name, w);
			expect_state_rejected(copy, sample->len, "checksum", NULL);
			case_end();
		}
		pfree(copy);
	}
	group_end();
}

/* Offsets in the layout state (see make_state_samples) */
#define LAYOUT_VERSION		4
#define LAYOUT_SEQNO		8
#define LAYOUT_TYPE_LEN		32
#define LAYOUT_NBATCHES		34
#define LAYOUT_B_LOWER		38
#define LAYOUT_B_FLAGS		(LAYOUT_B_LOWER + 24)
#define LAYOUT_B_TIME		(LAYOUT_B_FLAGS + 1)
#define LAYOUT_B_NPARTS		(LAYOUT_B_TIME + 8)
#define LAYOUT_P0_KIND		(LAYOUT_B_NPARTS + 4)
#define LAYOUT_P0_ENC		(LAYOUT_P0_KIND + 1)
#define LAYOUT_P0_CRC		(LAYOUT_P0_ENC + 32)
#define LAYOUT_P0_KEY_LEN	(LAYOUT_P0_CRC + 4)
#define LAYOUT_P0_KEY		(LAYOUT_P0_KEY_LEN + 2)
#define LAYOUT_P1_KIND		(LAYOUT_P0_KEY + 2 + 1)
#define LAYOUT_P1_ENC		(LAYOUT_P1_KIND + 1)
#define LAYOUT_P1_DATA		(LAYOUT_P1_ENC + 36)
#define LAYOUT_LEN			(LAYOUT_P1_DATA + 40 + 1 + 4)

/*
 * Applies a change of nbytes at off to the layout state, recomputes its
 * CRC and checks the result is rejected by a structural check.
 */
static void
layout_forged(const char *name, int off, uint64 value, int nbytes,
			  const char *want)
{
	const Sample *sample = &state_samples[1];
	char	   *copy = palloc(sample->len);

	memcpy(copy, sample->data, sample->len);
	store_le(copy + off, value, nbytes);
	fix_state_crc(copy, sample->len);
	case_begin("%s", name);
	expect_state_rejected(copy, sample->len, want, "checksum");
	case_end();
	pfree(copy);
}

/* CRC-valid states that break the format in one way each. */
static void
test_state_forged(void)
{
	const Sample *layout = &state_samples[1];
	const Sample *empty = &state_samples[0];
	char	   *buf;

	group_begin("state forged (valid CRC)");

	/* the sample is laid out as state_codec.c documents */
	case_begin("layout of the layout state");
	if (CHECK(layout->len == LAYOUT_LEN))
	{
		const char *d = layout->data;

		CHECK(load_le(d + LAYOUT_SEQNO, 8) == 7);
		CHECK(load_le(d + LAYOUT_TYPE_LEN, 2) == 0);
		CHECK(load_le(d + LAYOUT_NBATCHES, 4) == 1);
		CHECK(load_le(d + LAYOUT_B_LOWER + 8, 8) == 100);
		CHECK(d[LAYOUT_B_FLAGS] == 1);
		CHECK(load_le(d + LAYOUT_B_TIME, 8) == 150);
		CHECK(load_le(d + LAYOUT_B_NPARTS, 4) == 2);
		CHECK(d[LAYOUT_P0_KIND] == 0);
		CHECK(load_le(d + LAYOUT_P0_ENC, 8) == 1000);
		CHECK(load_le(d + LAYOUT_P0_ENC + 8, 8) == 2000);
		CHECK(load_le(d + LAYOUT_P0_ENC + 16, 8) == 10);
		CHECK((int64) load_le(d + LAYOUT_P0_ENC + 24, 8) == -3);
		CHECK(load_le(d + LAYOUT_P0_CRC, 4) == 0xDEADBEEF);
		CHECK(load_le(d + LAYOUT_P0_KEY_LEN, 2) == 2);
		CHECK(memcmp(d + LAYOUT_P0_KEY, "k1", 2) == 0);
		CHECK(d[LAYOUT_P1_KIND] == 1);
		CHECK(load_le(d + LAYOUT_P1_ENC, 8) == 40);
		CHECK(d[LAYOUT_P1_DATA + 39] == (char) (39 * 7));
	}
	case_end();
	if (layout->len != LAYOUT_LEN)
	{
		group_end();
		return;
	}

	layout_forged("bad magic", 0, PS_STATE_MAGIC ^ 0x100, 4, "magic");
	layout_forged("bad version", LAYOUT_VERSION, PS_STATE_VERSION_STORE + 1, 1, "version");
	layout_forged("reserved byte set", LAYOUT_VERSION + 3, 1, 1, "version");
	layout_forged("row type past the end", LAYOUT_TYPE_LEN, 0xFFFF, 2, "malformed");
	layout_forged("2^32 - 1 batches", LAYOUT_NBATCHES, 0xFFFFFFFF, 4, "malformed");
	layout_forged("batch count too high", LAYOUT_NBATCHES, 2, 4, "malformed");
	layout_forged("batch count too low", LAYOUT_NBATCHES, 0, 4, "trailing");
	layout_forged("unknown batch flag", LAYOUT_B_FLAGS, 0x02, 1, "malformed");
	layout_forged("high batch flag", LAYOUT_B_FLAGS, 0x81, 1, "malformed");
	layout_forged("2^32 - 1 parts", LAYOUT_B_NPARTS, 0xFFFFFFFF, 4, "malformed");
	layout_forged("part count too high", LAYOUT_B_NPARTS, 3, 4, "malformed");
	layout_forged("part count too low", LAYOUT_B_NPARTS, 1, 4, "trailing");
	layout_forged("no parts", LAYOUT_B_NPARTS, 0, 4, "trailing");
	layout_forged("part kind 2", LAYOUT_P0_KIND, 2, 1, "malformed");
	layout_forged("part kind 255", LAYOUT_P1_KIND, 0xFF, 1, "malformed");
	layout_forged("inline part read as blob", LAYOUT_P1_KIND, 0, 1, "malformed");
	layout_forged("empty blob key", LAYOUT_P0_KEY_LEN, 0, 2, "malformed");
	layout_forged("blob key too short", LAYOUT_P0_KEY_LEN, 1, 2, "malformed");
	layout_forged("blob key past the end", LAYOUT_P0_KEY_LEN, 0xFFFF, 2, "malformed");
	layout_forged("inline size 2^64 - 1", LAYOUT_P1_ENC, PG_UINT64_MAX, 8, "malformed");
	layout_forged("inline size 2^63", LAYOUT_P1_ENC, UINT64CONST(1) << 63, 8, "malformed");
	layout_forged("inline size too high", LAYOUT_P1_ENC, 41, 8, "malformed");
	layout_forged("inline size too low", LAYOUT_P1_ENC, 39, 8, "malformed");

	/* an empty blob key, which only the encoder lets through */
	{
		PsState		st;
		PsPart		part = blob_part("", 1, 2, 3, 4, 5);
		uint64		len;

		one_batch_state(&st, &part, 1);
		buf = ps_state_encode(&st, &len);
		case_begin("empty blob key");
		expect_state_rejected(buf, len, "malformed", NULL);
		case_end();
		pfree(buf);
		state_free(&st);
	}

	/* shorter than any state, with a valid CRC */
	buf = palloc(STATE_FIXED_BYTES);
	memcpy(buf, empty->data, STATE_FIXED_BYTES);
	fix_state_crc(buf, STATE_FIXED_BYTES - 1);
	case_begin("shorter than the fixed fields");
	expect_state_rejected(buf, STATE_FIXED_BYTES - 1, "short", NULL);
	case_end();

	/* the empty state claiming a batch it does not have */
	memcpy(buf, empty->data, STATE_FIXED_BYTES);
	store_le(buf + LAYOUT_NBATCHES, 1, 4);
	fix_state_crc(buf, STATE_FIXED_BYTES);
	case_begin("empty state claiming a batch");
	expect_state_rejected(buf, STATE_FIXED_BYTES, "malformed", NULL);
	case_end();
	pfree(buf);

	/* every prefix of every sample's body, closed by a valid CRC */
	for (int s = 0; s < NSTATE_SAMPLES; s++)
	{
		const Sample *sample = &state_samples[s];

		buf = palloc(sample->len);
		for (uint64 body = 8; body < sample->len - 4; body++)
		{
			memcpy(buf, sample->data, body);
			fix_state_crc(buf, body + 4);
			case_begin("%s, body cut to " UINT64_FORMAT " bytes, valid CRC",
					   sample->name, body);
			expect_state_rejected(buf, body + 4, NULL, "checksum");
			case_end();
		}
		pfree(buf);
	}
	group_end();
}

/*
 * Random byte changes in the sample states with the CRC recomputed.  A
 * state may still decode (most fields take any value); it must not crash.
 */
static void
test_state_forged_fuzz(int nseeds, uint64 first_seed)
{
	int			accepted = 0;

	group_begin("state forged fuzz");
	for (int s = 0; s < nseeds; s++)
	{
		uint64		seed = first_seed + s;
		pg_prng_state rng;
		const Sample *sample;
		char	   *copy;
		int			nflips;
		PsState		out;
		const char *errmsg = NULL;

		pg_prng_seed(&rng, seed);
		sample = &state_samples[1 + rnd(&rng, NSTATE_SAMPLES - 1)];
		nflips = 1 + (int) rnd(&rng, 3);
		copy = exact_copy(sample->data, sample->len);
		for (int f = 0; f < nflips; f++)
			copy[8 + rnd(&rng, sample->len - 12)] ^= (char) (1 + rnd(&rng, 255));
		fix_state_crc(copy, sample->len);

		case_begin("%s, seed " UINT64_FORMAT, sample->name, seed);
		if (ps_state_decode(copy, sample->len, &out, &errmsg))
			accepted++;
		else
		{
			last_errmsg = errmsg;
			if (CHECK(errmsg != NULL))
				CHECK(strstr(errmsg, "checksum") == NULL);
		}
		state_free(&out);
		case_end();
		free(copy);
	}
	snprintf(group_note, sizeof(group_note), " (%d still valid)", accepted);
	group_end();
}


/* ---------------------------------------------------------------------
 * Main
 * ---------------------------------------------------------------------
 */

/* Frees the sample encodings. */
static void
free_samples(void)
{
	for (int i = 0; i < NPART_SAMPLES; i++)
		free(part_samples[i].data);
	for (int i = 0; i < NSTATE_SAMPLES; i++)
		free(state_samples[i].data);
}

/* Runs every group; usage: codec_test [nseeds [first_seed]]. */
int
main(int argc, char **argv)
{
	int			nseeds = 500;
	uint64		first_seed = 1;

	if (argc > 1)
		nseeds = atoi(argv[1]);
	if (argc > 2)
		first_seed = strtou64(argv[2], NULL, 10);
	if (argc > 3 || nseeds < 1)
	{
		fprintf(stderr, "usage: %s [nseeds [first_seed]]\n", argv[0]);
		return 2;
	}

	make_part_samples();
	make_state_samples();

	test_update_order(nseeds, first_seed);
	test_shared_prefix_order();
	test_sort_shared_prefix(nseeds, first_seed);
	test_consolidate_edges();
	test_part_roundtrip(nseeds, first_seed);
	test_part_edges();
	test_part_blocks();
	test_part_assembly();
	test_part_one_time();
	test_part_truncation();
	test_part_header_flips();
	test_part_body_flips(first_seed);
	test_part_wrong_checksum();
	test_part_forged();
	test_part_bounded_forged();
	test_part_key_filter_forged();
	test_part_key_filter_rate();
	test_part_forged_fuzz(nseeds * 4, first_seed);
	test_state_roundtrip(nseeds, first_seed);
	test_state_edges();
	test_batch_runs();
	test_state_truncation();
	test_state_flips(first_seed);
	test_state_trailing();
	test_state_wrong_checksum();
	test_state_forged();
	test_state_forged_fuzz(nseeds * 4, first_seed);
	test_state_diffs(nseeds, first_seed);

	free_samples();
	printf("%d passed, %d failed\n", total_passed, total_failed);
	return total_failed > 0 ? 1 : 0;
}
