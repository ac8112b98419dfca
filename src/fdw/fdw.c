/*-------------------------------------------------------------------------
 *
 * fdw.c
 *	  The foreign data wrapper persist_sink: its handler and the validator
 *	  of its options.
 *
 * Options: a foreign table names its shard (shard, required) and may be
 * read as of a time of its own (as_of, a bigint); the server and the
 * wrapper take none.  The scan and the writes are in fdw_scan.c and
 * fdw_modify.c, IMPORT FOREIGN SCHEMA in fdw_import.c, ANALYZE and the
 * planner's size of a table in fdw_analyze.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_table.h"
#include "commands/defrem.h"
#include "foreign/fdwapi.h"
#include "utils/builtins.h"

#include "fdw/fdw.h"
#include "sql/sql.h"

PG_FUNCTION_INFO_V1(ps_fdw_handler);
PG_FUNCTION_INFO_V1(ps_fdw_validator);

/* The wrapper's routines. */
Datum
ps_fdw_handler(PG_FUNCTION_ARGS)
{
	FdwRoutine *routine = makeNode(FdwRoutine);

	ps_fdw_scan_routine(routine);
	ps_fdw_modify_routine(routine);
	ps_fdw_analyze_routine(routine);
	ps_fdw_import_routine(routine);
	PG_RETURN_POINTER(routine);
}

/* Raises HV00D: option name is not one an object of catalog takes. */
static void
raise_unknown_option(const char *name, Oid catalog)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
			 errmsg("invalid option \"%s\"", name),
			 catalog == ForeignTableRelationId ?
			 errhint("A foreign table of persist_sink takes the options shard and as_of.") :
			 errhint("Only a foreign table of persist_sink takes options (shard and as_of).")));
}

/*
 * Checks the options of a wrapper, server, user mapping or foreign table
 * of persist_sink: a table's shard must be a valid shard name, its as_of a
 * bigint; nothing else takes options.
 */
Datum
ps_fdw_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			catalog = PG_GETARG_OID(1);
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (catalog != ForeignTableRelationId)
			raise_unknown_option(def->defname, catalog);
		if (strcmp(def->defname, "shard") == 0)
			ps_check_shard_name(defGetString(def));
		else if (strcmp(def->defname, "as_of") == 0)
			(void) pg_strtoint64(defGetString(def));
		else
			raise_unknown_option(def->defname, catalog);
	}
	PG_RETURN_VOID();
}
