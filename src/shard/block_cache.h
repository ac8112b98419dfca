/*-------------------------------------------------------------------------
 *
 * block_cache.h
 *	  This process's decoded blocks of the parts that lookups read, and
 *	  where each such part's blocks start and end (block_cache.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_BLOCK_CACHE_H
#define PS_BLOCK_CACHE_H

#include "codec/part.h"
#include "codec/state.h"
#include "shard/read.h"

/* What the cache knows of one block of a part */
typedef struct PsKnownBlock
{
	uint64		offset;			/* in the part */
	uint64		len;			/* encoded bytes, header included */
	char		header[PS_PART_HEADER_SIZE];
	bool		has_next;		/* another block follows, whose header is: */
	char		next_header[PS_PART_HEADER_SIZE];
	PsPartInfo	info;			/* the block's own figures */
	bool		has_updates;	/* and then its first and last key: */
	char	   *first_key;
	uint32		first_key_len;
	char	   *last_key;
	uint32		last_key_len;
	bool		has_filter;		/* its key filter, learned by a lookup of
								 * one key that met the block: */
	PsKeyFilter filter;			/* its bits in the cache's context */
} PsKnownBlock;

extern bool ps_block_cache_on(const PsPart *part);
extern uint64 ps_block_cache_seek(const PsPart *part, const PsKeyRange *keys,
								  char *header);
extern bool ps_block_cache_known(const PsPart *part, uint64 offset,
								 PsKnownBlock *known);
extern bool ps_block_cache_copy(const PsPart *part, uint64 offset,
								const PsKeyRange *keys, PsDecodedPart *out);
extern void ps_block_cache_learn(const PsPart *part, const PsKnownBlock *known,
								 const PsDecodedPart *decoded,
								 MemoryContext decoded_cxt);
extern void ps_block_cache_copy_range(const PsDecodedPart *block,
									  const PsKeyRange *keys,
									  PsDecodedPart *out);

#endif							/* PS_BLOCK_CACHE_H */
