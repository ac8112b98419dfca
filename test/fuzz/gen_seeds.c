/*-------------------------------------------------------------------------
 *
 * gen_seeds.c
 *	  Writes the seed corpora of the fuzzers: valid parts and states made
 *	  with the real encoders, in every input mode of the harnesses.
 *
 *	  gen_seeds PART_DIR STATE_DIR
 *
 * The output is deterministic (fixed data, no clock, no PRNG), so running
 * it again rewrites the committed seeds byte for byte, as long as zstd
 * compresses the same way.
 *
 *-------------------------------------------------------------------------
 */
#include "fuzz_common.h"

#include <zstd.h>

#include "codec/part.h"
#include "codec/state.h"
#include "fuzz_diff_base.h"

static const char *part_dir;
static const char *state_dir;
static int	nfiles;

/* Writes mode byte + bytes to dir/name. */
static void
write_seed(const char *dir, const char *name, uint8 mode, const char *data, size_t len)
{
	char		path[1024];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (f == NULL)
	{
		perror(path);
		exit(1);
	}
	if (fwrite(&mode, 1, 1, f) != 1 || (len > 0 && fwrite(data, 1, len, f) != len) ||
		fclose(f) != 0)
	{
		perror(path);
		exit(1);
	}
	nfiles++;
}

/* Encodes sorted updates; exits on failure. */
static char *
encode(PsUpdate *u, int n, PsPartInfo *info)
{
	const char *why = NULL;
	char	   *part = ps_part_encode(u, n, 1, info, &why);

	if (part == NULL)
	{
		fprintf(stderr, "encode failed: %s\n", why);
		exit(1);
	}
	return part;
}

/*
 * Writes a part's seeds in the three modes of fuzz_part; the part must be
 * of one block.
 */
static void
part_seeds(const char *name, PsUpdate *u, int n)
{
	PsPartInfo	info;
	char	   *part;
	char		fname[256];
	char	   *cols;
	size_t		got;
	uint64		body;

	ps_updates_sort(u, n);
	if (!ps_updates_consolidate(u, &n))
		exit(1);
	part = encode(u, n, &info);

	snprintf(fname, sizeof(fname), "%s-raw", name);
	write_seed(part_dir, fname, FZ_MODE_RAW, part, info.encoded_size);
	snprintf(fname, sizeof(fname), "%s-fixup", name);
	write_seed(part_dir, fname, FZ_MODE_FIXUP, part, info.encoded_size);

	/*
	 * columns mode: count (its top bit set for a one-time block, whose
	 * frame follows its time and bounds), diff sum, then the decompressed
	 * columns
	 */
	body = info.encoded_size - load_le(part + PH_COMP, 4);
	cols = malloc(12 + info.raw_size + 1);
	store_le(cols, info.nupdates | (body > PS_PART_HEADER_SIZE ? 0x80000000 : 0), 4);
	store_le(cols + 4, (uint64) info.diff_sum, 8);
	got = ZSTD_decompress(cols + 12, info.raw_size + 1, part + body,
						  info.encoded_size - body);
	if (ZSTD_isError(got) || got != info.raw_size)
	{
		fprintf(stderr, "could not decompress seed %s\n", name);
		exit(1);
	}
	snprintf(fname, sizeof(fname), "%s-columns", name);
	write_seed(part_dir, fname, FZ_MODE_COLUMNS, cols, 12 + info.raw_size);
	free(cols);
	pfree(part);
}

/* Writes a state's seeds in the two modes of fuzz_state. */
static void
state_seeds(const char *name, const PsState *s)
{
	uint64		len;
	char	   *data = ps_state_encode(s, &len);
	char		fname[256];

	snprintf(fname, sizeof(fname), "%s-raw", name);
	write_seed(state_dir, fname, 0, data, len);
	snprintf(fname, sizeof(fname), "%s-fixup", name);
	write_seed(state_dir, fname, 1, data, len);
	pfree(data);
}

/* An update over static strings. */
static PsUpdate
upd(const char *key, const char *val, int64 time, int64 diff)
{
	PsUpdate	u;

	u.key = key;
	u.key_len = strlen(key);
	u.val = val;
	u.val_len = strlen(val);
	u.time = time;
	u.diff = diff;
	return u;
}

