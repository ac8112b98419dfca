/*-------------------------------------------------------------------------
 *
 * shard_acl.c
 *	  The shard_acl table: each shard's owner and the privileges granted
 *	  on it, as an aclitem[] (a: append, r: read).
 *
 * A shard without a row (made before version 0.9, restored from an older
 * dump, or replicated from a publisher that does not publish shard_acl)
 * has the privileges every shard had before: owned by the storage owner,
 * append granted to persist_sink_writer and read to persist_sink_reader.
 * So do all shards while the extension's SQL objects are older than 0.9
 * and the table does not exist yet.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "base/base.h"
#include "store/store.h"

/* Adds the grant of privs on a shard owned by owner to role, if it exists. */
static Acl *
add_grant(Acl *acl, const char *role, AclMode privs, Oid owner)
{
	Oid			grantee = get_role_oid(role, true);
	AclItem		item;

	if (!OidIsValid(grantee))
		return acl;
	item.ai_grantee = grantee;
	item.ai_grantor = owner;
	ACLITEM_SET_PRIVS_GOPTIONS(item, privs, ACL_NO_RIGHTS);
	return aclupdate(acl, &item, ACL_MODECHG_ADD, owner, DROP_RESTRICT);
}

/* Fills out with the privileges of a shard that has no shard_acl row. */
static void
legacy_acl(PsShardAcl *out)
{
	out->owner = ps_storage_owner();
	out->acl = make_empty_acl();
	out->acl = add_grant(out->acl, "persist_sink_writer", ACL_INSERT, out->owner);
	out->acl = add_grant(out->acl, "persist_sink_reader", ACL_SELECT, out->owner);
}

/*
 * Copies an acl read from the table into dest: an empty array given as
 * '{}' (a restored dump) has no dimension, which the ACL functions refuse.
 */
static Acl *
copy_acl(Datum d, MemoryContext dest)
{
	Acl		   *acl = DatumGetAclP(d);
	MemoryContext old = MemoryContextSwitchTo(dest);
	Acl		   *copy = ARR_NDIM(acl) == 0 ? make_empty_acl() : aclcopy(acl);

	MemoryContextSwitchTo(old);
	return copy;
}

/* True if the shard has a consensus row (the table shard_acl missing). */
static bool
shard_exists(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(shard)};

	ps_spi_run(&plan,
			   "SELECT 1 FROM persist_sink.consensus WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
	return SPI_processed > 0;
}

/* Fills out from the first row of the last query (owner, acl), or the default. */
static void
acl_from_row(PsShardAcl *out, MemoryContext dest)
{
	bool		null_owner;
	bool		null_acl;
	Datum		owner = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  1, &null_owner);
	Datum		acl = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									2, &null_acl);

	if (null_owner || null_acl)
	{
		MemoryContext old = MemoryContextSwitchTo(dest);

		legacy_acl(out);
		MemoryContextSwitchTo(old);
		return;
	}
	out->owner = DatumGetObjectId(owner);
	out->acl = copy_acl(acl, dest);
}

/*
 * Reads a shard's owner and privileges into out (the acl allocated in
 * dest), seeing what the current transaction did so far (a shard created
 * earlier in the same statement, say); false if the shard does not exist.
 * With for_update, locks its row, recording the default privileges of a
 * shard without one first.  Caller is connected to SPI.
 */
bool
ps_shard_acl_read(const char *shard, PsShardAcl *out, MemoryContext dest,
				  bool for_update)
{
	static SPIPlanPtr read_plan = NULL;
	static SPIPlanPtr lock_plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(shard)};

	if (!ps_sql_objects_have(PS_OBJ_SHARD_ACL))
	{
		MemoryContext old;

		if (!shard_exists(shard))
			return false;
		old = MemoryContextSwitchTo(dest);
		legacy_acl(out);
		MemoryContextSwitchTo(old);
		return true;
	}
	if (!for_update)
		ps_spi_run(&read_plan,
				   "SELECT a.owner, a.acl FROM persist_sink.consensus c"
				   " LEFT JOIN persist_sink.shard_acl a ON a.shard OPERATOR(pg_catalog.=) c.shard"
				   " WHERE c.shard OPERATOR(pg_catalog.=) $1",
				   1, types, values, false);
	else
	{
		PsShardAcl	legacy;

		/* a shard without a row gets one, which the grant then changes */
		if (!shard_exists(shard))
			return false;
		legacy_acl(&legacy);
		ps_shard_acl_put(shard, &legacy, false);
		ps_spi_run(&lock_plan,
				   "SELECT owner, acl FROM persist_sink.shard_acl"
				   " WHERE shard OPERATOR(pg_catalog.=) $1 FOR UPDATE",
				   1, types, values, false);
	}
	if (SPI_processed == 0)
		return false;
	acl_from_row(out, dest);
	return true;
}

/*
 * Writes a shard's owner and privileges: replaces its row if replace is
 * true, else inserts one only where none exists.  Caller is connected to
 * SPI; the table must exist.
 */
void
ps_shard_acl_put(const char *shard, const PsShardAcl *acl, bool replace)
{
	static SPIPlanPtr replace_plan = NULL;
	static SPIPlanPtr keep_plan = NULL;
	Oid			types[3] = {TEXTOID, REGROLEOID, ACLITEMARRAYOID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(shard);
	values[1] = ObjectIdGetDatum(acl->owner);
	values[2] = PointerGetDatum(acl->acl);
	if (replace)
		ps_spi_run(&replace_plan,
				   "INSERT INTO persist_sink.shard_acl (shard, owner, acl) VALUES ($1, $2, $3)"
				   " ON CONFLICT (shard) DO UPDATE SET owner = EXCLUDED.owner, acl = EXCLUDED.acl",
				   3, types, values, false);
	else
		ps_spi_run(&keep_plan,
				   "INSERT INTO persist_sink.shard_acl (shard, owner, acl) VALUES ($1, $2, $3)"
				   " ON CONFLICT (shard) DO NOTHING",
				   3, types, values, false);
}

/* Deletes a shard's row, if the table exists.  Caller is connected to SPI. */
void
ps_shard_acl_delete(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(shard)};

	if (!ps_sql_objects_have(PS_OBJ_SHARD_ACL))
		return;
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.shard_acl WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}

/*
 * Locks a shard's row to the end of the transaction, FOR SHARE or (if
 * exclusive) FOR NO KEY UPDATE, waiting for a transaction that holds it
 * in a conflicting mode; a shard without a row gets its default one
 * first.  A row lock takes no room in the lock table, however many shards
 * one transaction locks.  False if the table or the shard does not exist.
 * Caller is connected to SPI.
 */
bool
ps_shard_acl_lock(const char *shard, bool exclusive)
{
	static SPIPlanPtr share_plan = NULL;
	static SPIPlanPtr exclusive_plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(shard)};
	PsShardAcl	legacy;

	if (!ps_sql_objects_have(PS_OBJ_SHARD_ACL) || !shard_exists(shard))
		return false;
	legacy_acl(&legacy);
	ps_shard_acl_put(shard, &legacy, false);
	if (exclusive)
		ps_spi_run(&exclusive_plan,
				   "SELECT 1 FROM persist_sink.shard_acl"
				   " WHERE shard OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
				   1, types, values, false);
	else
		ps_spi_run(&share_plan,
				   "SELECT 1 FROM persist_sink.shard_acl"
				   " WHERE shard OPERATOR(pg_catalog.=) $1 FOR SHARE",
				   1, types, values, false);
	return SPI_processed > 0;
}
