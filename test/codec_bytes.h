/*-------------------------------------------------------------------------
 *
 * codec_bytes.h
 *	  Byte-level helpers of the codec unit tests (test/unit) and fuzzers
 *	  (test/fuzz): part header offsets, little-endian integers and the
 *	  CRC-32C the codecs compute.
 *
 * They are written apart from the codecs on purpose: a test that forges a
 * part or a state with them checks the codecs against a second reading of
 * the format, not against themselves.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CODEC_BYTES_H
#define CODEC_BYTES_H

#include "port/pg_crc32c.h"

/* Part header field offsets (see part.h) */
#define PH_MAGIC		0
#define PH_VERSION		4
#define PH_NUPDATES		8
#define PH_RAW			12
#define PH_COMP			16
#define PH_DIFFSUM		20
#define PH_CRC			28

/* Loads a little-endian integer of nbytes. */
static inline uint64
load_le(const char *p, int nbytes)
{
	uint64		v = 0;

	for (int i = 0; i < nbytes; i++)
		v |= ((uint64) (unsigned char) p[i]) << (8 * i);
	return v;
}

/* Stores a little-endian integer of nbytes. */
static inline void
store_le(char *p, uint64 v, int nbytes)
{
	for (int i = 0; i < nbytes; i++)
		p[i] = (char) ((v >> (8 * i)) & 0xFF);
}

/* CRC-32C of two byte ranges (the second may be empty), as the codecs compute it. */
static inline uint32
crc_of(const char *a, uint64 alen, const char *b, uint64 blen)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, a, alen);
	if (blen > 0)
		COMP_CRC32C(crc, b, blen);
	FIN_CRC32C(crc);
	return (uint32) crc;
}

#endif							/* CODEC_BYTES_H */
