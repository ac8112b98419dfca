/*-------------------------------------------------------------------------
 *
 * block_cache.c
 *	  This process's decoded blocks of the parts that lookups read, and
 *	  where each such part's blocks start and end.
 *
 * A read with a key condition (part_reader.c's lookups) asks here first.
 * For each part it read, the cache learns each block it read: its offset,
 * length, header, the header of the block after it, its figures and its
 * first and last key, and the key filter of a block a lookup of one key
 * consulted.  So the next lookup in that part starts at the block that
 * may hold its key (ps_block_cache_seek) instead of the part's first,
 * stops before a block whose first key is past its keys, and a lookup of
 * one key stops at a block whose filter does not hold it.  Filters are
 * learned only where consulted, not for every block a lookup passes, so
 * a shard whose parts do not overlap keeps few.  The blocks themselves
 * are kept decoded (and checked: they were checked when read), as their
 * raw columns and where each update's key and val start in them
 * (KeptBlock), within persist_sink.block_cache_size: least recently used
 * first out, decoded blocks before what is known of parts, but parts that
 * lookups no longer ask for before either (see evict).  A lookup takes a
 * copy of just the updates of its keys out of them (ps_block_cache_copy),
 * never the cache's own memory, so nothing a query holds can be evicted
 * under it.
 *
 * Entries are keyed by the part's blob key (or object URL).  A part's
 * bytes never change under its key: keys are random (ps_blob_new_key),
 * written once and deleted once, never rewritten with other bytes.  Each
 * part's entry also records the part's length and checksum as its state
 * gave them, and is dropped if a state names the key with others.
 *
 * The cache is per process, in TopMemoryContext.  No locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/ilist.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "base/settings.h"
#include "shard/block_cache.h"

/* Longest blob key the cache keeps parts of */
#define KEY_MAX		512

/*
 * A part no lookup asked for in this many seeks per known part goes
 * before decoded blocks: lookups spread evenly over the known parts ask
 * for each about once in as many seeks as there are parts.
 */
#define STALE_SEEKS_PER_PART 16

/* Bytes counted for one known block beside its keys */
#define KNOWN_BYTES	(sizeof(CachedBlock) + 2 * sizeof(void *))

/*
 * A decoded block as the cache keeps it: its raw columns, and per update
 * where its key and val start in them (one more entry: where the last
 * ends), its time and its diff, or the one time or diff all of them have.
 * About 16 bytes an update beside the columns, where PsUpdate takes 40.
 */
typedef struct KeptBlock
{
	const char *raw;
	uint32		nupdates;
	uint32	   *key_at;			/* nupdates + 1 offsets in raw */
	uint32	   *val_at;
	int64	   *times;			/* NULL: every update's time is time */
	int64		time;
	int64	   *diffs;			/* NULL: every update's diff is diff */
	int64		diff;
} KeptBlock;

/* A block's updates: decoded (PsDecodedPart) or as the cache keeps them */
typedef struct BlockView
{
	const PsDecodedPart *decoded;	/* or NULL, and then: */
	const KeptBlock *kept;
} BlockView;

/* One block of a part: what is known of it, and its updates if kept */
typedef struct CachedBlock
{
	PsKnownBlock known;			/* keys in the cache's context */
	struct PartBlocks *part;
	MemoryContext decoded_cxt;	/* holds kept; NULL when not kept */
	KeptBlock	kept;
	uint64		decoded_bytes;
	dlist_node	lru;			/* in kept_blocks, while kept */
} CachedBlock;

/*
 * What a seek compares of a known block, kept apart from it, so that the
 * binary search over a part's blocks reads one array: its last key's
 * first 8 bytes (ps_key_prefix), and whether it has updates at all.
 */
typedef struct BlockReach
{
	uint64		last_prefix;
	bool		has_updates;
} BlockReach;

