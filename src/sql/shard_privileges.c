/*-------------------------------------------------------------------------
 *
 * shard_privileges.c
 *	  Owners and grants of shards: the checks every function makes before
 *	  it touches a shard, and grant_shard() and revoke_shard().
 *
 * The role that creates a shard owns it; its owner, or a member of that
 * role, may drop it, move its since, grant or revoke the append and read
 * privileges on it (kept as an aclitem[]: a for append, r for read), and
 * give it to another role it is a member of.
 * Membership in persist_sink_writer or persist_sink_reader stays the first
 * gate of every function; the shard's privileges are the second.
 *
 * Each backend keeps the privileges of the shards it used in a small
 * cache, emptied by a relcache invalidation of the shard_acl table: every
 * change to that table sends one, at commit, and a backend takes in those
 * sent so far when each transaction starts, so it sees a grant or revoke
 * committed before its transaction began.  The cache is refilled only from
 * a read whose snapshot is newer than every invalidation taken in so far:
 * a REPEATABLE READ transaction whose snapshot predates a revoke still
 * reads the old privileges (as its snapshot says), but does not keep them
 * for the transactions after it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "sql/sql.h"
#include "store/store.h"

PG_FUNCTION_INFO_V1(ps_grant_shard);
PG_FUNCTION_INFO_V1(ps_revoke_shard);
PG_FUNCTION_INFO_V1(ps_alter_shard_owner);

/* Shards whose privileges a backend keeps before it reads them again */
#define ACCESS_CACHE_MAX 1024

/* One shard's privileges as this backend last read them */
typedef struct AccessEntry
{
	char		shard[PS_MAX_SHARD_NAME + 1];	/* hash key */
	PsShardAcl	acl;
} AccessEntry;

static MemoryContext access_cxt = NULL;
static HTAB *access_cache = NULL;
static Oid	access_relid = InvalidOid;	/* shard_acl when last read */

/* Invalidations of the cache this backend has taken in */
static uint64 access_generation = 0;

/*
 * The local transaction whose transaction snapshot is older than an
 * invalidation taken in since it was taken: what it reads of shard_acl
 * may be stale, so it caches nothing.
 */
static LocalTransactionId access_stale_lxid = InvalidLocalTransactionId;

/* Forgets every cached shard's privileges. */
static void
forget_access(void)
{
	MemoryContextReset(access_cxt);
	access_cache = NULL;
}

/* Marks the transaction's snapshot, if taken, as possibly stale (no lock). */
static void
mark_snapshot_stale(void)
{
	if (FirstSnapshotSet && IsolationUsesXactSnapshot())
		access_stale_lxid = MyProc->lxid;
}

/*
 * Relcache callback: a change to shard_acl (or a reset, or any change
 * before this backend knows shard_acl's oid) empties the cache, and marks
 * a transaction snapshot already taken as older than it.
 */
static void
access_invalidated(Datum arg, Oid relid)
{
	if (relid != InvalidOid && OidIsValid(access_relid) && relid != access_relid)
		return;
	access_generation++;
	mark_snapshot_stale();
	forget_access();
}

/*
 * True if a read of shard_acl made now may see less than the invalidations
 * taken in so far say: its transaction snapshot predates one of them.
 */
static bool
access_snapshot_stale(void)
{
	return IsolationUsesXactSnapshot() && FirstSnapshotSet &&
		access_stale_lxid == MyProc->lxid;
}

/* Sends the invalidation that makes every backend read privileges again. */
static void
invalidate_access(void)
{
	Oid			relid = ps_sql_object_relid(PS_OBJ_SHARD_ACL);

	if (OidIsValid(relid))
		CacheInvalidateRelcacheByRelid(relid);
	if (access_cxt != NULL)
		forget_access();
}

