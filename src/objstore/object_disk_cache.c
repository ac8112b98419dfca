/*-------------------------------------------------------------------------
 *
 * object_disk_cache.c
 *	  The server's cache on disk of windows of objects, shared by all its
 *	  processes: persist_sink.object_disk_cache_size of them, in one file
 *	  of the server's temporary files directory, indexed in shared memory.
 *
 * A window (PS_OBJECT_WINDOW_BYTES of an object, at an offset that is a
 * multiple of it) is named by the SHA-256 of its object's URL and its
 * number.  An object is never written twice, so a cached window never
 * goes stale; one the collector deleted is named by no state any snapshot
 * can read and ages out.
 *
 * The file holds nslots slots of PS_OBJECT_WINDOW_BYTES; slot i is at
 * offset i * PS_OBJECT_WINDOW_BYTES.  Shared memory holds, per slot, the
 * name of the window in it, its length, its CRC-32C, a use count for the
 * clock sweep that picks a slot to reuse, a generation bumped each time
 * the slot is taken, and its state:
 *
 *	EMPTY -> FILLING	a process took the slot to write a window into it
 *	FILLING -> VALID	it wrote the window
 *	FILLING -> EMPTY	its write failed
 *	VALID -> FILLING	the clock sweep took the slot for another window
 *
 * A window belongs to the role that read it from the store.  A role that
 * holds half of the slots or more, while other roles hold any, replaces
 * only its own windows: one role reading much never takes the other half
 * from the others (as its appends leave them half of the sink's arena),
 * and a role alone may fill the cache.
 *
 * One LWLock guards the index; file I/O is done without it.  A reader
 * notes the slot's generation under the lock, reads the slot, and keeps
 * what it read only if the generation is unchanged under the lock again
 * (a writer bumps it before it writes, so the bytes read are the window
 * noted) and the bytes match the CRC.  A FILLING slot is never taken: its
 * writer does not check for interrupts between taking it and ending its
 * write, and on an error it empties the slot.
 *
 * The file is in base/pgsql_tmp, so base backups leave it out and the
 * postmaster removes it when it starts or restarts after a crash, when
 * the index is created empty again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/wait_event.h"

#include "base/settings.h"
#include "objstore/objstore.h"

/* The directory of the default tablespace's temporary files, and the cache's file */
#define DISK_CACHE_DIR "base/" PG_TEMP_FILES_DIR
#define DISK_CACHE_FILE DISK_CACHE_DIR "/" PG_TEMP_FILE_PREFIX "_persist_sink_object_cache"

/* Highest use count of a slot: uses the clock sweep passes over it */
#define DISK_CACHE_MAX_USAGE 5

/* A window's name: its object's URL's SHA-256 and its number */
typedef struct DiskWindowKey
{
	uint8		url_sha256[PG_SHA256_DIGEST_LENGTH];
	uint32		number;
} DiskWindowKey;

/* The index's entry: where a window is */
typedef struct DiskWindowEntry
{
	DiskWindowKey key;			/* hash key: first */
	int			slot;
} DiskWindowEntry;

typedef enum DiskSlotState
{
	DISK_SLOT_EMPTY,
	DISK_SLOT_FILLING,
	DISK_SLOT_VALID
} DiskSlotState;

/* The windows a role holds (an entry while it holds any) */
typedef struct RoleWindows
{
	Oid			role;			/* hash key */
	int			windows;
} RoleWindows;

/* A slot of the file */
typedef struct DiskSlot
{
	DiskWindowKey key;			/* the window in it, unless EMPTY */
	Oid			owner;			/* the role that read it, unless EMPTY */
	uint64		generation;		/* bumped each time it is taken */
	uint32		len;			/* bytes of the window */
	pg_crc32c	crc;			/* their CRC-32C */
	uint8		usage;			/* uses since the sweep last passed */
	uint8		state;			/* a DiskSlotState */
} DiskSlot;

/* The shared index */
typedef struct DiskCacheShared
{
	LWLock	   *lock;			/* guards all below and the hash */
	int			hand;			/* the clock sweep's next slot */
	int			held;			/* slots VALID or FILLING */
	pg_atomic_uint64 hits;
	pg_atomic_uint64 misses;
	pg_atomic_uint64 writes;
	pg_atomic_uint64 replaced;
	DiskSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} DiskCacheShared;

static DiskCacheShared *disk_cache = NULL;
static HTAB *disk_index = NULL;
static HTAB *role_windows = NULL;
static File cache_file = -1;
static bool cache_file_failed = false;

