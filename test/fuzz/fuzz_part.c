/*-------------------------------------------------------------------------
 *
 * fuzz_part.c
 *	  libFuzzer harness of the part decoder (src/codec/part_codec.c).
 *
 * ps_part_decode must accept or reject any bytes without reading past them,
 * crashing, leaking or tripping a sanitizer.  When it accepts, the decoded
 * updates must be sorted and consolidated, and encoding them again and
 * decoding the result must give back exactly the same updates and the same
 * header facts (count, raw size, diff sum).
 *
 * The first byte of an input picks how the rest is used, so that the fuzzer
 * reaches past the checks that random bytes almost never pass:
 *	 0  raw: the rest is a stored part, as is;
 *	 1  fixup: the rest is a part whose magic, version, frame length and
 *		CRC-32C are repaired (the zstd frame and the counts stay fuzzed); the
 *		fuzzed version byte modulo 3 picks a block with times (1), a
 *		one-time block (2, whose 8 bytes after the header are its time) or
 *		a bounded block (0, read as 3: its time, then bounds of the size
 *		its header's bytes 6 and 7 give, cut to what the input holds);
 *	 2  columns: a 4-byte update count and an 8-byte diff sum, then the raw
 *		columns, which the harness compresses and wraps in a valid header
 *		(this fuzzes the column parser and the order checks); the count's
 *		top bit makes it a one-time block, at the diff sum as its time.
 *
 * Build and run: see Makefile in this directory.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include <zstd.h>

#include "codec/part.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks that two updates are equal in every field and byte. */
static void
check_same_update(const PsUpdate *a, const PsUpdate *b, uint32 i)
{
	FZ_CHECK(a->key_len == b->key_len, "update %u: key length %u vs %u",
			 i, a->key_len, b->key_len);
	FZ_CHECK(a->val_len == b->val_len, "update %u: val length %u vs %u",
			 i, a->val_len, b->val_len);
	FZ_CHECK(memcmp(a->key, b->key, a->key_len) == 0, "update %u: key bytes differ", i);
	FZ_CHECK(memcmp(a->val, b->val, a->val_len) == 0, "update %u: val bytes differ", i);
	FZ_CHECK(a->time == b->time, "update %u: time " INT64_FORMAT " vs " INT64_FORMAT,
			 i, a->time, b->time);
	FZ_CHECK(a->diff == b->diff, "update %u: diff " INT64_FORMAT " vs " INT64_FORMAT,
			 i, a->diff, b->diff);
}

/*
 * Checks that every bounded block of an accepted part gives, as its
 * bounds, the key and val of its first and last update in dec (the part
 * decoded).
 */
static void
check_bounds(const char *part, uint64 len, const PsDecodedPart *dec)
{
	uint64		off = 0;
	uint32		done = 0;

	while (off < len)
	{
		const char *why = NULL;
		uint64		blen = ps_part_block_length(part + off, len - off, &why);
		uint32		bn = (uint32) load_le(part + off + PH_NUPDATES, 4);
		PsUpdate	first;
		PsUpdate	last;

		FZ_CHECK(blen > 0, "block of an accepted part has no length: %s", why);
		if (ps_part_block_bounds(part + off, blen, &first, &last))
		{
			FZ_CHECK(bn > 0, "a bounded block of no updates was accepted");
			first.diff = dec->updates[done].diff;
			last.diff = dec->updates[done + bn - 1].diff;
			check_same_update(&first, &dec->updates[done], done);
			check_same_update(&last, &dec->updates[done + bn - 1], done + bn - 1);
		}
		done += bn;
		off += blen;
	}
	FZ_CHECK(done == dec->nupdates, "blocks hold %u updates, the part %u",
			 done, dec->nupdates);
}

/* Decodes a part; on success checks it and its round trip. */
static void
decode_and_check(const char *part, uint64 len)
{
	PsDecodedPart d1 = {0};
	PsDecodedPart d2 = {0};
	PsPartInfo	info1;
	PsPartInfo	info2;
	PsPartInfo	enc_info;
	const char *why = NULL;
	char	   *again;
	uint64		sum = 0;
	uint64		kv_bytes = 0;

	if (!ps_part_decode(part, len, &d1, &info1, &why))
	{
		FZ_CHECK(why != NULL, "decode failed without a message");
		return;
	}

	/* what the decoder promises about an accepted part */
	FZ_CHECK(info1.nupdates == d1.nupdates, "info count %llu vs %u",
			 (unsigned long long) info1.nupdates, d1.nupdates);
	FZ_CHECK(info1.encoded_size == len, "encoded size %llu vs %llu",
			 (unsigned long long) info1.encoded_size, (unsigned long long) len);
	/*
	 * The header's raw size covers every key and val.  (ps_part_raw_size,
	 * the canonical size, counts a time column, which one-time blocks do
	 * not have: it may be above a one-time block's header.)
	 */
	for (uint32 i = 0; i < d1.nupdates; i++)
		kv_bytes += (uint64) d1.updates[i].key_len + d1.updates[i].val_len;
	FZ_CHECK(kv_bytes <= info1.raw_size, "keys and vals take %llu bytes, above the header's %llu",
			 (unsigned long long) kv_bytes, (unsigned long long) info1.raw_size);
	for (uint32 i = 0; i < d1.nupdates; i++)
	{
		const PsUpdate *u = &d1.updates[i];

		FZ_CHECK(u->diff != 0, "update %u has a zero diff", i);
		FZ_CHECK(u->key + u->key_len <= d1.raw + info1.raw_size &&
				 u->val + u->val_len <= d1.raw + info1.raw_size &&
				 u->key >= d1.raw && u->val >= d1.raw,
				 "update %u points outside the raw buffer", i);
		if (i > 0)
			FZ_CHECK(ps_update_cmp_kvt(&d1.updates[i - 1], u) < 0,
					 "updates %u and %u out of order", i - 1, i);
		sum += (uint64) u->diff;
	}
	FZ_CHECK((int64) sum == info1.diff_sum, "diff sum mismatch");

	/* encode the updates again: they must come back identical */
	again = ps_part_encode(d1.updates, (int) d1.nupdates, 1, &enc_info, &why);
	FZ_CHECK(again != NULL, "re-encoding failed: %s", why);
	FZ_CHECK(enc_info.nupdates == info1.nupdates, "re-encoded count differs");
	FZ_CHECK(enc_info.diff_sum == info1.diff_sum, "re-encoded diff sum differs");
	/* exact for blocks with times, less for one-time blocks */
	FZ_CHECK(enc_info.raw_size <= ps_part_raw_size(d1.updates, (int) d1.nupdates),
			 "re-encoded raw size above ps_part_raw_size");
	FZ_CHECK(ps_part_decode(again, enc_info.encoded_size, &d2, &info2, &why),
			 "re-encoded part does not decode: %s", why);
	FZ_CHECK(d2.nupdates == d1.nupdates, "round trip count %u vs %u",
			 d2.nupdates, d1.nupdates);
	for (uint32 i = 0; i < d1.nupdates; i++)
		check_same_update(&d1.updates[i], &d2.updates[i], i);
	FZ_CHECK(info2.checksum == enc_info.checksum && info2.raw_size == enc_info.raw_size &&
			 info2.encoded_size == enc_info.encoded_size,
			 "info of the re-encoded part differs from what encode reported");

	check_bounds(part, len, &d1);
	ps_decoded_part_free(&d2);
	ps_decoded_part_free(&d1);
	pfree(again);
}

