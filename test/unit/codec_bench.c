/*-------------------------------------------------------------------------
 *
 * codec_bench.c
 *	  Measures the part codec against zstd alone on the same bytes.
 *
 * Builds realistic updates (order keys, JSON-like values of ~80 bytes),
 * then reports: the part's size against the raw key and val bytes, and the
 * time to encode and decode (median of several runs) against compressing
 * and decompressing the part's raw columns with zstd at the same level
 * (the physical limit of any zstd-based codec).  Then the sort of one
 * 1000-update call (ps_updates_sort) against libc's qsort with a memcmp
 * comparator, for keys that share an 8-byte prefix (as a call whose keys
 * all start with the same tenant, table or random prefix) and for keys
 * that do not.  Last, the encoding of the sustained benchmark's rows
 * (test/bench/prepare_sustained.sql: 24-byte keys behind an 8-byte
 * prefix of their call's or their own, 84-byte JSON-like vals padded
 * with hex digits) as the sink worker encodes them: a part per interval
 * of 8 calls of 1000, sorted.
 *
 *	  codec_bench [updates [runs [level]]]	defaults: 1000000 updates, 5 runs,
 *												zstd level 1
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <time.h>
#include <zstd.h>

#include "common/pg_prng.h"
#include "codec/part.h"
#include "codec/update.h"

/* Updates per sorted call, sorts per timing, and an update's key and val bytes */
#define SORT_CALL	1000
#define SORT_REPS	2000
#define SORT_KEY	24
#define SORT_VAL	84

/* Seconds on a monotonic clock. */
static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Orders doubles, for the median. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* Median of n timings (sorts them). */
static double
median(double *t, int n)
{
	qsort(t, n, sizeof(double), cmp_double);
	return t[n / 2];
}

/* Fills n updates with order keys and JSON-like values; returns raw bytes. */
static uint64
make_updates(PsUpdate *u, int n, char *arena)
{
	pg_prng_state rng;
	char	   *p = arena;
	uint64		raw = 0;

	pg_prng_seed(&rng, 42);
	for (int i = 0; i < n; i++)
	{
		int			klen = sprintf(p, "order-%010d", i);
		int			vlen;

		u[i].key = p;
		u[i].key_len = klen;
		p += klen;
		vlen = sprintf(p, "{\"customer\":%u,\"sku\":\"sku-%05u\",\"qty\":%u,\"price\":%u.%02u,\"status\":\"%s\"}",
					   (unsigned) pg_prng_uint64_range(&rng, 1, 200000),
					   (unsigned) pg_prng_uint64_range(&rng, 1, 20000),
					   (unsigned) pg_prng_uint64_range(&rng, 1, 9),
					   (unsigned) pg_prng_uint64_range(&rng, 1, 999),
					   (unsigned) pg_prng_uint64_range(&rng, 0, 99),
					   pg_prng_uint64_range(&rng, 0, 3) == 0 ? "shipped" : "open");
		u[i].val = p;
		u[i].val_len = vlen;
		p += vlen;
		u[i].time = 1795900000000LL + i / 1000;
		u[i].diff = 1;
		raw += klen + vlen + 16;
	}
	return raw;
}

/* Orders updates by (key, val, time) with memcmp: libc qsort's comparator. */
static int
memcmp_kvt(const void *pa, const void *pb)
{
	const PsUpdate *a = pa;
	const PsUpdate *b = pb;
	int			c = memcmp(a->key, b->key, Min(a->key_len, b->key_len));

	if (c == 0)
		c = (a->key_len > b->key_len) - (a->key_len < b->key_len);
	if (c == 0)
		c = memcmp(a->val, b->val, Min(a->val_len, b->val_len));
	if (c == 0)
		c = (a->val_len > b->val_len) - (a->val_len < b->val_len);
	if (c == 0)
		c = (a->time > b->time) - (a->time < b->time);
	return c;
}

/*
 * Builds one call of SORT_CALL updates in random order: SORT_KEY-byte keys
 * (an 8-byte prefix, shared by the call's keys if shared_prefix, then hex
 * digits) and SORT_VAL-byte vals.  The bytes go to arena.
 */
static void
make_call(PsUpdate *u, char *arena, bool shared_prefix)
{
	pg_prng_state rng;

	pg_prng_seed(&rng, 7);
	for (int i = 0; i < SORT_CALL; i++)
	{
		char	   *k = arena + i * (SORT_KEY + SORT_VAL);

		for (int j = 0; j < 8; j++)
			k[j] = shared_prefix ? (char) (0x5A + j) : (char) pg_prng_uint64_range(&rng, 0, 255);
		for (int j = 8; j < SORT_KEY; j++)
			k[j] = "0123456789abcdef"[pg_prng_uint64_range(&rng, 0, 15)];
		for (int j = SORT_KEY; j < SORT_KEY + SORT_VAL; j++)
			k[j] = (char) ('a' + pg_prng_uint64_range(&rng, 0, 25));
		u[i].key = k;
		u[i].key_len = SORT_KEY;
		u[i].val = k + SORT_KEY;
		u[i].val_len = SORT_VAL;
		u[i].time = 1;
		u[i].diff = 1;
	}
}

