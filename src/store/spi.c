/*-------------------------------------------------------------------------
 *
 * spi.c
 *	  Saved SPI plans over the storage tables, run with the storage
 *	  owner's rights.
 *
 * The SQL functions run as their caller.  Only here, around the execution
 * of our own statements on the blob and consensus tables, does a call take
 * the rights of the role that owns those tables, as a security-restricted
 * operation with search_path set to pg_catalog, pg_temp: nothing a user can
 * define (type I/O, domain checks, operators, casts) ever runs with those
 * rights, since our statements name only built-in types and operators and
 * the storage tables, all schema-qualified.  An error on the way out is
 * cleaned up by the (sub)transaction's abort, which restores the user id
 * and the settings.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "base/base.h"
#include "store/store.h"

/*
 * The outermost (sub)transaction nesting level of the current transaction
 * whose writes to the storage tables survive so far; 0 if none does.
 */
static int	wrote_storage_level = 0;

/*
 * Refuses to prepare a transaction that has written to the storage tables:
 * prepared, it would hold its rows (a shard's state row, a new shard's
 * key) across restarts, and every append, compaction or creation that
 * needs them would wait until someone ends it.  Forgets the writes when
 * the transaction ends.
 */
static void
storage_xact_callback(XactEvent event, void *arg)
{
	if (wrote_storage_level == 0)
		return;
	if (event == XACT_EVENT_PRE_PREPARE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has written to a persist_sink shard"),
				 errdetail("persist_sink's writes (compare_and_append, create_shard, drop_shard, downgrade_since, compact) take effect only in a transaction that commits directly: prepared, it would hold the shard's rows, across restarts, from every other writer.")));
	if (event != XACT_EVENT_PRE_COMMIT && event != XACT_EVENT_PARALLEL_PRE_COMMIT)
		wrote_storage_level = 0;
}

/*
 * Keeps wrote_storage_level as subtransactions end: a committed one's
 * writes pass to its parent, an aborted one's are gone.
 */
static void
storage_subxact_callback(SubXactEvent event, SubTransactionId sub,
						 SubTransactionId parent, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (wrote_storage_level < level)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		wrote_storage_level = level - 1;
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		wrote_storage_level = 0;
}

/* Notes a statement that wrote (or locked) rows of the storage tables. */
static void
note_storage_write(int rc)
{
	static bool registered = false;
	int			level = GetCurrentTransactionNestLevel();

	if (rc != SPI_OK_INSERT && rc != SPI_OK_UPDATE && rc != SPI_OK_DELETE &&
		rc != SPI_OK_INSERT_RETURNING && rc != SPI_OK_UPDATE_RETURNING &&
		rc != SPI_OK_DELETE_RETURNING)
		return;
	if (SPI_processed == 0)
		return;					/* no row written, none locked */
	if (!registered)
	{
		RegisterXactCallback(storage_xact_callback, NULL);
		RegisterSubXactCallback(storage_subxact_callback, NULL);
		registered = true;
	}
	if (wrote_storage_level == 0 || level < wrote_storage_level)
		wrote_storage_level = level;
}

/* The role that owns the storage tables (and so may use them). */
Oid
ps_storage_owner(void)
{
	Oid			schema = get_namespace_oid(PS_SCHEMA, false);
	Oid			relid = get_relname_relid("consensus", schema);
	HeapTuple	tuple;
	Oid			owner;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("persist_sink storage table \"%s.consensus\" does not exist",
						PS_SCHEMA)));
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * Runs a saved plan, preparing and keeping it on first use, as the storage
 * owner with a fixed search_path; returns the SPI code.  Caller is
 * connected to SPI.  The caller's memory context is current again on
 * return (SPI itself would leave its procedure context current), so what
 * the caller allocates next lives where it meant it to.
 *
 * Every statement on the storage tables finds its rows through an index:
 * its plan is generic, made once and kept for the life of the process (a
 * custom plan per call would cost more than most of these statements),
 * and sequential scans are off while it is planned and run, since a plan
 * made while a table was empty would otherwise scan it whole when it holds
 * 100,000 shards or keys.
 */
int
ps_spi_run(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
		   Datum *values, bool read_only)
{
	return ps_spi_run_nulls(plan, sql, nargs, argtypes, values, NULL, read_only);
}

/* ps_spi_run with some arguments NULL (nulls as in SPI_execute_plan). */
int
ps_spi_run_nulls(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
				 Datum *values, const char *nulls, bool read_only)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	int			rc;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(ps_storage_owner(),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	(void) set_config_option("enable_seqscan", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(sql, nargs, argtypes,
										   CURSOR_OPT_GENERIC_PLAN);

		if (p == NULL)
			elog(ERROR, "persist_sink: SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		*plan = p;
	}
	rc = SPI_execute_plan(*plan, values, nulls, read_only, 0);
	if (rc < 0)
		elog(ERROR, "persist_sink: SPI failed for \"%s\": %s",
			 sql, SPI_result_code_string(rc));
	note_storage_write(rc);
	AtEOXact_GUC(true, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	MemoryContextSwitchTo(cxt);
	return rc;
}
