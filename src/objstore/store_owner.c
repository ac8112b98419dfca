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
 * once per process and store before a put.  A physical replica promoted
 * to primary keeps the system identifier of its primary, and so the
 * ownership.
 *
 * A database deletes no object it does not own.  A copy of a database
 * (CREATE DATABASE ... TEMPLATE, a dump restored elsewhere, another server
 * on the same bucket, or pg_upgrade's new system identifier) has states
 * naming the original's objects: it may read them, but every path that
 * deletes an object (ps_blob_delete: the collectors of garbage and of
 * leaked objects, a failed append's or merge's cleanup) first asks
 * ps_store_owner whether the object's store is this database's, reading
 * the marker again in each transaction (take_object_store() may have
 * handed the store over since), and leaves the object where it is if it
 * is not, or if the store has no marker at all.
 *
 * Locks: none; the per-transaction answers live in a context of their own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/memutils.h"

#include "base/settings.h"
#include "objstore/objstore.h"

/* Bytes of an owner marker: system identifier and database oid */
#define OWNER_BYTES		32

/* Stores this process found its database's (in TopMemoryContext) */
static List *owned_stores = NIL;

/* An owner marker as text: OWNER_BYTES and a terminating zero */
typedef char OwnerText[OWNER_BYTES + 1];

/* What ps_store_owner found of one store in this transaction */
typedef struct OwnerAnswer
{
	char	   *store;
	PsStoreOwner owner;
	char	   *other;			/* the other database, for PS_STORE_OTHERS */
} OwnerAnswer;

/* The answers of this transaction (lxid owner_lxid), in owner_cxt */
static MemoryContext owner_cxt = NULL;
static LocalTransactionId owner_lxid = InvalidLocalTransactionId;
static List *owner_answers = NIL;

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
 * Raises 55000: store belongs to the database its marker m (reading seen)
 * names, not to this one (mine).
 */
static void
raise_foreign(const char *store, const Marker *m, const OwnerText seen,
			  const OwnerText mine)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("object store %s belongs to another database", store),
			 errdetail("Its marker %s names system %.20s, database %.10s; this is system %.20s, database %.10s.",
					   m->name, seen, seen + 21, mine, mine + 21),
			 errhint("Give each database that writes shards its own prefix in persist_sink.blob_store.  A shard whose parts a copy of a database inherited stays under the original's store: the copy reads it, but appends that need an object and merges of it fail there.")));
}

/*
 * Makes sure store (an s3:// URL) belongs to this database before a put
 * under it: its marker names it, or it had none and this process put one.
 * A store of another database raises 55000; errors of the store itself
 * are raised too.
 */
void
ps_store_claim(const char *store)
{
	Marker		m;
	OwnerText	mine;
	OwnerText	seen;
	bool		found;

	if (known_owned(store))
		return;
	m = marker_of(store);
	this_owner(mine);
	found = read_marker(&m, seen);
	/* none yet: put ours, unless one was put meanwhile (then read it) */
	if (!found && !ps_s3_put_if_absent(m.bucket, m.name, mine, OWNER_BYTES))
		found = read_marker(&m, seen);
	if (found && strcmp(seen, mine) != 0)
		raise_foreign(store, &m, seen, mine);
	remember_owned(store);
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

/* Forgets the answers ps_store_owner gave before this transaction (or all). */
static void
forget_answers(bool all)
{
	if (owner_cxt == NULL)
		owner_cxt = AllocSetContextCreate(TopMemoryContext,
										  "persist_sink store owners",
										  ALLOCSET_SMALL_SIZES);
	if (!all && owner_lxid == MyProc->lxid)
		return;
	MemoryContextReset(owner_cxt);
	owner_answers = NIL;
	owner_lxid = MyProc->lxid;
}

/* Reads the marker of store now and says whose it is (*other for another's). */
static PsStoreOwner
ask_owner(const char *store, char **other)
{
	Marker		m = marker_of(store);
	OwnerText	mine;
	OwnerText	seen;

	this_owner(mine);
	*other = NULL;
	if (!read_marker(&m, seen))
		return PS_STORE_UNMARKED;
	if (strcmp(seen, mine) == 0)
		return PS_STORE_OURS;
	*other = psprintf("system %.20s, database %.10s", seen, seen + 21);
	return PS_STORE_OTHERS;
}

/*
 * Whose store (an s3:// URL) is by its marker, read once per transaction:
 * this database's, another's (*other, if not NULL, set to "system <id>,
 * database <oid>"), or nobody's yet.  Errors of the store are raised.
 */
PsStoreOwner
ps_store_owner(const char *store, char **other)
{
	OwnerAnswer *a = NULL;
	ListCell   *lc;

	forget_answers(false);
	foreach(lc, owner_answers)
		if (strcmp(((OwnerAnswer *) lfirst(lc))->store, store) == 0)
			a = lfirst(lc);
	if (a == NULL)
	{
		char	   *found;
		PsStoreOwner owner = ask_owner(store, &found);
		MemoryContext old = MemoryContextSwitchTo(owner_cxt);

		a = palloc(sizeof(OwnerAnswer));
		a->store = pstrdup(store);
		a->owner = owner;
		a->other = found ? pstrdup(found) : NULL;
		owner_answers = lappend(owner_answers, a);
		MemoryContextSwitchTo(old);
	}
	if (other)
		*other = a->other ? pstrdup(a->other) : NULL;
	return a->owner;
}

/*
 * True if the objects of the key (an object's URL) may be deleted by this
 * database: its store's marker names it (ps_store_owner).
 */
bool
ps_store_may_delete(const char *key)
{
	char	   *store = ps_store_of_object_key(key);

	return store != NULL && ps_store_owner(store, NULL) == PS_STORE_OURS;
}

/*
 * True if the collector of leaked objects may list and delete under store:
 * it is this database's.  Another database's store is left, with a LOG line
 * saying so; one with no marker yet (nothing was put under it) is left too.
 */
bool
ps_store_collected_here(const char *store)
{
	char	   *other;

	switch (ps_store_owner(store, &other))
	{
		case PS_STORE_OURS:
			return true;
		case PS_STORE_OTHERS:
			ereport(LOG,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("persist_sink: objects under %s that no state names are not collected here: the store belongs to another database",
							store),
					 errdetail("Its owner marker names %s.", other)));
			return false;
		case PS_STORE_UNMARKED:
			break;
	}
	return false;
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
	forget_answers(true);
	return before;
}