/* Slots of the cache: its size in windows. */
static int
slot_count(void)
{
	return (int) (((int64) ps_object_disk_cache_kb * 1024) / PS_OBJECT_WINDOW_BYTES);
}

/* Whether the server has a disk cache of objects. */
bool
ps_object_disk_cache_on(void)
{
	return slot_count() > 0;
}

/* Shared memory of the index, none if the cache is off. */
Size
ps_object_disk_cache_shmem_size(void)
{
	int			n = slot_count();

	if (n == 0)
		return 0;
	return add_size(add_size(MAXALIGN(add_size(offsetof(DiskCacheShared, slots),
											   mul_size(sizeof(DiskSlot), n))),
							 hash_estimate_size(n, sizeof(DiskWindowEntry))),
					hash_estimate_size(n, sizeof(RoleWindows)));
}

/* Attaches to (or creates, empty) the index; caller holds AddinShmemInitLock. */
void
ps_object_disk_cache_shmem_init(void)
{
	int			n = slot_count();
	HASHCTL		ctl;
	bool		found;

	if (n == 0)
		return;
	disk_cache = ShmemInitStruct("persist_sink object disk cache",
								 offsetof(DiskCacheShared, slots) +
								 sizeof(DiskSlot) * n, &found);
	if (!found)
	{
		disk_cache->lock = &(GetNamedLWLockTranche("persist_sink object disk cache"))->lock;
		disk_cache->hand = 0;
		disk_cache->held = 0;
		pg_atomic_init_u64(&disk_cache->hits, 0);
		pg_atomic_init_u64(&disk_cache->misses, 0);
		pg_atomic_init_u64(&disk_cache->writes, 0);
		pg_atomic_init_u64(&disk_cache->replaced, 0);
		memset(disk_cache->slots, 0, sizeof(DiskSlot) * n);
	}
	ctl.keysize = sizeof(DiskWindowKey);
	ctl.entrysize = sizeof(DiskWindowEntry);
	disk_index = ShmemInitHash("persist_sink object disk cache index", n, n,
							   &ctl, HASH_ELEM | HASH_BLOBS);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(RoleWindows);
	role_windows = ShmemInitHash("persist_sink object disk cache roles", n, n,
								 &ctl, HASH_ELEM | HASH_BLOBS);
}

/* The name of window number of the object url. */
static DiskWindowKey
disk_window_key(const char *url, uint64 number)
{
	DiskWindowKey key;

	memset(&key, 0, sizeof(key));
	ps_sha256(url, strlen(url), key.url_sha256);
	key.number = (uint32) number;
	return key;
}

/* Opens the cache's file once per process; false (warned once) if it cannot. */
static bool
open_cache_file(void)
{
	if (cache_file >= 0)
		return true;
	if (cache_file_failed)
		return false;
	(void) MakePGDirectory(DISK_CACHE_DIR);
	cache_file = PathNameOpenFile(DISK_CACHE_FILE, O_RDWR | O_CREAT | PG_BINARY);
	if (cache_file < 0)
	{
		cache_file_failed = true;
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not open the object cache file \"%s\": %m",
						DISK_CACHE_FILE),
				 errdetail("This process reads objects without the disk cache.")));
		return false;
	}
	return true;
}

/* The file offset of slot i. */
static off_t
slot_offset(int i)
{
	return (off_t) i * PS_OBJECT_WINDOW_BYTES;
}

/* The windows role holds; needs the cache's lock. */
static int
windows_of(Oid role)
{
	RoleWindows *r = hash_search(role_windows, &role, HASH_FIND, NULL);

	return r ? r->windows : 0;
}

/* Counts a window more (delta 1) or less (-1) for role; needs the lock exclusive. */
static void
count_window(Oid role, int delta)
{
	bool		found;
	RoleWindows *r = hash_search(role_windows, &role, HASH_ENTER, &found);

	if (!found)
		r->windows = 0;
	r->windows += delta;
	disk_cache->held += delta;
	Assert(r->windows >= 0 && disk_cache->held >= r->windows);
	if (r->windows == 0)
		(void) hash_search(role_windows, &role, HASH_REMOVE, NULL);
}

/* Takes window out of slot s (VALID or FILLING): EMPTY; needs the lock exclusive. */
static void
empty_slot(DiskSlot *s)
{
	(void) hash_search(disk_index, &s->key, HASH_REMOVE, NULL);
	count_window(s->owner, -1);
	s->state = DISK_SLOT_EMPTY;
	s->usage = 0;
}

/*
 * Finds window key, of len bytes, in the index and counts a use of it;
 * returns its slot and notes its generation and CRC, or -1.  Takes the
 * cache's lock.
 */
