/*-------------------------------------------------------------------------
 *
 * store_owner.c
 *	  Which database an object store's prefix belongs to: the owner marker.
 *
 * A database deletes the objects under its stores that none of its states
 * and garbage rows name (object_leaks.c), so a prefix shared by two
 * databases would have each delete the other's parts.  The marker object
 * <store>/persist_sink.owner names the one database (system identifier and
 * database oid) that writes and collects under a prefix: the first put of
 * a part under a store with no marker makes one (a conditional PUT, so of
 * two databases racing for a new prefix one wins), a put under another
 * database's store fails (55000) before anything is written, and the
 * collector leaves another database's store alone.  Any database may read
 * any store: several servers share a bucket, each under its own prefix.
 *
 * A process remembers the stores it found its own, so a marker is read
 * once per process and store.  A physical replica promoted to primary
 * keeps the system identifier of its primary, and so the ownership.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/memutils.h"

#include "base/settings.h"
#include "store/store.h"

/* Bytes of an owner marker: system identifier and database oid */
#define OWNER_BYTES		32

/* Stores this process found its database's (in TopMemoryContext) */
static List *owned_stores = NIL;

/* An owner marker as text: OWNER_BYTES and a terminating zero */
typedef char OwnerText[OWNER_BYTES + 1];

/* Where the marker of store is: its bucket and object name. */
typedef struct Marker
{
	char	   *bucket;
	char	   *name;
} Marker;

/* The marker of store (an s3:// URL, which must be valid). */
static Marker
marker_of(const char *store)
{
	Marker		m;
	char	   *prefix;

	if (!ps_s3_parse_url(store, &m.bucket, &prefix))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("blob store \"%s\" is not an object store's URL", store)));
	m.name = *prefix ? psprintf("%s/persist_sink.owner", prefix) : pstrdup("persist_sink.owner");
	return m;
}

/* Writes this database's marker text into mine. */
static void
this_owner(OwnerText mine)
{
	snprintf(mine, sizeof(OwnerText), "%020llu %010u\n",
			 (unsigned long long) GetSystemIdentifier(), MyDatabaseId);
}

/* Reads marker m into text; false if there is none. */
static bool
read_marker(const Marker *m, OwnerText text)
{
	bytea	   *found = ps_s3_get(m->bucket, m->name, 0, OWNER_BYTES,
								  CurrentMemoryContext);

	if (found == NULL)
		return false;
	memset(text, 0, sizeof(OwnerText));
	memcpy(text, VARDATA_ANY(found), Min(VARSIZE_ANY_EXHDR(found), OWNER_BYTES));
	pfree(found);
	return true;
}

/* True if store is in owned_stores. */
static bool
known_owned(const char *store)
{
	ListCell   *lc;

	foreach(lc, owned_stores)
		if (strcmp(lfirst(lc), store) == 0)
			return true;
	return false;
}

/* Adds store to owned_stores, unless it is there. */
static void
remember_owned(const char *store)
{
	MemoryContext old;

	if (known_owned(store))
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	owned_stores = lappend(owned_stores, pstrdup(store));
	MemoryContextSwitchTo(old);
}

/*
 * Reports that store belongs to the database its marker m (reading seen)
 * names: an error with raise, else a LOG line.
 */
static void
report_foreign(const char *store, const Marker *m, const OwnerText seen,
			   const OwnerText mine, bool raise)
{
	ereport(raise ? ERROR : LOG,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 raise ?
			 errmsg("object store %s belongs to another database", store) :
			 errmsg("persist_sink: objects under %s that no state names are not collected here: the store belongs to another database",
					store),
			 errdetail("Its marker %s names system %.20s, database %.10s; this is system %.20s, database %.10s.",
					   m->name, seen, seen + 21, mine, mine + 21),
			 raise ?
			 errhint("Give each database that writes shards its own prefix in persist_sink.blob_store.") : 0));
}

/*
 * True if store (an s3:// URL) belongs to this database: its marker names
 * it, or it had none and this process put one.  A store of another
 * database raises 55000 with raise, else is logged and false.  Errors of
 * the store itself are raised.
 */
bool
ps_store_claim(const char *store, bool raise)
{
	Marker		m;
	OwnerText	mine;
	OwnerText	seen;
	bool		found;

	if (known_owned(store))
		return true;
	m = marker_of(store);
	this_owner(mine);
	found = read_marker(&m, seen);
	/* none yet: put ours, unless one was put meanwhile (then read it) */
	if (!found && !ps_s3_put_if_absent(m.bucket, m.name, mine, OWNER_BYTES))
		found = read_marker(&m, seen);
	if (found && strcmp(seen, mine) != 0)
	{
		report_foreign(store, &m, seen, mine, raise);
		return false;
	}
	remember_owned(store);
	return true;
}

/*
 * The store a part's object key (<store>/<shard>/<32 hex digits>) is under,
 * palloc'd; NULL if the key has no such form.
 */
char *
ps_store_of_object_key(const char *key)
{
	const char *part = strrchr(key, '/');
	const char *shard;

	if (part == NULL || part == key)
		return NULL;
	for (shard = part - 1; shard > key && *shard != '/'; shard--)
		;
	if (shard <= key || shard[-1] == '/')
		return NULL;
	return pnstrdup(key, shard - key);
}

/*
 * Makes this database the owner of store (a valid s3:// URL), whoever owned
 * it before: its marker names this database from now on.  Returns what the
 * marker said before ("system <id>, database <oid>"), or NULL if it had
 * none.
 */
char *
ps_store_take(const char *store)
{
	Marker		m = marker_of(store);
	OwnerText	mine;
	OwnerText	seen;
	char	   *before = NULL;

	this_owner(mine);
	if (read_marker(&m, seen))
		before = psprintf("system %.20s, database %.10s", seen, seen + 21);
	ps_s3_put(m.bucket, m.name, mine, OWNER_BYTES);
	remember_owned(store);
	return before;
}