/* An inline part made from updates. */
static PsPart
inline_part(PsUpdate *u, int n)
{
	PsPart		p = {0};
	PsPartInfo	info;

	ps_updates_sort(u, n);
	(void) ps_updates_consolidate(u, &n);
	p.inline_data = encode(u, n, &info);
	p.encoded_size = info.encoded_size;
	p.raw_size = info.raw_size;
	p.nupdates = info.nupdates;
	p.diff_sum = info.diff_sum;
	p.checksum = info.checksum;
	return p;
}

/* A blob part's description (the bytes live elsewhere). */
static PsPart
blob_part(const char *key, uint64 nupdates, uint64 encoded, int64 diff_sum, uint32 crc)
{
	PsPart		p = {0};

	p.blob_key = (char *) key;
	p.encoded_size = encoded;
	p.raw_size = encoded * 3;
	p.nupdates = nupdates;
	p.diff_sum = diff_sum;
	p.checksum = crc;
	return p;
}

static void
make_parts(void)
{
	static char keys[64][16];
	static char vals[64][24];
	PsUpdate	u[64];

	part_seeds("empty", u, 0);

	u[0] = upd("apple", "2 kg", 0, 1);
	part_seeds("one", u, 1);

	u[0] = upd("", "", 0, 1);
	u[1] = upd("", "x", PG_INT64_MAX, -1);
	u[2] = upd("k", "", PG_INT64_MIN, PG_INT64_MAX);
	u[3] = upd("k", "", 0, PG_INT64_MIN);
	u[4] = upd("k", "v", -1, 2);
	u[5] = upd("k", "v", 1, -2);
	part_seeds("edges", u, 6);

	for (int i = 0; i < 64; i++)
	{
		snprintf(keys[i], sizeof(keys[i]), "key%d", i * 7 % 64);
		snprintf(vals[i], sizeof(vals[i]), "val%d", i % 5);
		u[i].key = keys[i];
		u[i].key_len = strlen(keys[i]);
		u[i].val = vals[i];
		u[i].val_len = strlen(vals[i]);
		u[i].time = 1700000000000LL + i / 3;
		u[i].diff = (i % 4 == 3) ? -1 : 1 + i % 3;
	}
	part_seeds("many", u, 64);

	/* a bounded block: 16 kB of raw columns or more, all at one time */
	{
		static char bkeys[200][16];
		static char bval[81];
		PsUpdate	b[200];

		memset(bval, 'v', 80);
		for (int i = 0; i < 200; i++)
		{
			snprintf(bkeys[i], sizeof(bkeys[i]), "key%05d", i);
			b[i] = upd(bkeys[i], bval, 5, 1 + i % 2);
		}
		part_seeds("bounded", b, 200);
	}
}

static void
make_states(void)
{
	PsState		s = {0};
	PsBatch		b[4] = {{0}};
	PsPart		p[4];
	PsUpdate	u[3];

	state_seeds("new", &s);

	s.seqno = 3;
	s.upper = 7;
	s.since = 0;
	s.row_type = "public.orders";
	state_seeds("typed-empty", &s);

	u[0] = upd("apple", "2 kg", 0, 1);
	u[1] = upd("pear", "1 kg", 3, 1);
	u[2] = upd("apple", "2 kg", 5, -1);
	p[0] = inline_part(u, 3);
	b[0].lower = 0;
	b[0].upper = 6;
	b[0].since = 0;
	b[0].nparts = 1;
	b[0].parts = &p[0];

	p[1] = blob_part("orders/0123456789abcdef0123456789abcdef", 1000, 5200, 1000, 0xdeadbeef);
	p[2] = blob_part("orders/fedcba9876543210fedcba9876543210", 10, 300, -4, 0x12345678);
	b[1].lower = 6;
	b[1].upper = 1700000000001LL;
	b[1].since = 0;
	b[1].single_time = true;
	b[1].time = 1700000000000LL;
	b[1].nparts = 2;
	b[1].parts = &p[1];

	u[0] = upd("plum", "3 kg", 1700000000005LL, 1);
	p[3] = inline_part(u, 1);
	b[2].lower = 1700000000001LL;
	b[2].upper = 1700000000010LL;
	b[2].since = 4;
	b[2].nparts = 1;
	b[2].parts = &p[3];

	b[3].lower = 1700000000010LL;
	b[3].upper = PG_INT64_MAX;
	b[3].nparts = 0;

	s.seqno = 42;
	s.upper = PG_INT64_MAX;
	s.since = 4;
	s.row_type = NULL;
	s.batches = b;
	s.nbatches = 1;
	s.upper = 6;
	state_seeds("inline", &s);
	s.nbatches = 3;
	s.upper = 1700000000010LL;
	state_seeds("mixed", &s);
	s.nbatches = 4;
	s.upper = PG_INT64_MAX;
	s.row_type = "pg_catalog.int4";
	state_seeds("edges", &s);
	pfree(p[0].inline_data);
	pfree(p[3].inline_data);
}