/* The cache of shard privileges, made on first use. */
static HTAB *
access_hash(void)
{
	HASHCTL		ctl;

	if (access_cxt == NULL)
	{
		access_cxt = AllocSetContextCreate(CacheMemoryContext,
										   "persist_sink shard privileges",
										   ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(access_invalidated, (Datum) 0);
		/* the invalidations taken in before now went unseen */
		mark_snapshot_stale();
	}
	if (access_cache != NULL && hash_get_num_entries(access_cache) >= ACCESS_CACHE_MAX)
		forget_access();
	if (access_cache == NULL)
	{
		ctl.keysize = PS_MAX_SHARD_NAME + 1;
		ctl.entrysize = sizeof(AccessEntry);
		ctl.hcxt = access_cxt;
		access_cache = hash_create("persist_sink shard privileges", 64, &ctl,
								   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	return access_cache;
}

/* Raises 42704 for a shard that does not exist. */
static void
raise_unknown_shard(const char *shard, PsShardRight right)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("shard \"%s\" does not exist", shard),
			 right == PS_SHARD_APPEND ?
			 errdetail("Nothing of this append to shard \"%s\" was written.", shard) : 0));
}

/*
 * Fills out with a shard's privileges (the acl allocated in the current
 * memory context, since the checks that follow may take in invalidations
 * that empty the cache), from the cache or read as the current transaction
 * sees them; if the shard does not exist, raises 42704 (missing_ok false)
 * or returns false.  What was read is kept only if the read's snapshot is
 * newer than every invalidation taken in before or during it (a READ
 * COMMITTED read takes a new one; a REPEATABLE READ transaction's may be
 * older).  The read takes AccessShareLock on the storage tables.
 */
static bool
shard_access(const char *shard, PsShardRight right, PsShardAcl *out,
			 bool missing_ok)
{
	MemoryContext cxt = CurrentMemoryContext;
	AccessEntry *entry;
	bool		found;
	uint64		generation;

	entry = hash_search(access_hash(), shard, HASH_FIND, NULL);
	if (entry != NULL)
	{
		out->owner = entry->acl.owner;
		out->acl = aclcopy(entry->acl.acl);
		return true;
	}
	/* take in what was sent so far first, so that the read can be kept */
	access_relid = ps_sql_object_relid(PS_OBJ_SHARD_ACL);
	AcceptInvalidationMessages();
	generation = access_generation;
	SPI_connect();
	found = ps_shard_acl_read(shard, out, cxt, false);
	SPI_finish();
	if (!found && missing_ok)
		return false;
	if (!found)
		raise_unknown_shard(shard, right);
	/* the read may have taken in invalidations its snapshot predates */
	if (generation != access_generation || access_snapshot_stale())
		return true;
	entry = hash_search(access_hash(), shard, HASH_ENTER, NULL);
	entry->acl.owner = out->owner;
	entry->acl.acl = (Acl *) MemoryContextAlloc(access_cxt, VARSIZE(out->acl));
	memcpy(entry->acl.acl, out->acl, VARSIZE(out->acl));
	return true;
}

/* The name of a role, or its oid if it was dropped. */
const char *
ps_role_name(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name != NULL ? name : psprintf("%u", role);
}

/* Raises 42501 for a caller who lacks right on a shard owned by owner. */
static void
raise_denied(const char *shard, PsShardRight right, Oid owner,
			 const char *function)
{
	const char *owner_name = ps_role_name(owner);

	if (right == PS_SHARD_OWNER)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for shard \"%s\"", shard),
				 errdetail("Only the shard's owner (%s) or a member of that role may call %s() on it.",
						   owner_name, function)));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for shard \"%s\"", shard),
			 right == PS_SHARD_APPEND ?
			 errdetail("%s() needs the append privilege on it.  Nothing of this append to shard \"%s\" was written.",
					   function, shard) :
			 right == PS_SHARD_MAINTAIN ?
			 errdetail("%s() needs the append privilege on it.", function) :
			 right == PS_SHARD_READ ?
			 errdetail("%s() needs the read privilege on it.", function) :
			 errdetail("%s() needs the append or the read privilege on it.", function),
			 errhint("Its owner, %s, may grant it with grant_shard('%s', role, '%s').",
					 owner_name, shard, right == PS_SHARD_READ || right == PS_SHARD_USE ? "read" : "append")));
}

