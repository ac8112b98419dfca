/*-------------------------------------------------------------------------
 *
 * fdw_import.c
 *	  IMPORT FOREIGN SCHEMA persist_sink FROM SERVER s INTO local: a
 *	  foreign table for each shard the caller may read.
 *
 * The shards are the tables of the remote schema persist_sink (any other
 * name raises HV00Q, as postgres_fdw does for a schema the server lacks).
 * Each table is named as its shard, with the option shard, and has the
 * columns whose SELECT * reads as snapshot() does: an untyped shard's
 * (key bytea, val bytea, "time" bigint, diff bigint); a typed shard's, the
 * fields of its row type (one column "row" for a scalar row type, of that
 * type), each of its type, typmod and collation, then "time" and diff
 * (either left out if a field takes its name).  Types and collations are
 * written schema-qualified, never looked up through search_path.
 *
 * LIMIT TO and EXCEPT name shards; the core filters the statements by
 * their tables' names as well, so a name is skipped here only to save the
 * work.  A shard the caller lacks the read privilege on (or that a listed
 * name does not match) gets no table, silently, as postgres_fdw skips
 * remote tables it cannot see.  A shard whose name is longer than a table
 * name may be (NAMEDATALEN - 1 bytes), or whose row type no longer exists,
 * gets none either, with a NOTICE or WARNING naming it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_collation.h"
#include "executor/spi.h"
#include "foreign/fdwapi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "fdw/fdw.h"
#include "sql/sql.h"
#include "store/store.h"

/* The remote schema whose tables are the shards */
#define SHARD_SCHEMA	"persist_sink"

/* An import under way: the statement and the commands made so far */
typedef struct Import
{
	ImportForeignSchemaStmt *stmt;
	const char *server;			/* the server's name */
	MemoryContext cxt;			/* where the commands go */
	List	   *commands;
} Import;

/* True if name is one of the tables a LIMIT TO or EXCEPT list names. */
static bool
listed(ImportForeignSchemaStmt *stmt, const char *name)
{
	ListCell   *lc;

	foreach(lc, stmt->table_list)
		if (strcmp(((RangeVar *) lfirst(lc))->relname, name) == 0)
			return true;
	return false;
}

/* True if the statement's LIMIT TO or EXCEPT lets the shard's table in. */
static bool
wanted(ImportForeignSchemaStmt *stmt, const char *shard)
{
	switch (stmt->list_type)
	{
		case FDW_IMPORT_SCHEMA_LIMIT_TO:
			return listed(stmt, shard);
		case FDW_IMPORT_SCHEMA_EXCEPT:
			return !listed(stmt, shard);
		default:
			return true;
	}
}

/* A collation's name, schema-qualified and quoted. */
static char *
qualified_collation(Oid collation)
{
	HeapTuple	tuple = SearchSysCache1(COLLOID, ObjectIdGetDatum(collation));
	Form_pg_collation form;
	char	   *name;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for collation %u", collation);
	form = (Form_pg_collation) GETSTRUCT(tuple);
	name = quote_qualified_identifier(get_namespace_name(form->collnamespace),
									  NameStr(form->collname));
	ReleaseSysCache(tuple);
	return name;
}

/* What goes before the next column of a CREATE FOREIGN TABLE being made. */
static const char *
separator(StringInfo buf)
{
	return buf->data[buf->len - 1] == '(' ? "" : ", ";
}

/* Appends a column of type (typmod, collation) named name. */
static void
append_column(StringInfo buf, const char *name, Oid type, int32 typmod,
			  Oid collation)
{
	appendStringInfo(buf, "%s%s %s", separator(buf),
					 quote_identifier(name),
					 format_type_extended(type, typmod,
										  FORMAT_TYPE_TYPEMOD_GIVEN |
										  FORMAT_TYPE_FORCE_QUALIFY));
	if (OidIsValid(collation) && collation != get_typcollation(type))
		appendStringInfo(buf, " COLLATE %s", qualified_collation(collation));
}

/*
 * Appends the columns of a typed shard's table (the fields of type, or one
 * column "row" of a scalar type) and returns which of "time" and diff a
 * field already takes.
 */
static void
append_fields(StringInfo buf, Oid type, bool *has_time, bool *has_diff)
{
	TupleDesc	desc;

	*has_time = false;
	*has_diff = false;
	if (!type_is_rowtype(type))
	{
		append_column(buf, "row", type, -1, get_typcollation(type));
		return;
	}
	desc = lookup_rowtype_tupdesc(type, -1);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		append_column(buf, NameStr(att->attname), att->atttypid, att->atttypmod,
					  att->attcollation);
		*has_time |= strcmp(NameStr(att->attname), "time") == 0;
		*has_diff |= strcmp(NameStr(att->attname), "diff") == 0;
	}
	ReleaseTupleDesc(desc);
}