/* Updates per call and per interval of the sustained workload's rows */
#define SUSTAINED_CALL		1000
#define SUSTAINED_INTERVAL	8000

/*
 * Fills n updates with the sustained workload's rows in intervals of
 * SUSTAINED_INTERVAL, each sorted: keys behind a random 8-byte prefix per
 * call (or per key if spread), JSON-like vals padded to SORT_VAL bytes
 * with hex digits.  The bytes go to arena.
 */
static void
make_sustained_updates(PsUpdate *u, int n, char *arena, bool spread)
{
	static const char *const events[] = {"click", "view", "buy", "scroll", "login"};
	pg_prng_state rng;
	char		prefix[8];

	pg_prng_seed(&rng, 11);
	for (int i = 0; i < n; i++)
	{
		char	   *k = arena + (size_t) i * (SORT_KEY + SORT_VAL + 1);
		char	   *v = k + SORT_KEY;
		int			vlen;

		if (spread || i % SUSTAINED_CALL == 0)
			for (int j = 0; j < 8; j++)
				prefix[j] = (char) pg_prng_uint64_range(&rng, 0, 255);
		memcpy(k, prefix, 8);
		for (int j = 8; j < SORT_KEY; j++)
			k[j] = "0123456789abcdef"[pg_prng_uint64_range(&rng, 0, 15)];
		vlen = snprintf(v, SORT_VAL + 1, "{\"uid\":%d,\"ev\":\"%s\",\"amt\":%d.%02d,\"ts\":%d,\"ref\":\"%012llx\"}",
						(i * 7919) % 1000003, events[i % 5], i % 997, i % 100,
						1700000000 + i,
						(unsigned long long) pg_prng_uint64_range(&rng, 0, UINT64CONST(0xFFFFFFFFFFFF)));
		for (int j = Min(vlen, SORT_VAL); j < SORT_VAL; j++)
			v[j] = "0123456789abcdef"[pg_prng_uint64_range(&rng, 0, 15)];
		u[i].key = k;
		u[i].key_len = SORT_KEY;
		u[i].val = v;
		u[i].val_len = SORT_VAL;
		u[i].time = 1 + i / SUSTAINED_INTERVAL;
		u[i].diff = 1;
	}
	for (int i = 0; i < n; i += SUSTAINED_INTERVAL)
		ps_updates_sort(&u[i], Min(SUSTAINED_INTERVAL, n - i));
}

/*
 * Prints the median time to encode the sustained workload's rows a part
 * per interval at zstd level `level`, and their encoded bytes per row.
 */
static void
bench_sustained(const char *what, bool spread, int n, int runs, int level)
{
	PsUpdate   *u = palloc(sizeof(PsUpdate) * n);
	char	   *arena = palloc((size_t) n * (SORT_KEY + SORT_VAL + 1));
	double	   *t = palloc(sizeof(double) * runs);
	uint64		bytes = 0;

	make_sustained_updates(u, n, arena, spread);
	for (int r = 0; r < runs; r++)
	{
		double		t0 = now_seconds();

		bytes = 0;
		for (int i = 0; i < n; i += SUSTAINED_INTERVAL)
		{
			PsPartInfo	info;
			const char *why = NULL;
			char	   *part = ps_part_encode(&u[i], Min(SUSTAINED_INTERVAL, n - i),
											  level, &info, &why);

			if (part == NULL)
			{
				fprintf(stderr, "encode failed: %s\n", why);
				exit(1);
			}
			bytes += info.encoded_size;
			pfree(part);
		}
		t[r] = now_seconds() - t0;
	}
	printf("| encode, %s keys | %.3f us | %.1f |\n", what,
		   median(t, runs) / n * 1e6, (double) bytes / n);
	pfree(t);
	pfree(arena);
	pfree(u);
}

/* Prints the median time of one call's sort, ours and libc qsort's. */
static void
bench_sort(const char *what, bool shared_prefix, int runs)
{
	PsUpdate	call[SORT_CALL];
	PsUpdate	work[SORT_CALL];
	char	   *arena = palloc(SORT_CALL * (SORT_KEY + SORT_VAL));
	double	   *ours = palloc(sizeof(double) * runs);
	double	   *libc = palloc(sizeof(double) * runs);

	make_call(call, arena, shared_prefix);
	for (int r = 0; r < runs; r++)
	{
		double		t0 = now_seconds();

		for (int i = 0; i < SORT_REPS; i++)
		{
			memcpy(work, call, sizeof(call));
			ps_updates_sort(work, SORT_CALL);
		}
		ours[r] = (now_seconds() - t0) / SORT_REPS;
		t0 = now_seconds();
		for (int i = 0; i < SORT_REPS; i++)
		{
			memcpy(work, call, sizeof(call));
			qsort(work, SORT_CALL, sizeof(PsUpdate), memcmp_kvt);
		}
		libc[r] = (now_seconds() - t0) / SORT_REPS;
	}
	printf("| sort a %d-update call, %s | %.1f us | %.1f us | %.2f |\n",
		   SORT_CALL, what, median(ours, runs) * 1e6, median(libc, runs) * 1e6,
		   median(ours, runs) / median(libc, runs));
	pfree(arena);
}

