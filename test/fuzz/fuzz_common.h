/*-------------------------------------------------------------------------
 *
 * fuzz_common.h
 *	  Helpers shared by the libFuzzer harnesses of the pure codecs.
 *
 * The harnesses are built as frontend code (like test/unit), so palloc and
 * pfree are libpgcommon's malloc wrappers and every allocation is visible to
 * AddressSanitizer's leak checker.
 *
 * A failed check prints what went wrong and aborts, so libFuzzer records
 * the input as a crash.
 *
 *-------------------------------------------------------------------------
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include "postgres_fe.h"

#include <stdio.h>
#include <stdlib.h>

#include "../codec_bytes.h"

/* Input modes: the first byte of every input selects one */
#define FZ_MODE_RAW		0		/* the bytes as stored */
#define FZ_MODE_FIXUP	1		/* envelope (magic, version, length, CRC) repaired */
#define FZ_MODE_COLUMNS 2		/* raw contents, wrapped in a valid envelope */
#define FZ_NMODES		3

#define FZ_CHECK(cond, ...) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz check failed at %s:%d: %s: ", \
					__FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__); \
			fprintf(stderr, "\n"); \
			abort(); \
		} \
	} while (0)

/* A malloc'd copy of n bytes (so ASan sees reads past the end of the input). */
static inline char *
fz_copy(const uint8_t *data, size_t n)
{
	char	   *p = malloc(n > 0 ? n : 1);

	if (n > 0)
		memcpy(p, data, n);
	return p;
}

#endif							/* FUZZ_COMMON_H */