/* A part's known blocks, in offset order */
typedef struct PartBlocks
{
	char		key[KEY_MAX];	/* the hash key: the part's blob key */
	uint64		encoded_size;	/* as its state gave them */
	uint32		checksum;
	int			nblocks;
	int			cap;
	CachedBlock **blocks;
	BlockReach *reach;			/* of each of blocks */
	uint64		bytes;			/* of what is known, decoded blocks aside */
	uint64		used;			/* seeks when last asked for */
	dlist_node	lru;			/* in known_parts */
} PartBlocks;

static MemoryContext cache_cxt = NULL;
static HTAB *parts = NULL;
static dlist_head known_parts = DLIST_STATIC_INIT(known_parts);
static dlist_head kept_blocks = DLIST_STATIC_INIT(kept_blocks);
static uint64 cache_bytes = 0;
static uint64 seeks = 0;		/* ps_block_cache_seek calls so far */

/* True if lookups in part may use the cache: a blob part, the cache on. */
bool
ps_block_cache_on(const PsPart *part)
{
	return ps_block_cache_kb > 0 && part->blob_key != NULL &&
		strlen(part->blob_key) < KEY_MAX;
}

/* Frees the decoded updates a block keeps, if any. */
static void
drop_decoded(CachedBlock *b)
{
	if (b->decoded_cxt == NULL)
		return;
	dlist_delete(&b->lru);
	MemoryContextDelete(b->decoded_cxt);
	b->decoded_cxt = NULL;
	memset(&b->kept, 0, sizeof(KeptBlock));
	cache_bytes -= b->decoded_bytes;
	b->decoded_bytes = 0;
}

/* Forgets a part and every block of it. */
static void
drop_part(PartBlocks *p)
{
	for (int i = 0; i < p->nblocks; i++)
	{
		CachedBlock *b = p->blocks[i];

		drop_decoded(b);
		if (b->known.first_key)
			pfree(b->known.first_key);
		if (b->known.last_key)
			pfree(b->known.last_key);
		if (b->known.has_filter)
			pfree(unconstify(uint8 *, b->known.filter.bits));
		pfree(b);
	}
	if (p->blocks)
		pfree(p->blocks);
	if (p->reach)
		pfree(p->reach);
	cache_bytes -= p->bytes;
	dlist_delete(&p->lru);
	hash_search(parts, p->key, HASH_REMOVE, NULL);
}

/* True if the cache holds more than persist_sink.block_cache_size. */
static inline bool
over_size(void)
{
	return cache_bytes > (uint64) ps_block_cache_kb * 1024;
}

/* The least recently used node of an LRU list other than keep, or NULL. */
static dlist_node *
oldest_but(dlist_head *list, const dlist_node *keep)
{
	dlist_node *n;

	if (dlist_is_empty(list))
		return NULL;
	n = dlist_tail_node(list);
	if (n != keep)
		return n;
	return dlist_has_prev(list, n) ? dlist_prev_node(list, n) : NULL;
}

/*
 * Evicts until the cache is within its size, never keep_block nor
 * keep_part, least recently used first: the parts no lookup asked for in
 * STALE_SEEKS_PER_PART seeks per known part (so what lookups of a shard
 * no longer read learned cannot keep out the blocks of another), then
 * decoded blocks, then parts.  What is known of a part goes after the
 * decoded blocks because it costs more to learn again: a lookup in a
 * part it knows nothing of walks its blocks from the first.
 */
static void
evict(const CachedBlock *keep_block, const PartBlocks *keep_part)
{
	const dlist_node *keep_b = keep_block ? &keep_block->lru : NULL;
	const dlist_node *keep_p = keep_part ? &keep_part->lru : NULL;
	uint64		stale = STALE_SEEKS_PER_PART *
		(uint64) hash_get_num_entries(parts);
	dlist_node *n;

	while (over_size() && (n = oldest_but(&known_parts, keep_p)) != NULL &&
		   dlist_container(PartBlocks, lru, n)->used + stale < seeks)
		drop_part(dlist_container(PartBlocks, lru, n));
	while (over_size() && (n = oldest_but(&kept_blocks, keep_b)) != NULL)
		drop_decoded(dlist_container(CachedBlock, lru, n));
	while (over_size() && (n = oldest_but(&known_parts, keep_p)) != NULL)
		drop_part(dlist_container(PartBlocks, lru, n));
}

