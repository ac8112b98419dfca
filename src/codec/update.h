/*-------------------------------------------------------------------------
 *
 * update.h
 *	  Updates (key, val, time, diff): building, sorting and consolidating.
 *
 * The sorting and consolidation code is pure (no ereport), so the codecs
 * and their stand-alone tests can use it outside the server.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PS_UPDATE_H
#define PS_UPDATE_H

#include "port/pg_bswap.h"

/* One update; key and val point into memory owned by someone else. */
typedef struct PsUpdate
{
	const char *key;
	const char *val;
	uint32		key_len;
	uint32		val_len;
	int64		time;
	int64		diff;
} PsUpdate;

/* Bytes an update takes in a part before compression (a bound) */
#define PS_UPDATE_RAW_SIZE(u) \
	((uint64) (u)->key_len + (u)->val_len + 2 * 5 + 2 * 10)

/*
 * The first 8 bytes of a key as a big-endian integer, zero-padded: keys
 * whose prefixes differ compare as their prefixes do; equal prefixes say
 * nothing.
 */
static inline uint64
ps_key_prefix(const char *key, uint32 key_len)
{
	uint64		prefix = 0;

	if (key_len > 0)
		memcpy(&prefix, key, Min(key_len, sizeof(uint64)));
	return pg_ntoh64(prefix);
}

/* True if two updates have the same key and val (whatever their times). */
static inline bool
ps_update_same_keyval(const PsUpdate *a, const PsUpdate *b)
{
	return a->key_len == b->key_len && a->val_len == b->val_len &&
		memcmp(a->key, b->key, a->key_len) == 0 &&
		memcmp(a->val, b->val, a->val_len) == 0;
}

extern int	ps_bytes_cmp(const char *a, uint32 alen, const char *b, uint32 blen);
extern bool ps_updates_repeat_keyval(const PsUpdate *updates, uint32 n);
extern int	ps_update_cmp_kv(const PsUpdate *a, const PsUpdate *b);
extern int	ps_update_cmp_kvt(const PsUpdate *a, const PsUpdate *b);
extern void ps_updates_sort(PsUpdate *updates, int n);
extern bool ps_updates_consolidate(PsUpdate *updates, int *n);

/* The updates of one write, as the SQL layer hands them down */
typedef struct PsUpdateArrays
{
	int			n;
	PsUpdate   *updates;
	uint64		raw_bytes;		/* sum of PS_UPDATE_RAW_SIZE */
} PsUpdateArrays;

#endif							/* PS_UPDATE_H */
