/*-------------------------------------------------------------------------
 *
 * object_cache.c
 *	  A process's cache of the bytes it read of objects: windows of
 *	  PS_OBJECT_WINDOW_BYTES, at offsets that are multiples of it, kept
 *	  least recently used first out within persist_sink.object_cache_size.
 *
 * An object is never written twice (a part's key is never reused), so a
 * cached window never goes stale: a snapshot, listen, point lookup or merge
 * reading a part read before makes no request.  An object deleted by the
 * collector is named by no state any snapshot can read, so its windows are
 * never asked for again and age out.  A read of a slice fetches the
 * windows it needs that are not cached in one ranged GET.
 *
 * The cache lives in its own memory context under TopMemoryContext; a
 * lookup is a hash of (object URL, window number).  No locks: it is the
 * process's own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "lib/ilist.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "base/settings.h"
#include "objstore/objstore.h"

/* A window's key: a hash of its object's URL and its number */
typedef struct WindowKey
{
	uint32		url_hash;
	uint32		number;
} WindowKey;

/* A cached window (several objects may share a key: see chain) */
typedef struct CachedWindow
{
	WindowKey	key;			/* hash key: first */
	struct WindowEntry *chain;	/* the windows of this key */
} CachedWindow;

/* One object's window, in the LRU list */
typedef struct WindowEntry
{
	struct WindowEntry *next;	/* next of the same key */
	dlist_node	lru;			/* most recently used at the head */
	WindowKey	key;
	char	   *url;			/* the object's URL */
	uint64		len;			/* bytes held (the object's last is shorter) */
	char		data[FLEXIBLE_ARRAY_MEMBER];
} WindowEntry;

static MemoryContext cache_cxt = NULL;
static HTAB *windows = NULL;
static dlist_head lru = DLIST_STATIC_INIT(lru);
static uint64 cached_bytes = 0;

/* The cache's budget in bytes */
static uint64
budget(void)
{
	return (uint64) ps_object_cache_kb * 1024;
}