/*
 * The type of a typed shard's rows, from the qualified name its state
 * records; InvalidOid (with a WARNING) if it no longer exists.
 */
static Oid
row_type(const char *shard, const char *name)
{
	Oid			type;
	int32		typmod;

	parseTypeString(name, &type, &typmod, true);
	if (!OidIsValid(type))
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("shard \"%s\" is not imported: its row type %s does not exist",
						shard, name)));
	return type;
}

/*
 * The CREATE FOREIGN TABLE of a shard, or NULL if it can have none here
 * (a NOTICE or WARNING says why).
 */
static char *
table_command(Import *imp, const char *shard, const PsState *state)
{
	StringInfoData buf;
	bool		has_time = false;
	bool		has_diff = false;

	if (strlen(shard) >= NAMEDATALEN)
	{
		ereport(NOTICE,
				(errmsg("shard \"%s\" is not imported: its name is longer than a table name may be",
						shard),
				 errhint("Create its foreign table by hand, under a name of %d bytes at most, with OPTIONS (shard '...').",
						 NAMEDATALEN - 1)));
		return NULL;
	}
	initStringInfo(&buf);
	appendStringInfo(&buf, "CREATE FOREIGN TABLE %s (", quote_identifier(shard));
	if (state->row_type == NULL)
		appendStringInfoString(&buf, "key pg_catalog.bytea, val pg_catalog.bytea");
	else
	{
		Oid			type = row_type(shard, state->row_type);

		if (!OidIsValid(type))
			return NULL;
		append_fields(&buf, type, &has_time, &has_diff);
	}
	if (!has_time)
		appendStringInfo(&buf, "%s\"time\" pg_catalog.int8", separator(&buf));
	if (!has_diff)
		appendStringInfo(&buf, "%sdiff pg_catalog.int8", separator(&buf));
	appendStringInfo(&buf, ") SERVER %s OPTIONS (shard %s)",
					 quote_identifier(imp->server), quote_literal_cstr(shard));
	return buf.data;
}

/*
 * Adds the table of a shard to the import if the statement wants it and
 * the caller may read it (a PsStateVisitor).
 */
static void
visit_shard(const char *shard, const PsState *state, void *arg)
{
	Import	   *imp = (Import *) arg;
	char	   *command;
	MemoryContext old;

	if (!wanted(imp->stmt, shard) || !ps_has_shard_right(shard, PS_SHARD_READ))
		return;
	command = table_command(imp, shard, state);
	if (command == NULL)
		return;
	/* the call's own memory is freed after it */
	old = MemoryContextSwitchTo(imp->cxt);
	imp->commands = lappend(imp->commands, pstrdup(command));
	MemoryContextSwitchTo(old);
}

/*
 * Raises the errors of an import the wrapper cannot make: another remote
 * schema (HV00Q), an option (HV00D), a caller who may read no shard (42501).
 */
static void
check_import(ImportForeignSchemaStmt *stmt, const char *server)
{
	if (strcmp(stmt->remote_schema, SHARD_SCHEMA) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_SCHEMA_NOT_FOUND),
				 errmsg("schema \"%s\" is not present on foreign server \"%s\"",
						stmt->remote_schema, server),
				 errhint("The shards are the tables of schema persist_sink: IMPORT FOREIGN SCHEMA persist_sink FROM SERVER %s INTO ...",
						 quote_identifier(server))));
	if (stmt->options != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("invalid option \"%s\"", ((DefElem *) linitial(stmt->options))->defname),
				 errhint("IMPORT FOREIGN SCHEMA of persist_sink takes no options.")));
	if (!ps_has_privilege(false, true))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to import the shards of server \"%s\"", server),
				 errdetail("Only members of persist_sink_reader may read shards."),
				 errhint("Grant the role to it: GRANT persist_sink_reader TO %s;",
						 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
}

/*
 * ImportForeignSchema: the CREATE FOREIGN TABLE of each shard wanted and
 * readable, in the order of the shards' names.  Reads the states with the
 * statement's snapshot.
 */
static List *
import_schema(ImportForeignSchemaStmt *stmt, Oid serverOid)
{
	ForeignServer *server = GetForeignServer(serverOid);
	Import		imp;

	check_import(stmt, server->servername);
	imp.stmt = stmt;
	imp.server = server->servername;
	imp.cxt = CurrentMemoryContext;
	imp.commands = NIL;
	SPI_connect();
	ps_consensus_foreach(visit_shard, &imp, true);
	SPI_finish();
	return imp.commands;
}

/* Fills in the wrapper's routine that imports. */
void
ps_fdw_import_routine(FdwRoutine *routine)
{
	routine->ImportForeignSchema = import_schema;
}
