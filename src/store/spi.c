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
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "base/base.h"
#include "store/store.h"

/* The role that owns the storage tables (and so may use them). */
static Oid
storage_owner(void)
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
 * connected to SPI.
 */
int
ps_spi_run(SPIPlanPtr *plan, const char *sql, int nargs, Oid *argtypes,
		   Datum *values, bool read_only)
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	int			rc;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(storage_owner(),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare(sql, nargs, argtypes);

		if (p == NULL)
			elog(ERROR, "persist_sink: SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(p);
		*plan = p;
	}
	rc = SPI_execute_plan(*plan, values, NULL, read_only, 0);
	if (rc < 0)
		elog(ERROR, "persist_sink: SPI failed for \"%s\": %s",
			 sql, SPI_result_code_string(rc));
	AtEOXact_GUC(true, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	return rc;
}