static int
find_slot(const DiskWindowKey *key, uint32 len, uint64 *generation,
		  pg_crc32c *crc)
{
	DiskWindowEntry *e;
	int			slot = -1;

	LWLockAcquire(disk_cache->lock, LW_EXCLUSIVE);
	e = hash_search(disk_index, key, HASH_FIND, NULL);
	if (e != NULL)
	{
		DiskSlot   *s = &disk_cache->slots[e->slot];

		if (s->state == DISK_SLOT_VALID && s->len == len)
		{
			slot = e->slot;
			*generation = s->generation;
			*crc = s->crc;
			if (s->usage < DISK_CACHE_MAX_USAGE)
				s->usage++;
		}
	}
	LWLockRelease(disk_cache->lock);
	return slot;
}

/* Whether slot i still holds generation; takes the cache's lock. */
static bool
slot_unchanged(int i, uint64 generation)
{
	bool		same;

	LWLockAcquire(disk_cache->lock, LW_SHARED);
	same = disk_cache->slots[i].generation == generation &&
		disk_cache->slots[i].state == DISK_SLOT_VALID;
	LWLockRelease(disk_cache->lock);
	return same;
}

/*
 * Empties slot i if it still holds generation (its bytes did not match
 * their checksum), so that the window is cached again; takes the lock.
 */
static void
drop_slot(int i, uint64 generation)
{
	DiskSlot   *s = &disk_cache->slots[i];

	LWLockAcquire(disk_cache->lock, LW_EXCLUSIVE);
	if (s->generation == generation && s->state == DISK_SLOT_VALID)
		empty_slot(s);
	LWLockRelease(disk_cache->lock);
}

/*
 * Copies window number of the object url, of len bytes, into dest if the
 * cache has it (and it reads back as written); false if not.  A window
 * that does not match its checksum is warned of and dropped.
 */
bool
ps_object_disk_cache_get(const char *url, uint64 number, uint32 len, char *dest)
{
	DiskWindowKey key;
	uint64		generation = 0;
	pg_crc32c	crc = 0;
	pg_crc32c	read_crc;
	int			slot;

	Assert(disk_cache != NULL && len > 0 && len <= PS_OBJECT_WINDOW_BYTES);
	if (!open_cache_file())
		return false;
	key = disk_window_key(url, number);
	slot = find_slot(&key, len, &generation, &crc);
	if (slot < 0 ||
		FileRead(cache_file, dest, len, slot_offset(slot), PG_WAIT_EXTENSION) != len ||
		!slot_unchanged(slot, generation))
	{
		pg_atomic_fetch_add_u64(&disk_cache->misses, 1);
		return false;
	}
	INIT_CRC32C(read_crc);
	COMP_CRC32C(read_crc, dest, len);
	FIN_CRC32C(read_crc);
	if (!EQ_CRC32C(read_crc, crc))
	{
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("window %u of object \"%s\" in the object cache file does not match its checksum",
						(uint32) number, url),
				 errdetail("It is read from the object store instead.")));
		drop_slot(slot, generation);
		pg_atomic_fetch_add_u64(&disk_cache->misses, 1);
		return false;
	}
	pg_atomic_fetch_add_u64(&disk_cache->hits, 1);
	return true;
}

/*
 * Takes a slot for window key (len bytes, crc) read by role: the next the
 * clock sweep finds unused since it last passed and not FILLING (one of
 * role's own if it holds half of them or more and others hold any);
 * makes it FILLING, bumps its generation and indexes it.  Returns -1 if
 * the window is cached or being cached, or no slot is free.  Takes the
 * cache's lock.
 */