/*
 * True if the current user has right on a shard of these privileges: the
 * privileges of its owner, or (but for PS_SHARD_OWNER) a grant of the
 * privilege to it, to a role it has the privileges of, or to PUBLIC.
 */
static bool
acl_allows(const PsShardAcl *acl, PsShardRight right)
{
	Oid			user = GetUserId();
	AclMode		mask;

	if (has_privs_of_role(user, acl->owner))
		return true;
	mask = right == PS_SHARD_APPEND || right == PS_SHARD_MAINTAIN ? ACL_INSERT :
		right == PS_SHARD_READ ? ACL_SELECT :
		right == PS_SHARD_USE ? (ACL_INSERT | ACL_SELECT) : 0;
	return mask != 0 && aclmask(acl->acl, user, acl->owner, mask, ACLMASK_ANY) != 0;
}

/*
 * Raises 42704 unless the shard exists and 42501 unless the current user
 * has right on it (acl_allows).  function names the caller in the errors.
 */
void
ps_require_shard_right(const char *shard, PsShardRight right,
					   const char *function)
{
	PsShardAcl	acl;

	shard_access(shard, right, &acl, false);
	if (!acl_allows(&acl, right))
		raise_denied(shard, right, acl.owner, function);
}

/*
 * True if the shard exists and the current user has right on it, as
 * ps_require_shard_right checks it, without raising either error (what
 * lists shards a user may see, and plans made before the check).
 */
bool
ps_has_shard_right(const char *shard, PsShardRight right)
{
	PsShardAcl	acl;

	return shard_access(shard, right, &acl, true) && acl_allows(&acl, right);
}

/*
 * True if the current user has the privileges of the shard's owner;
 * raises 42704 if the shard does not exist.
 */
bool
ps_shard_owned_by_user(const char *shard)
{
	PsShardAcl	acl;

	shard_access(shard, PS_SHARD_OWNER, &acl, false);
	return has_privs_of_role(GetUserId(), acl.owner);
}

/*
 * Records the current user as the owner of a shard it created, with no
 * grant.  Caller is connected to SPI, in the transaction that created it.
 */
void
ps_shard_owner_set(const char *shard)
{
	PsShardAcl	acl;

	if (!ps_sql_objects_have(PS_OBJ_SHARD_ACL))
		return;					/* objects older than 0.9: legacy privileges */
	acl.owner = GetUserId();
	acl.acl = make_empty_acl();
	ps_shard_acl_put(shard, &acl, true);
	invalidate_access();
}

/* Forgets a dropped shard's privileges.  Caller is connected to SPI. */
void
ps_shard_owner_forget(const char *shard)
{
	ps_shard_acl_delete(shard);
	invalidate_access();
}

/* A text argument that must not be NULL, as a C string. */
static char *
text_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	ps_require_arg(fcinfo, argno, argname);
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * The grantee argument: PUBLIC for "public" in lower case, as GRANT reads
 * it (no role may take that name); any other string is the name of a role
 * exactly as written, so "Public" is the role of that name (42704 if none).
 */
static Oid
grantee_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *role = text_arg(fcinfo, argno, "role");

	if (strcmp(role, "public") == 0)
		return ACL_ID_PUBLIC;
	return get_role_oid(role, false);
}

/* The privilege argument: append, read or all. */
static AclMode
privilege_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *privilege = text_arg(fcinfo, argno, "privilege");

	if (pg_strcasecmp(privilege, "append") == 0)
		return ACL_INSERT;
	if (pg_strcasecmp(privilege, "read") == 0)
		return ACL_SELECT;
	if (pg_strcasecmp(privilege, "all") == 0)
		return ACL_INSERT | ACL_SELECT;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized shard privilege \"%s\"", privilege),
			 errhint("A shard's privileges are append, read and all.")));
}

