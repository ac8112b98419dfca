/*-------------------------------------------------------------------------
 *
 * part.h
 *	  Part codec: sorted, consolidated, columnar, zstd-compressed blocks.
 *
 * A part is one or more blocks, one after the other, each of at most
 * PS_PART_BLOCK_RAW raw bytes (or one update), so that a reader can fetch
 * and decode a large part a block at a time.  A block is a 32-byte header
 * followed by a zstd frame.  The header holds a magic number, the format
 * version, the block's update count, raw (column) size, compressed size
 * and diff sum, and a CRC-32C over the header and what follows it.  The
 * raw columns, in order: key lengths (varint), key bytes, val lengths
 * (varint), val bytes, times (zigzag varint of the delta from the previous
 * update's time in the block), diffs (zigzag varint).
 * A block whose updates are all at one time (a sink interval's, most of a
 * compaction's) is of version 2, a one-time block: its time follows the
 * header (8 bytes, little-endian), before the frame, and its columns have
 * no times.  So a merge can pass such a block on to a time of its own
 * (ps_part_block_retime) without decompressing it.
 * A one-time block of PS_PART_BOUNDED_MIN_RAW raw bytes or more is of
 * version 3, a bounded block: its time is followed by its first and last
 * update's key and val (four varint lengths, then the bytes; at most
 * PS_PART_BOUNDS_MAX bytes, else the block stays of version 2), whose size
 * the header holds at byte 6.  So a merge learns where such a block sits
 * among the others, and can hand it on, without decompressing it
 * (ps_part_block_bounds); decoding it checks its bounds against its
 * updates.  The part's updates
 * are those of its blocks in order; its checksum chains its blocks' (see
 * ps_part_chain_checksum), so a part of one block, as every part written
 * before blocks, has that block's.
 * The blocks of parts whose updates sort one after the other, put one
 * after the other, make a part of them all (ps_part_append_blocks).
 * Byte 5 of the header holds flags: PS_BLOCK_POSITIVE says that every
 * diff of the block is above zero and that they sum to a bigint, which
 * decoding checks; a part whose blocks all say so, and whose diffs sum to
 * a bigint, is positive (PsPartInfo), so its diff sum is the number of
 * rows it adds to any snapshot, whatever else the shard holds.  Blocks
 * written before flags have none.
 * PS_BLOCK_KEY_FILTER says that a key filter comes just before the frame
 * (after the time and bounds of blocks that have them), as in every block
 * of PS_PART_FILTERED_MIN_RAW raw bytes or more: a byte giving its number
 * of hashes per key, then PS_KEY_FILTER_BITS_PER_KEY bits per update of
 * the block, rounded up to whole bytes (so its size follows from the
 * header), a Bloom filter of the block's keys (ps_key_filter_may_hold):
 * for each key, h is PostgreSQL's hash_bytes_extended of it with seed
 * PS_KEY_FILTER_SEED, and the bits at a, a + s, a + 2s, ... modulo the
 * filter's bits are set, where a is h's low 32 bits modulo the bits and s
 * is 1 plus its high 32 bits modulo the bits less one; bit b is bit b % 8
 * of byte b / 8.  A lookup of one key leaves a part at a block whose
 * filter does not hold the key and whose last key (from its bounds, or
 * from an earlier decode) is not before it, without decompressing it.
 * Decoding a whole part (verify()) checks that each filter holds every
 * key of its block.
 * Whether a part holds a (key, val) at most once (PsPartInfo's
 * maybe_repeating) is known when it is encoded, not written in its
 * blocks: the state records it (PsPart), and a reader checks it.
 *
 * The codec is pure: it reports failures by returning false with a message,
 * so it runs unchanged outside the server (unit tests, fuzzers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_PART_H
#define PS_PART_H

#include "codec/update.h"

#define PS_PART_MAGIC		0x54505350	/* "PSPT" little-endian */
#define PS_PART_VERSION		1	/* times in the columns */
#define PS_PART_VERSION_ONE_TIME 2	/* one time, after the header */
#define PS_PART_VERSION_BOUNDED 3	/* one time, then first and last update */
#define PS_PART_HEADER_SIZE 32
#define PS_PART_TIME_SIZE	8

/* Flags of a block (header byte 5) */
#define PS_BLOCK_POSITIVE	0x01	/* every diff above 0, their sum a bigint */
#define PS_BLOCK_KEY_FILTER	0x02	/* a key filter comes before the frame */