static int
take_slot(const DiskWindowKey *key, Oid role, uint32 len, pg_crc32c crc,
		  uint64 *generation)
{
	int			n = slot_count();
	int			slot = -1;
	bool		own_only;
	bool		found;
	DiskWindowEntry *e;

	LWLockAcquire(disk_cache->lock, LW_EXCLUSIVE);
	if (hash_search(disk_index, key, HASH_FIND, NULL) != NULL)
	{
		LWLockRelease(disk_cache->lock);
		return -1;
	}
	own_only = windows_of(role) >= Max(1, n / 2) &&
		windows_of(role) < disk_cache->held;
	for (int step = 0; step < (DISK_CACHE_MAX_USAGE + 1) * n && slot < 0; step++)
	{
		DiskSlot   *s = &disk_cache->slots[disk_cache->hand];
		int			i = disk_cache->hand;

		disk_cache->hand = (disk_cache->hand + 1) % n;
		if (s->state == DISK_SLOT_FILLING ||
			(own_only && (s->state == DISK_SLOT_EMPTY || s->owner != role)))
			continue;
		if (s->usage > 0)
		{
			s->usage--;
			continue;
		}
		if (s->state == DISK_SLOT_VALID)
		{
			empty_slot(s);
			pg_atomic_fetch_add_u64(&disk_cache->replaced, 1);
		}
		slot = i;
	}
	if (slot >= 0)
	{
		DiskSlot   *s = &disk_cache->slots[slot];

		s->key = *key;
		s->owner = role;
		s->generation++;
		s->len = len;
		s->crc = crc;
		s->usage = 1;
		s->state = DISK_SLOT_FILLING;
		*generation = s->generation;
		e = hash_search(disk_index, key, HASH_ENTER, &found);
		Assert(!found);
		e->slot = slot;
		count_window(role, 1);
	}
	LWLockRelease(disk_cache->lock);
	return slot;
}

/*
 * Ends the write of slot i taken as generation: VALID if written, else
 * EMPTY and out of the index.  Takes the cache's lock.
 */
static void
end_fill(int i, uint64 generation, bool written)
{
	DiskSlot   *s = &disk_cache->slots[i];

	LWLockAcquire(disk_cache->lock, LW_EXCLUSIVE);
	Assert(s->generation == generation && s->state == DISK_SLOT_FILLING);
	if (written)
		s->state = DISK_SLOT_VALID;
	else
		empty_slot(s);
	LWLockRelease(disk_cache->lock);
}

/*
 * Warns, once per process, that a window could not be written to the
 * cache's file (the disk full, say): the slot is emptied and the window
 * read from the store next time.  Takes errno from the write; a short
 * write that set none is taken as a full disk, as PostgreSQL does.
 */
static void
warn_write_failed(int written)
{
	static bool warned = false;

	if (warned)
		return;
	warned = true;
	if (written >= 0)
		errno = ENOSPC;
	ereport(WARNING,
			(errcode_for_file_access(),
			 errmsg("could not write to the object cache file \"%s\": %m",
					DISK_CACHE_FILE),
			 errdetail("The windows this process could not cache are read from the object store.")));
}

/*
 * Writes len bytes at data into slot i, taken as generation, and ends its
 * fill; true if written.  An error empties the slot before it goes on.
 */
static bool
fill_slot(int i, uint64 generation, const char *data, uint32 len)
{
	bool		written = false;

	PG_TRY();
	{
		int			n = FileWrite(cache_file, (char *) data, len, slot_offset(i),
								  PG_WAIT_EXTENSION);

		written = n == len;
		if (!written)
			warn_write_failed(n);
	}
	PG_CATCH();
	{
		end_fill(i, generation, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	end_fill(i, generation, written);
	return written;
}

/*
 * Caches window number of the object url, len bytes at data, read by the
 * current role, unless it is cached or no slot is free.
 */
void
ps_object_disk_cache_put(const char *url, uint64 number, const char *data,
						 uint32 len)
{
	DiskWindowKey key;
	pg_crc32c	crc;
	uint64		generation = 0;
	int			slot;

	Assert(disk_cache != NULL && len > 0 && len <= PS_OBJECT_WINDOW_BYTES);
	if (!open_cache_file())
		return;
	key = disk_window_key(url, number);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, data, len);
	FIN_CRC32C(crc);
	slot = take_slot(&key, GetUserId(), len, crc, &generation);
	if (slot >= 0 && fill_slot(slot, generation, data, len))
		pg_atomic_fetch_add_u64(&disk_cache->writes, 1);
}

/*
 * The cache's figures: its size in bytes, the windows it holds (or is
 * writing), and the windows found, not found, written and replaced since
 * the server started; all 0 if it is off.  Takes the cache's lock.
 */
void
ps_object_disk_cache_get_stats(PsDiskCacheStats *out)
{
	memset(out, 0, sizeof(PsDiskCacheStats));
	if (disk_cache == NULL)
		return;
	out->size = (uint64) slot_count() * PS_OBJECT_WINDOW_BYTES;
	LWLockAcquire(disk_cache->lock, LW_SHARED);
	out->windows = disk_cache->held;
	LWLockRelease(disk_cache->lock);
	out->hits = pg_atomic_read_u64(&disk_cache->hits);
	out->misses = pg_atomic_read_u64(&disk_cache->misses);
	out->writes = pg_atomic_read_u64(&disk_cache->writes);
	out->replaced = pg_atomic_read_u64(&disk_cache->replaced);
}