/* Creates the cache's context and hash table on first use. */
static void
ensure_cache(void)
{
	HASHCTL		ctl;

	if (windows)
		return;
	cache_cxt = AllocSetContextCreate(TopMemoryContext,
									  "persist_sink object cache",
									  ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(WindowKey);
	ctl.entrysize = sizeof(CachedWindow);
	ctl.hcxt = cache_cxt;
	windows = hash_create("persist_sink object windows", 256, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* The key of window number of the object url. */
static WindowKey
window_key(const char *url, uint64 number)
{
	WindowKey	key;

	memset(&key, 0, sizeof(key));
	key.url_hash = string_hash(url, strlen(url) + 1);
	key.number = (uint32) number;
	return key;
}

/* The cached window number of url, or NULL; a hit moves it to the LRU head. */
static WindowEntry *
find_window(const char *url, uint64 number)
{
	WindowKey	key = window_key(url, number);
	CachedWindow *slot = hash_search(windows, &key, HASH_FIND, NULL);

	for (WindowEntry *e = slot ? slot->chain : NULL; e; e = e->next)
		if (e->key.number == (uint32) number && strcmp(e->url, url) == 0)
		{
			dlist_move_head(&lru, &e->lru);
			return e;
		}
	return NULL;
}

/* Unlinks and frees a window. */
static void
drop_window(WindowEntry *e)
{
	CachedWindow *slot = hash_search(windows, &e->key, HASH_FIND, NULL);
	WindowEntry **link = &slot->chain;

	while (*link != e)
		link = &(*link)->next;
	*link = e->next;
	if (slot->chain == NULL)
		(void) hash_search(windows, &e->key, HASH_REMOVE, NULL);
	dlist_delete(&e->lru);
	cached_bytes -= e->len;
	pfree(e->url);
	pfree(e);
}

/* Drops the least recently used windows until len more bytes fit the budget. */
static void
make_room(uint64 len)
{
	while (!dlist_is_empty(&lru) && cached_bytes + len > budget())
		drop_window(dlist_tail_element(WindowEntry, lru, &lru));
}

/* Caches len bytes of data as window number of url (it must not be cached). */
static void
add_window(const char *url, uint64 number, const char *data, uint64 len)
{
	WindowKey	key = window_key(url, number);
	CachedWindow *slot;
	WindowEntry *e;
	bool		found;

	if (len > budget())
		return;
	make_room(len);
	e = MemoryContextAlloc(cache_cxt, offsetof(WindowEntry, data) + len);
	e->key = key;
	e->url = MemoryContextStrdup(cache_cxt, url);
	e->len = len;
	memcpy(e->data, data, len);
	slot = hash_search(windows, &key, HASH_ENTER, &found);
	e->next = found ? slot->chain : NULL;
	slot->chain = e;
	dlist_push_head(&lru, &e->lru);
	cached_bytes += len;
}

/* Bytes of window number w of the object ref names (its last is shorter). */
static uint64
window_len(const PsObjectRef *ref, uint64 w)
{
	return Min(PS_OBJECT_WINDOW_BYTES, ref->length - w * PS_OBJECT_WINDOW_BYTES);
}

/*
 * Fetches windows [first, last] of the object ref names by one ranged GET
 * and caches those not cached, in this process and on the server's disk;
 * returns the bytes read (a bytea in the current context, from the start
 * of window first), or NULL if the object is missing or shorter than its
 * state says (nothing is then cached).
 */
static bytea *
fetch_windows(const PsObjectRef *ref, uint64 first, uint64 last)
{
	uint64		from = first * PS_OBJECT_WINDOW_BYTES;
	uint64		to = Min((last + 1) * PS_OBJECT_WINDOW_BYTES, ref->length);
	bytea	   *got;

	got = ps_s3_get(ref->bucket, ref->object, from, to - from,
					CurrentMemoryContext);
	if (got == NULL || VARSIZE_ANY_EXHDR(got) != to - from)
		return NULL;
	for (uint64 w = first; w <= last; w++)
	{
		const char *data = VARDATA_ANY(got) + (w - first) * PS_OBJECT_WINDOW_BYTES;

		if (budget() > 0 && find_window(ref->url, w) == NULL)
			add_window(ref->url, w, data, window_len(ref, w));
		if (ps_object_disk_cache_on())
			ps_object_disk_cache_put(ref->url, w, data, (uint32) window_len(ref, w));
	}
	return got;
}

/* Copies the bytes of [offset, offset + len) in window w, held at data, into dest. */
static void
copy_from_window(uint64 w, const char *data, uint64 offset, uint64 len,
				 char *dest)
{
	uint64		start = Max(offset, w * PS_OBJECT_WINDOW_BYTES);
	uint64		end = Min(offset + len, (w + 1) * PS_OBJECT_WINDOW_BYTES);

	memcpy(dest + (start - offset), data + (start - w * PS_OBJECT_WINDOW_BYTES),
		   end - start);
}

/*
 * Copies the bytes of [offset, offset + len) in window w of the object ref
 * names into dest, if this process's cache or the server's disk cache has
 * the window (one found on disk is then kept in this process's too);
 * false if neither has it.
 */
static bool
copy_cached(const PsObjectRef *ref, uint64 w, uint64 offset, uint64 len, char *dest)
{
	static char *disk_window = NULL;
	WindowEntry *e;

	if (budget() > 0 && (e = find_window(ref->url, w)) != NULL)
	{
		copy_from_window(w, e->data, offset, len, dest);
		return true;
	}
	if (!ps_object_disk_cache_on())
		return false;
	if (disk_window == NULL)
		disk_window = MemoryContextAlloc(cache_cxt, PS_OBJECT_WINDOW_BYTES);
	if (!ps_object_disk_cache_get(ref->url, w, (uint32) window_len(ref, w),
								  disk_window))
		return false;
	copy_from_window(w, disk_window, offset, len, dest);
	if (budget() > 0)
		add_window(ref->url, w, disk_window, window_len(ref, w));
	return true;
}

/*
 * Copies bytes [offset, offset + len) of the object ref names (within its
 * length, len > 0) into dest: each window they are in from this process's
 * cache or the server's disk cache while they have it, the rest by one
 * ranged GET of the windows left, which are cached.  False if the object
 * is missing or shorter than its state says.
 */
bool
ps_object_cache_read(const PsObjectRef *ref, uint64 offset, uint64 len, char *dest)
{
	uint64		first = offset / PS_OBJECT_WINDOW_BYTES;
	uint64		last = (offset + len - 1) / PS_OBJECT_WINDOW_BYTES;
	uint64		w = first;
	uint64		start;
	bytea	   *got;

	Assert(len > 0 && offset + len <= ref->length &&
		   (budget() > 0 || ps_object_disk_cache_on()));
	ensure_cache();
	while (w <= last && copy_cached(ref, w, offset, len, dest))
		w++;
	if (w > last)
		return true;
	got = fetch_windows(ref, w, last);
	if (got == NULL)
		return false;
	start = Max(offset, w * PS_OBJECT_WINDOW_BYTES);
	memcpy(dest + (start - offset),
		   VARDATA_ANY(got) + (start - w * PS_OBJECT_WINDOW_BYTES),
		   offset + len - start);
	pfree(got);
	return true;
}