/* Bits of a block's key filter per update, and hashes per key it writes */
#define PS_KEY_FILTER_BITS_PER_KEY 10
#define PS_KEY_FILTER_HASHES 7
#define PS_KEY_FILTER_SEED	UINT64CONST(0x5053504B46494C54)
/* Most hashes per key a key filter may say it uses */
#define PS_KEY_FILTER_HASHES_MAX 16

/* Fewest raw bytes of a one-time block that carries its bounds */
#define PS_PART_BOUNDED_MIN_RAW (16 * 1024)
/* Fewest raw bytes of a block that carries a key filter */
#define PS_PART_FILTERED_MIN_RAW (16 * 1024)
/* Most bytes of a block's bounds */
#define PS_PART_BOUNDS_MAX	4096

/* Largest raw size of a block of more than one update */
#define PS_PART_BLOCK_RAW	(32 * 1024)

/* Largest raw size of one part: it must fit one palloc */
#define PS_PART_MAX_RAW		((uint64) 0x3FFFFFFF - 1024)
/* Most updates in one part: their decoded array must fit one palloc */
#define PS_PART_MAX_UPDATES	((uint64) 0x3FFFFFFF / sizeof(PsUpdate))

/* What the state records about a part */
typedef struct PsPartInfo
{
	uint64		nupdates;
	uint64		raw_size;
	uint64		encoded_size;
	int64		diff_sum;
	uint32		checksum;
	bool		maybe_nonpositive;	/* some block is not PS_BLOCK_POSITIVE,
									 * or their diffs' sum leaves bigint
									 * (false for no block) */
	bool		maybe_repeating;	/* some (key, val) may be in two of its
									 * updates: known when encoded, else
									 * true for any block of several times
									 * (a block of one time holds a (key,
									 * val) once); blocks put one after
									 * the other are taken not to share
									 * one (see ps_part_add_block_info) */
} PsPartInfo;

/* A block's key filter: its bits, which point into the block or a copy */
typedef struct PsKeyFilter
{
	const uint8 *bits;
	uint32		nbytes;
	uint32		nhashes;
} PsKeyFilter;

/* A decoded part: updates point into raw */
typedef struct PsDecodedPart
{
	char	   *raw;
	PsUpdate   *updates;
	uint32		nupdates;
} PsDecodedPart;

extern uint64 ps_part_raw_size(const PsUpdate *updates, int n);
extern char *ps_part_encode(const PsUpdate *updates, int n, int level,
							PsPartInfo *info, const char **errmsg);
extern bool ps_part_decode(const char *data, uint64 len, PsDecodedPart *out,
						   PsPartInfo *info, const char **errmsg);
extern void ps_decoded_part_free(PsDecodedPart *part);
extern uint64 ps_part_block_length(const char *data, uint64 avail,
								   const char **errmsg);
extern bool ps_part_check_block(const char *data, uint64 len,
								PsPartInfo *info, const char **errmsg);
extern bool ps_part_decode_checked_block(const char *data, uint64 len,
										 const PsPartInfo *info,
										 PsDecodedPart *out,
										 const char **errmsg);
extern bool ps_part_decode_block(const char *data, uint64 len,
								 PsDecodedPart *out, PsPartInfo *info,
								 const char **errmsg);
extern bool ps_part_append_blocks(PsPartInfo *info, const char *data,
								  uint64 len, const char **errmsg);
extern bool ps_part_append_checked_blocks(PsPartInfo *info, const char *data,
										  uint64 len, const char **errmsg);
extern bool ps_part_block_one_time(const char *data, uint64 len, int64 *time);
extern bool ps_part_block_bounds(const char *data, uint64 len,
								 PsUpdate *first, PsUpdate *last);
extern bool ps_part_block_key_filter(const char *data, uint64 len,
									 PsKeyFilter *filter);
extern bool ps_key_filter_may_hold(const PsKeyFilter *filter, const char *key,
								   uint32 key_len);
extern bool ps_part_block_retime(char *data, uint64 len, int64 time,
								 PsPartInfo *info, const char **errmsg);
extern void ps_part_add_block_info(PsPartInfo *part, const PsPartInfo *block,
								   bool first);
extern uint32 ps_part_chain_checksum(uint32 sofar, uint32 block_checksum,
									 bool first);

#endif							/* PS_PART_H */
