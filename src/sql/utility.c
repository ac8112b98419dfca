/*-------------------------------------------------------------------------
 *
 * utility.c
 *	  Utility statements that concern the workers: the workers of a
 *	  database other than persist_sink.database, when their database or
 *	  the extension in it is dropped.
 *
 * Such a database's sink worker and compactor are started on demand and
 * stay connected to it until they have been idle for
 * persist_sink.worker_idle_timeout.  DROP DATABASE, ALTER DATABASE ...
 * RENAME or SET TABLESPACE, and CREATE DATABASE ... TEMPLATE wait a few
 * seconds at most for every process connected to the database to leave,
 * and then fail: so each tells that database's workers to exit first.
 * DROP EXTENSION persist_sink does too, in its own database: nothing there
 * will use them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "base/background.h"
#include "shard/compact.h"
#include "sink/sink.h"
#include "sql/sql.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

/* Tells the on-demand workers of database to exit; takes the sink and queue locks. */
static void
stop_database_workers(Oid database)
{
	ps_sink_stop_database(database);
	ps_compaction_stop_database(database);
}

/*
 * The database a statement needs no other process connected to (see
 * above), or NULL.
 */
static const char *
database_to_leave(Node *stmt)
{
	ListCell   *lc;

	if (IsA(stmt, DropdbStmt))
		return ((DropdbStmt *) stmt)->dbname;
	if (IsA(stmt, RenameStmt) && ((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
		return ((RenameStmt *) stmt)->subname;
	if (IsA(stmt, CreatedbStmt))
	{
		foreach(lc, ((CreatedbStmt *) stmt)->options)
			if (strcmp(((DefElem *) lfirst(lc))->defname, "template") == 0)
				return defGetString(lfirst(lc));
	}
	if (IsA(stmt, AlterDatabaseStmt))
	{
		foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
			if (strcmp(((DefElem *) lfirst(lc))->defname, "tablespace") == 0)
				return ((AlterDatabaseStmt *) stmt)->dbname;
	}
	return NULL;
}

/* True if stmt is DROP EXTENSION naming persist_sink. */
static bool
drops_this_extension(Node *stmt)
{
	DropStmt   *drop;
	ListCell   *lc;

	if (!IsA(stmt, DropStmt))
		return false;
	drop = (DropStmt *) stmt;
	if (drop->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, drop->objects)
		if (strcmp(strVal(lfirst(lc)), "persist_sink") == 0)
			return true;
	return false;
}

/*
 * ProcessUtility hook: before a statement that needs a database left by
 * every other process, tells that database's workers to exit; after DROP
 * EXTENSION persist_sink, those of this database.
 */
static void
databases_process_utility(PlannedStmt *pstmt, const char *queryString,
						  bool readOnlyTree, ProcessUtilityContext context,
						  ParamListInfo params, QueryEnvironment *queryEnv,
						  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	const char *leave = database_to_leave(stmt);

	if (leave != NULL)
	{
		Oid			database = get_database_oid(leave, true);

		if (OidIsValid(database))
			stop_database_workers(database);
	}
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
	if (drops_this_extension(stmt) && !ps_home_database())
		stop_database_workers(MyDatabaseId);
}

/* Installs the hook; called from _PG_init. */
void
ps_utility_install_hook(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = databases_process_utility;
}