/* Mode 1: repairs magic, version, frame length and CRC of a fuzzed part. */
static void
fuzz_fixup(const uint8_t *data, size_t size)
{
	char	   *part = fz_copy(data, size);
	int			version = size > PS_PART_HEADER_SIZE ? (uint8) part[PH_VERSION] % 3 : 1;
	size_t		body = version == 1 ? PS_PART_HEADER_SIZE :
		PS_PART_HEADER_SIZE + PS_PART_TIME_SIZE;

	if (size >= body)
	{
		uint64		bounds = 0;

		if (version == 0)
		{
			bounds = load_le(part + 6, 2) % (size - body + 1);
			body += bounds;
		}
		store_le(part + PH_MAGIC, PS_PART_MAGIC, 4);
		part[PH_VERSION] = version == 0 ? PS_PART_VERSION_BOUNDED : version;
		part[PH_VERSION + 1] = 0;
		store_le(part + 6, bounds, 2);
		store_le(part + PH_COMP, size - body, 4);
		store_le(part + PH_CRC,
				  crc_of(part, PH_CRC, part + PS_PART_HEADER_SIZE,
							size - PS_PART_HEADER_SIZE), 4);
	}
	decode_and_check(part, size);
	free(part);
}

/* Mode 2: count, diff sum and raw columns, wrapped in a valid part. */
static void
fuzz_columns(const uint8_t *data, size_t size)
{
	uint32		n;
	uint64		diff_sum;
	const char *raw;
	size_t		raw_len;
	size_t		bound;
	size_t		comp;
	char	   *part;
	bool		one_time;
	size_t		body;

	if (size < 12)
		return;
	n = (uint32) load_le((const char *) data, 4);
	diff_sum = load_le((const char *) data + 4, 8);
	raw = (const char *) data + 12;
	raw_len = size - 12;
	one_time = (n & 0x80000000) != 0;
	n &= 0x7FFFFFFF;
	body = one_time ? PS_PART_HEADER_SIZE + PS_PART_TIME_SIZE : PS_PART_HEADER_SIZE;

	bound = ZSTD_compressBound(raw_len);
	part = malloc(body + bound);
	comp = ZSTD_compress(part + body, bound, raw, raw_len, 1);
	FZ_CHECK(!ZSTD_isError(comp), "zstd: %s", ZSTD_getErrorName(comp));
	memset(part, 0, body);
	store_le(part + PH_MAGIC, PS_PART_MAGIC, 4);
	part[PH_VERSION] = one_time ? PS_PART_VERSION_ONE_TIME : PS_PART_VERSION;
	store_le(part + PH_NUPDATES, n, 4);
	store_le(part + PH_RAW, raw_len, 4);
	store_le(part + PH_COMP, comp, 4);
	store_le(part + PH_DIFFSUM, diff_sum, 8);
	if (one_time)
		store_le(part + PS_PART_HEADER_SIZE, diff_sum, PS_PART_TIME_SIZE);
	store_le(part + PH_CRC,
			  crc_of(part, PH_CRC, part + PS_PART_HEADER_SIZE,
						body - PS_PART_HEADER_SIZE + comp), 4);
	/* an exact-size copy, so that a read past the end is caught */
	{
		char	   *exact = malloc(body + comp);

		memcpy(exact, part, body + comp);
		free(part);
		decode_and_check(exact, body + comp);
		free(exact);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % FZ_NMODES)
	{
		case FZ_MODE_RAW:
			{
				char	   *part = fz_copy(data + 1, size - 1);

				decode_and_check(part, size - 1);
				free(part);
				break;
			}
		case FZ_MODE_FIXUP:
			fuzz_fixup(data + 1, size - 1);
			break;
		case FZ_MODE_COLUMNS:
			fuzz_columns(data + 1, size - 1);
			break;
	}
	return 0;
}