/* Writes the seeds of a diff from the base state to `to`, in fuzz_state's two diff modes. */
static void
diff_seeds(const char *name, const PsState *from, const PsState *to)
{
	uint64		len;
	char	   *data = ps_state_diff_encode(from, to, &len);
	char		fname[256];

	snprintf(fname, sizeof(fname), "diff-%s-raw", name);
	write_seed(state_dir, fname, FZ_STATE_MODE_DIFF_RAW, data, len);
	snprintf(fname, sizeof(fname), "diff-%s-fixup", name);
	write_seed(state_dir, fname, FZ_STATE_MODE_DIFF_FIXUP, data, len);
	pfree(data);
}

/*
 * Diff seeds against fz_diff_base: an append, a widened last batch, a merge
 * of the first two batches, a since that moves alone.
 */
static void
make_diffs(void)
{
	uint64		len;
	char	   *base = fz_diff_base(&len);
	const char *why = NULL;
	PsState		from;
	PsState		to;
	PsBatch		b[5];
	PsPart		merged = {0};

	if (!ps_state_decode(base, len, &from, &why))
	{
		fprintf(stderr, "base state: %s\n", why);
		exit(1);
	}
	to = from;
	to.seqno = from.seqno + 1;
	to.batches = b;

	memcpy(b, from.batches, sizeof(PsBatch) * from.nbatches);
	b[4] = (PsBatch) {.lower = 40, .upper = 50, .since = 5, .single_time = true, .time = 49,
	.nparts = 1, .parts = &from.batches[1].parts[0]};
	to.nbatches = 5;
	to.upper = 50;
	diff_seeds("append", &from, &to);

	memcpy(b, from.batches, sizeof(PsBatch) * from.nbatches);
	b[3].upper = 60;
	to.nbatches = 4;
	to.upper = 60;
	diff_seeds("widen", &from, &to);

	merged.blob_key = "d/00000000000000000000000000000009";
	merged.encoded_size = 3500;
	merged.raw_size = 16000;
	merged.nupdates = 400;
	merged.checksum = 0x2000;
	b[0] = (PsBatch) {.lower = 0, .upper = 20, .since = 5, .nparts = 1, .parts = &merged};
	b[1] = from.batches[2];
	b[2] = from.batches[3];
	to.nbatches = 3;
	to.upper = from.upper;
	diff_seeds("merge", &from, &to);

	memcpy(b, from.batches, sizeof(PsBatch) * from.nbatches);
	to.nbatches = 4;
	to.since = 30;
	diff_seeds("since", &from, &to);
	for (int i = 0; i < from.nbatches; i++)
	{
		for (int j = 0; j < from.batches[i].nparts; j++)
		{
			if (from.batches[i].parts[j].blob_key)
				pfree(from.batches[i].parts[j].blob_key);
			if (from.batches[i].parts[j].inline_data)
				pfree(from.batches[i].parts[j].inline_data);
		}
		pfree(from.batches[i].parts);
	}
	pfree(from.batches);
	pfree(base);
}

int
main(int argc, char **argv)
{
	if (argc != 3)
	{
		fprintf(stderr, "usage: %s PART_DIR STATE_DIR\n", argv[0]);
		return 2;
	}
	part_dir = argv[1];
	state_dir = argv[2];
	make_parts();
	make_states();
	make_diffs();
	printf("wrote %d seed files\n", nfiles);
	return 0;
}