/*
 * Reads a shard's owner and privileges into acl with its row locked, for
 * function to change them: only its owner or a member of that role may.
 * Caller is connected to SPI.
 */
static void
lock_owned(const char *shard, PsShardAcl *acl, const char *function)
{
	ps_require_writable(shard);
	if (!ps_sql_objects_have(PS_OBJ_SHARD_ACL))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s() needs version %s of the persist_sink extension", function,
						ps_sql_object_version(PS_OBJ_SHARD_ACL)),
				 errhint("Run ALTER EXTENSION persist_sink UPDATE.")));
	if (!ps_shard_acl_read(shard, acl, CurrentMemoryContext, true))
		raise_unknown_shard(shard, PS_SHARD_OWNER);
	if (!has_privs_of_role(GetUserId(), acl->owner))
		raise_denied(shard, PS_SHARD_OWNER, acl->owner, function);
}

/*
 * Adds (modechg ACL_MODECHG_ADD) or removes (ACL_MODECHG_DEL) a grant on a
 * shard, with the shard's row locked; only its owner or a member of that
 * role may.
 */
static void
change_grant(FunctionCallInfo fcinfo, int modechg, const char *function)
{
	char	   *shard;
	PsShardAcl	acl;
	AclItem		item;

	PS_ANY_ROLE(function);
	shard = ps_shard_arg(fcinfo, 0);
	item.ai_grantee = grantee_arg(fcinfo, 1);
	ACLITEM_SET_PRIVS_GOPTIONS(item, privilege_arg(fcinfo, 2), ACL_NO_RIGHTS);
	SPI_connect();
	lock_owned(shard, &acl, function);
	item.ai_grantor = acl.owner;
	acl.acl = aclupdate(acl.acl, &item, modechg, acl.owner, DROP_RESTRICT);
	ps_shard_acl_put(shard, &acl, true);
	SPI_finish();
	invalidate_access();
}

/*
 * alter_shard_owner(shard text, new_owner text) returns void: gives a
 * shard to another role, its grants with it (as ALTER TABLE ... OWNER TO:
 * the caller must have the privileges of the owner and of the new owner).
 */
Datum
ps_alter_shard_owner(PG_FUNCTION_ARGS)
{
	char	   *shard;
	char	   *role;
	Oid			new_owner;
	PsShardAcl	acl;

	PS_ANY_ROLE("alter_shard_owner");
	shard = ps_shard_arg(fcinfo, 0);
	role = text_arg(fcinfo, 1, "new_owner");
	new_owner = get_role_oid(role, false);
	SPI_connect();
	lock_owned(shard, &acl, "alter_shard_owner");
	if (!has_privs_of_role(GetUserId(), new_owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to give shard \"%s\" to role \"%s\"", shard, role),
				 errdetail("Only a member of the new owner's role may.")));
	acl.acl = aclnewowner(acl.acl, acl.owner, new_owner);
	acl.owner = new_owner;
	ps_shard_acl_put(shard, &acl, true);
	SPI_finish();
	invalidate_access();
	PG_RETURN_VOID();
}

/* grant_shard(shard text, role text, privilege text) returns void */
Datum
ps_grant_shard(PG_FUNCTION_ARGS)
{
	change_grant(fcinfo, ACL_MODECHG_ADD, "grant_shard");
	PG_RETURN_VOID();
}

/* revoke_shard(shard text, role text, privilege text) returns void */
Datum
ps_revoke_shard(PG_FUNCTION_ARGS)
{
	change_grant(fcinfo, ACL_MODECHG_DEL, "revoke_shard");
	PG_RETURN_VOID();
}