int
main(int argc, char **argv)
{
	int			n = argc > 1 ? atoi(argv[1]) : 1000000;
	int			runs = argc > 2 ? atoi(argv[2]) : 5;
	int			level = argc > 3 ? atoi(argv[3]) : 1;
	PsUpdate   *u = palloc(sizeof(PsUpdate) * n);
	char	   *arena = palloc((size_t) n * 160);
	uint64		raw_kv = make_updates(u, n, arena);
	double	   *t_enc = palloc(sizeof(double) * runs);
	double	   *t_dec = palloc(sizeof(double) * runs);
	double	   *t_zc = palloc(sizeof(double) * runs);
	double	   *t_zd = palloc(sizeof(double) * runs);
	PsPartInfo	info;
	const char *why = NULL;
	char	   *part = NULL;
	char	   *columns;
	size_t		bound;
	char	   *zbuf;
	size_t		zlen = 0;

	for (int r = 0; r < runs; r++)
	{
		PsDecodedPart d;
		double		t0;

		if (part)
			pfree(part);
		t0 = now_seconds();
		part = ps_part_encode(u, n, level, &info, &why);
		t_enc[r] = now_seconds() - t0;
		if (part == NULL)
		{
			fprintf(stderr, "encode failed: %s\n", why);
			return 1;
		}
		t0 = now_seconds();
		if (!ps_part_decode(part, info.encoded_size, &d, NULL, &why))
		{
			fprintf(stderr, "decode failed: %s\n", why);
			return 1;
		}
		t_dec[r] = now_seconds() - t0;
		ps_decoded_part_free(&d);
	}

	/* zstd alone on the very column bytes the part holds (all its blocks') */
	{
		PsDecodedPart d;

		if (!ps_part_decode(part, info.encoded_size, &d, NULL, &why))
			return 1;
		columns = palloc(info.raw_size);
		memcpy(columns, d.raw, info.raw_size);
		ps_decoded_part_free(&d);
	}
	bound = ZSTD_compressBound(info.raw_size);
	zbuf = palloc(bound);
	for (int r = 0; r < runs; r++)
	{
		double		t0 = now_seconds();

		zlen = ZSTD_compress(zbuf, bound, columns, info.raw_size, level);
		t_zc[r] = now_seconds() - t0;
		t0 = now_seconds();
		if (ZSTD_decompress(columns, info.raw_size, zbuf, zlen) != info.raw_size)
			return 1;
		t_zd[r] = now_seconds() - t0;
	}

	printf("updates                 %d (key ~16 B, val ~80 B), zstd level %d\n", n, level);
	printf("raw key+val+time+diff   %llu bytes\n", (unsigned long long) raw_kv);
	printf("raw columns             %llu bytes\n", (unsigned long long) info.raw_size);
	printf("encoded part            %llu bytes (ratio %.2f vs raw key+val+time+diff)\n",
		   (unsigned long long) info.encoded_size, (double) raw_kv / info.encoded_size);
	printf("| step | part codec | zstd alone | codec / zstd |\n|---|---|---|---|\n");
	printf("| encode (sort excluded) | %.3f s (%.0f MB/s) | %.3f s | %.2f |\n",
		   median(t_enc, runs), raw_kv / median(t_enc, runs) / 1e6,
		   median(t_zc, runs), median(t_enc, runs) / median(t_zc, runs));
	printf("| decode + validate | %.3f s (%.0f MB/s) | %.3f s | %.2f |\n",
		   median(t_dec, runs), raw_kv / median(t_dec, runs) / 1e6,
		   median(t_zd, runs), median(t_dec, runs) / median(t_zd, runs));
	printf("| step | ps_updates_sort | libc qsort, memcmp | ours / qsort |\n|---|---|---|---|\n");
	bench_sort("keys sharing an 8-byte prefix", true, runs);
	bench_sort("keys of random prefixes", false, runs);
	printf("| the sustained workload's rows, a part per %d | per row | bytes per row |\n|---|---|---|\n",
		   SUSTAINED_INTERVAL);
	bench_sustained("prefixed", false, Min(n, 400000), runs, level);
	bench_sustained("spread", true, Min(n, 400000), runs, level);
	return 0;
}