/*
 * The known blocks of part, made (empty) if create and there are none;
 * NULL if not.  A part known under its key with another length or checksum
 * is forgotten first.
 */
static PartBlocks *
part_blocks(const PsPart *part, bool create)
{
	PartBlocks *p;
	bool		found;

	if (ps_block_cache_kb == 0 && parts != NULL)
		evict(NULL, NULL);		/* turned off: free it all */
	if (!ps_block_cache_on(part))
		return NULL;
	if (parts == NULL)
	{
		HASHCTL		ctl;

		if (!create)
			return NULL;
		cache_cxt = AllocSetContextCreate(TopMemoryContext,
										  "persist_sink block cache",
										  ALLOCSET_DEFAULT_SIZES);
		ctl.keysize = KEY_MAX;
		ctl.entrysize = sizeof(PartBlocks);
		ctl.hcxt = cache_cxt;
		parts = hash_create("persist_sink block cache", 256, &ctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	p = hash_search(parts, part->blob_key, HASH_FIND, NULL);
	if (p && (p->encoded_size != part->encoded_size ||
			  p->checksum != part->checksum))
	{
		drop_part(p);
		p = NULL;
	}
	if (p == NULL && !create)
		return NULL;
	if (p == NULL)
	{
		p = hash_search(parts, part->blob_key, HASH_ENTER, &found);
		Assert(!found);
		p->encoded_size = part->encoded_size;
		p->checksum = part->checksum;
		p->nblocks = 0;
		p->cap = 0;
		p->blocks = NULL;
		p->reach = NULL;
		p->bytes = sizeof(PartBlocks);
		cache_bytes += p->bytes;
		dlist_push_head(&known_parts, &p->lru);
	}
	else
		dlist_move_head(&known_parts, &p->lru);
	p->used = seeks;
	return p;
}

/* The index of the first known block of p at offset or after it. */
static int
block_index(const PartBlocks *p, uint64 offset)
{
	int			lo = 0;
	int			hi = p->nblocks;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (p->blocks[mid]->known.offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The known block of p at offset, or NULL. */
static CachedBlock *
block_at(const PartBlocks *p, uint64 offset)
{
	int			i = block_index(p, offset);

	if (i < p->nblocks && p->blocks[i]->known.offset == offset)
		return p->blocks[i];
	return NULL;
}

/*
 * True if the last key of p's known block i (which has updates) sorts
 * before keys, whose lower bound's ps_key_prefix is lower_prefix: by the
 * prefixes where they differ, else by the keys.
 */
static inline bool
ends_before(const PartBlocks *p, int i, const PsKeyRange *keys,
			uint64 lower_prefix)
{
	const PsKnownBlock *k;

	if (p->reach[i].last_prefix != lower_prefix)
		return p->reach[i].last_prefix < lower_prefix;
	k = &p->blocks[i]->known;
	return ps_key_before_range(keys, k->last_key, k->last_key_len);
}

/*
 * The index of the first known block of p that has updates and whose
 * last key does not sort before keys, which have a lower bound
 * (p->nblocks if none): a binary search, as a part's blocks sort by key
 * as by offset.  A block without updates answers as the one with updates
 * before it.
 */
static int
first_block_reaching(const PartBlocks *p, const PsKeyRange *keys)
{
	uint64		lower_prefix = ps_key_prefix(keys->lower, keys->lower_len);
	int			lo = 0;
	int			hi = p->nblocks;

	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;
		int			at = mid;

		while (at >= lo && !p->reach[at].has_updates)
			at--;
		if (at >= lo && !ends_before(p, at, keys, lower_prefix))
			hi = at;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * Where a lookup of keys in part may start: the offset of the first block
 * that may hold a key of keys as far as the cache knows (every update
 * before it sorts before keys), its header copied to header; 0 if it knows
 * of none past the first block (header then untouched).  The part's
 * length if no block can hold such a key.
 */
uint64
ps_block_cache_seek(const PsPart *part, const PsKeyRange *keys, char *header)
{
	PartBlocks *p;
	uint64		start = 0;
	int			reach;
	const PsKnownBlock *k;

	seeks++;
	p = part_blocks(part, false);
	if (p == NULL || !keys->has_lower)
		return 0;
	reach = first_block_reaching(p, keys);
	/* after the last block before it that says where the next one starts */
	for (int i = reach - 1; i >= 0; i--)
	{
		k = &p->blocks[i]->known;
		if (!k->has_updates ||
			(!k->has_next && k->offset + k->len != part->encoded_size))
			continue;
		if (k->has_next)
			memcpy(header, k->next_header, PS_PART_HEADER_SIZE);
		start = k->offset + k->len;
		break;
	}
	/* or at it, if its first key is before keys (so are all before it) */
	if (reach < p->nblocks)
	{
		k = &p->blocks[reach]->known;
		if (k->offset > start &&
			ps_key_before_range(keys, k->first_key, k->first_key_len))
		{
			memcpy(header, k->header, PS_PART_HEADER_SIZE);
			start = k->offset;
		}
	}
	return start;
}

/*
 * Copies what the cache knows of the block of part at offset into *known
 * (its keys pointing into the cache: valid until the next call here);
 * false if it knows nothing of it.
 */
bool
ps_block_cache_known(const PsPart *part, uint64 offset, PsKnownBlock *known)
{
	PartBlocks *p = part_blocks(part, false);
	CachedBlock *b = p ? block_at(p, offset) : NULL;

	if (b == NULL)
		return false;
	*known = b->known;
	return true;
}

/* Number of updates of a block's view. */
static inline uint32
view_nupdates(const BlockView *v)
{
	return v->decoded ? v->decoded->nupdates : v->kept->nupdates;
}

/* The i-th update of a block's view (its bytes in the view's block). */
static inline void
view_update(const BlockView *v, uint32 i, PsUpdate *u)
{
	const KeptBlock *k = v->kept;

	if (v->decoded)
	{
		*u = v->decoded->updates[i];
		return;
	}
	u->key = k->raw + k->key_at[i];
	u->key_len = k->key_at[i + 1] - k->key_at[i];
	u->val = k->raw + k->val_at[i];
	u->val_len = k->val_at[i + 1] - k->val_at[i];
	u->time = k->times ? k->times[i] : k->time;
	u->diff = k->diffs ? k->diffs[i] : k->diff;
}

/*
 * Index of the first update of a block's view from `from` on that is past
 * keys' lower bound (past: not before keys) or, if past_upper, past their
 * upper bound.
 */
static uint32
first_past(const BlockView *v, uint32 from, const PsKeyRange *keys,
		   bool past_upper)
{
	uint32		lo = from;
	uint32		hi = view_nupdates(v);

	while (lo < hi)
	{
		uint32		mid = lo + (hi - lo) / 2;
		PsUpdate	u;

		view_update(v, mid, &u);
		if (past_upper ? !ps_key_past_range(keys, u.key, u.key_len) :
			ps_key_before_range(keys, u.key, u.key_len))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Copies into out, allocated in the current context, the updates of a
 * block's view whose keys are in keys, and the first one past them if
 * there is one (a merge reading the copy then knows it is past its keys).
 */
static void
copy_range(const BlockView *v, const PsKeyRange *keys, PsDecodedPart *out)
{
	uint32		from = first_past(v, 0, keys, false);
	uint32		to = first_past(v, from, keys, true);
	uint64		bytes = 0;
	char	   *at;
	PsUpdate	u;

	if (to < view_nupdates(v))
		to++;
	memset(out, 0, sizeof(PsDecodedPart));
	if (from >= to)
		return;
	for (uint32 i = from; i < to; i++)
	{
		view_update(v, i, &u);
		bytes += (uint64) u.key_len + u.val_len;
	}
	out->raw = palloc(bytes + 1);
	out->updates = palloc(sizeof(PsUpdate) * (to - from));
	out->nupdates = to - from;
	at = out->raw;
	for (uint32 i = from; i < to; i++)
	{
		PsUpdate   *c = &out->updates[i - from];

		view_update(v, i, c);
		memcpy(at, c->key, c->key_len);
		c->key = at;
		at += c->key_len;
		memcpy(at, c->val, c->val_len);
		c->val = at;
		at += c->val_len;
	}
}

/*
 * Copies into out, allocated in the current context, the updates of block
 * whose keys are in keys, and the first one past them (see copy_range).
 */
void
ps_block_cache_copy_range(const PsDecodedPart *block, const PsKeyRange *keys,
						  PsDecodedPart *out)
{
	BlockView	v = {block, NULL};

	copy_range(&v, keys, out);
}

/*
 * Copies into out, allocated in the current context, the updates of keys
 * (see copy_range) of the block of part at offset, if the cache keeps it
 * decoded; false if not.
 */
bool
ps_block_cache_copy(const PsPart *part, uint64 offset, const PsKeyRange *keys,
					PsDecodedPart *out)
{
	PartBlocks *p = part_blocks(part, false);
	CachedBlock *b = p ? block_at(p, offset) : NULL;
	BlockView	v;

	if (b == NULL || b->decoded_cxt == NULL)
		return false;
	dlist_move_head(&kept_blocks, &b->lru);
	v.decoded = NULL;
	v.kept = &b->kept;
	copy_range(&v, keys, out);
	return true;
}

/*
 * Makes the cache's form of a decoded block in the block's own context
 * (cxt, which holds decoded's raw columns and updates), freeing its
 * updates there.
 */
static void
keep_block(KeptBlock *k, const PsDecodedPart *decoded, MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	uint32		n = decoded->nupdates;
	bool		one_time = true;
	bool		one_diff = true;

	k->raw = decoded->raw;
	k->nupdates = n;
	k->key_at = palloc(sizeof(uint32) * (n + 1));
	k->val_at = palloc(sizeof(uint32) * (n + 1));
	k->time = n > 0 ? decoded->updates[0].time : 0;
	k->diff = n > 0 ? decoded->updates[0].diff : 0;
	k->times = NULL;
	k->diffs = NULL;
	k->key_at[0] = n > 0 ? (uint32) (decoded->updates[0].key - decoded->raw) : 0;
	k->val_at[0] = n > 0 ? (uint32) (decoded->updates[0].val - decoded->raw) : 0;
	for (uint32 i = 0; i < n; i++)
	{
		const PsUpdate *u = &decoded->updates[i];

		/* keys, and vals, lie one after the other in their columns */
		Assert(k->key_at[i] == (uint32) (u->key - decoded->raw));
		Assert(k->val_at[i] == (uint32) (u->val - decoded->raw));
		k->key_at[i + 1] = k->key_at[i] + u->key_len;
		k->val_at[i + 1] = k->val_at[i] + u->val_len;
		one_time &= u->time == k->time;
		one_diff &= u->diff == k->diff;
	}
	if (!one_time)
	{
		k->times = palloc(sizeof(int64) * Max(n, 1));
		for (uint32 i = 0; i < n; i++)
			k->times[i] = decoded->updates[i].time;
	}
	if (!one_diff)
	{
		k->diffs = palloc(sizeof(int64) * Max(n, 1));
		for (uint32 i = 0; i < n; i++)
			k->diffs[i] = decoded->updates[i].diff;
	}
	if (decoded->updates)
		pfree(decoded->updates);
	MemoryContextSwitchTo(old);
}

/* A copy of len bytes at data in the cache's context, counted. */
static char *
cache_copy(PartBlocks *p, const char *data, uint32 len)
{
	char	   *copy = MemoryContextAlloc(cache_cxt, len + 1);

	memcpy(copy, data, len);
	p->bytes += len + 1;
	cache_bytes += len + 1;
	return copy;
}

/* Makes room in p for one more block. */
static void
grow_blocks(PartBlocks *p)
{
	int			cap = Max(p->cap * 2, 8);

	if (p->nblocks < p->cap)
		return;
	if (p->blocks == NULL)
	{
		p->blocks = MemoryContextAlloc(cache_cxt, sizeof(CachedBlock *) * cap);
		p->reach = MemoryContextAlloc(cache_cxt, sizeof(BlockReach) * cap);
	}
	else
	{
		p->blocks = repalloc(p->blocks, sizeof(CachedBlock *) * cap);
		p->reach = repalloc(p->reach, sizeof(BlockReach) * cap);
	}
	p->bytes += (sizeof(CachedBlock *) + sizeof(BlockReach)) * (cap - p->cap);
	cache_bytes += (sizeof(CachedBlock *) + sizeof(BlockReach)) * (cap - p->cap);
	p->cap = cap;
}

/*
 * Learns a block of part that a lookup read and checked (known; its keys
 * and key filter are copied, the filter also for a block known before)
 * and, if decoded_cxt is not NULL, keeps its updates, decoded
 * in decoded_cxt, which the cache then owns.  Evicts what no longer fits.
 */
void
ps_block_cache_learn(const PsPart *part, const PsKnownBlock *known,
					 const PsDecodedPart *decoded, MemoryContext decoded_cxt)
{
	PartBlocks *p = part_blocks(part, true);
	CachedBlock *b;

	if (p == NULL)
	{
		if (decoded_cxt)
			MemoryContextDelete(decoded_cxt);
		return;
	}
	b = block_at(p, known->offset);
	if (b == NULL)
	{
		int			i = block_index(p, known->offset);

		grow_blocks(p);
		b = MemoryContextAllocZero(cache_cxt, sizeof(CachedBlock));
		b->known = *known;
		b->known.first_key = b->known.last_key = NULL;
		b->known.has_filter = false;
		if (known->has_updates)
		{
			b->known.first_key = cache_copy(p, known->first_key, known->first_key_len);
			b->known.last_key = cache_copy(p, known->last_key, known->last_key_len);
		}
		b->part = p;
		memmove(&p->blocks[i + 1], &p->blocks[i],
				sizeof(CachedBlock *) * (p->nblocks - i));
		memmove(&p->reach[i + 1], &p->reach[i],
				sizeof(BlockReach) * (p->nblocks - i));
		p->blocks[i] = b;
		p->reach[i].has_updates = known->has_updates;
		p->reach[i].last_prefix = known->has_updates ?
			ps_key_prefix(known->last_key, known->last_key_len) : 0;
		p->nblocks++;
		p->bytes += KNOWN_BYTES;
		cache_bytes += KNOWN_BYTES;
	}
	if (known->has_filter && !b->known.has_filter)
	{
		b->known.filter = known->filter;
		b->known.filter.bits = (const uint8 *)
			cache_copy(p, (const char *) known->filter.bits, known->filter.nbytes);
		b->known.has_filter = true;
	}
	if (decoded_cxt && b->decoded_cxt == NULL)
	{
		MemoryContextSetParent(decoded_cxt, cache_cxt);
		b->decoded_cxt = decoded_cxt;
		keep_block(&b->kept, decoded, decoded_cxt);
		b->decoded_bytes = MemoryContextMemAllocated(decoded_cxt, true);
		cache_bytes += b->decoded_bytes;
		dlist_push_head(&kept_blocks, &b->lru);
	}
	else if (decoded_cxt)
		MemoryContextDelete(decoded_cxt);
	evict(b, p);
	/* a block larger than the whole cache is not kept */
	if (over_size())
		drop_decoded(b);
}
