/*-------------------------------------------------------------------------
 *
 * sql_objects.c
 *	  Which of the extension's SQL objects this database has: the one
 *	  place where the library tells older SQL objects from newer ones.
 *
 * A server loads one library for all its databases, and a database keeps
 * the SQL objects of the version it was created or last updated at until
 * ALTER EXTENSION persist_sink UPDATE: so the library serves the objects
 * of every version it ships an update script from.  Each storage table or
 * column that a version after 0.1 added, and that some code path needs, is
 * a PsSqlObject below with the version that added it; the code asks
 * ps_sql_objects_have() and takes the older path while the answer is no.
 * The answer is a catalog lookup through the syscache (cheap enough for
 * each use, and right at once after an update in the same session).
 *
 * Two kinds of older objects are told apart where they are used, by what
 * the call itself carries, and are listed here only so that this comment
 * names every older path:
 *	- functions whose result gained columns (shard_info() behind the shards
 *	  view: runs in 0.5, debt_batches in 0.4, blob_store in 0.13,
 *	  objects_owned in 0.16; stats()): the C function fills as many
 *	  columns as the result's tuple descriptor has, as pg_stat_statements
 *	  does for its API versions (sql/functions.c, sql/stats_view.c);
 *	- typed functions that were SECURITY DEFINER before 0.3: refused by
 *	  the function's own flag (ps_refuse_security_definer, sql/args.c).
 *
 * The rule for dropping an older path: it may go, with its PsSqlObject,
 * in the release that stops shipping the update scripts from every
 * version before the one that added the object (persist_sink--A--B.sql
 * for each such A), since no database can then hold the older objects
 * with this library; until then it stays, and sql/upgrade.sql goes
 * through it.
 *
 * Every function here may be called in any transaction; none needs SPI.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "utils/lsyscache.h"

#include "base/base.h"
#include "store/store.h"

/* Where each PsSqlObject is found, and the version that added it */
typedef struct SqlObjectProbe
{
	const char *table;
	const char *column;			/* NULL: the table itself */
	const char *version;
} SqlObjectProbe;

static const SqlObjectProbe probes[] = {
	[PS_OBJ_DIFF_LOG] = {"consensus_diff", NULL, "0.4"},
	[PS_OBJ_BLOB_CHUNKS] = {"blob", "chunk", "0.6"},
	[PS_OBJ_SHARD_ACL] = {"shard_acl", NULL, "0.9"},
	[PS_OBJ_READER] = {"reader", NULL, "0.10"},
	[PS_OBJ_GARBAGE] = {"garbage", NULL, "0.12"},
};

StaticAssertDecl(lengthof(probes) == PS_OBJ_COUNT,
				 "every PsSqlObject has a probe");

/* The oid of object's table in this database; InvalidOid if it has none. */
Oid
ps_sql_object_relid(PsSqlObject object)
{
	Oid			schema = get_namespace_oid(PS_SCHEMA, true);

	Assert(object >= 0 && object < PS_OBJ_COUNT);
	if (!OidIsValid(schema))
		return InvalidOid;
	return get_relname_relid(probes[object].table, schema);
}

/* True if this database's SQL objects have object (see the head comment). */
bool
ps_sql_objects_have(PsSqlObject object)
{
	Oid			relid = ps_sql_object_relid(object);

	if (!OidIsValid(relid))
		return false;
	return probes[object].column == NULL ||
		get_attnum(relid, probes[object].column) != InvalidAttrNumber;
}

/* The version of the extension that added object, for messages. */
const char *
ps_sql_object_version(PsSqlObject object)
{
	Assert(object >= 0 && object < PS_OBJ_COUNT);
	return probes[object].version;
}
