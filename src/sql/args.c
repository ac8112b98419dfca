/*-------------------------------------------------------------------------
 *
 * args.c
 *	  Argument checks of the SQL functions, and the errors they raise.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_proc.h"
#include "common/int.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "base/settings.h"
#include "sql/sql.h"

/* Raises 22004 if argument argno is NULL. */
void
ps_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be NULL", argname)));
}

/*
 * Raises 42602 unless name is a valid name of a what (shard or reader): 1
 * to PS_MAX_SHARD_NAME bytes, no '/' and no control characters (C0, DEL,
 * and C1 as UTF-8).
 */
static void
check_name(const char *name, const char *what)
{
	size_t		len = strlen(name);

	if (len == 0 || len > PS_MAX_SHARD_NAME)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("invalid %s name \"%s\"", what, name),
				 errdetail("A %s name has 1 to %d bytes.", what, PS_MAX_SHARD_NAME)));
	for (const char *p = name; *p; p++)
		if (*p == '/' || (unsigned char) *p < 0x20 || *p == 0x7f ||
			((unsigned char) p[0] == 0xc2 && (unsigned char) p[1] >= 0x80 &&
			 (unsigned char) p[1] <= 0x9f))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("invalid %s name \"%s\"", what, name),
					 errdetail("A %s name may not contain '/' or control characters.", what)));
}

/* Returns argument argno, named argname, as a checked name of a what. */
static char *
checked_name_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
				 const char *what)
{
	char	   *name;

	ps_require_arg(fcinfo, argno, argname);
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	check_name(name, what);
	return name;
}

/* Raises 42602 unless name is a valid shard name. */
void
ps_check_shard_name(const char *name)
{
	check_name(name, "shard");
}

/* Returns argument argno, named argname, as a checked shard name. */
char *
ps_name_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	return checked_name_arg(fcinfo, argno, argname, "shard");
}

/* Returns argument argno (called "shard") as a checked shard name. */
char *
ps_shard_arg(FunctionCallInfo fcinfo, int argno)
{
	return checked_name_arg(fcinfo, argno, "shard", "shard");
}

/*
 * Returns argument argno (called "reader") as a checked reader name: the
 * rules of shard names.
 */
char *
ps_reader_arg(FunctionCallInfo fcinfo, int argno)
{
	return checked_name_arg(fcinfo, argno, "reader", "reader");
}

/* Returns a non-NULL bigint argument. */
int64
ps_int64_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	ps_require_arg(fcinfo, argno, argname);
	return PG_GETARG_INT64(argno);
}

/*
 * Returns interval argument argno, named "timeout" and not NULL, in
 * milliseconds; -1 (no limit) if longer than bigint milliseconds; raises
 * 22023 if negative.
 */
int64
ps_timeout_ms_arg(FunctionCallInfo fcinfo, int argno)
{
	Interval   *t = PG_GETARG_INTERVAL_P(argno);
	int64		days = (int64) t->month * DAYS_PER_MONTH + t->day;
	int64		days_ms;
	int64		timeout_ms;
	bool		beyond;

	beyond = pg_mul_s64_overflow(days, SECS_PER_DAY * 1000, &days_ms) ||
		pg_add_s64_overflow(days_ms, t->time / 1000, &timeout_ms);
	if (beyond ? days < 0 : timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"timeout\" must not be negative")));
	return beyond ? -1 : timeout_ms;
}

/* Raises 22023 unless new_upper > expected_upper. */
void
ps_check_new_upper(int64 expected_upper, int64 new_upper)
{
	if (new_upper <= expected_upper)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("new_upper must be greater than expected_upper"),
				 errdetail("expected_upper is " INT64_FORMAT ", new_upper is " INT64_FORMAT ".",
						   expected_upper, new_upper)));
}

/* Raises 22023 unless every time is in [lower, upper); call before sorting. */
void
ps_check_times(const PsUpdateArrays *w, int64 lower, int64 upper)
{
	for (int i = 0; i < w->n; i++)
		if (w->updates[i].time < lower || w->updates[i].time >= upper)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("time " INT64_FORMAT " of element %d is outside [expected_upper, new_upper)",
							w->updates[i].time, i + 1),
					 errdetail("expected_upper is " INT64_FORMAT ", new_upper is " INT64_FORMAT ".",
							   lower, upper)));
}

/*
 * Raises 25006, naming the shard, during recovery (a standby), in a
 * read-only transaction, and on a subscriber (persist_sink.subscriber),
 * whose shards only the publisher's logical replication writes.  Every SQL
 * function that changes a shard calls it before touching the shard, so
 * that none reports the storage statement it would have run; no lock
 * needed.
 */
void
ps_require_writable(const char *shard)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot write to shard \"%s\" during recovery", shard),
				 errhint("Write on the primary; a standby serves reads.")));
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot write to shard \"%s\" in a read-only transaction", shard)));
	if (!ps_subscriber)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
			 errmsg("cannot write to shard \"%s\" on a subscriber", shard),
			 errdetail("The shards of this server are written only by logical replication from its publisher."),
			 errhint("Write on the publisher. Turn persist_sink.subscriber off only once this server no longer subscribes.")));
}

/* Raises PS001 for an upper mismatch on shard. */
void
ps_raise_upper_mismatch(const char *shard, int64 expected, int64 current)
{
	ereport(ERROR,
			(errcode(ERRCODE_PS_UPPER_MISMATCH),
			 errmsg("upper mismatch on shard \"%s\": expected " INT64_FORMAT,
					shard, expected),
			 errdetail("current upper is " INT64_FORMAT, current)));
}

/* True if the current user has the privileges of the named role. */
static bool
has_role(const char *role)
{
	Oid			roleid = get_role_oid(role, true);

	return OidIsValid(roleid) && has_privs_of_role(GetUserId(), roleid);
}

/*
 * True if the current user has the privileges of persist_sink_writer
 * (write is true) or persist_sink_reader (read is true), or of either when
 * both are true: ps_require_privilege's test, without the error.
 */
bool
ps_has_privilege(bool write, bool read)
{
	return (write && has_role("persist_sink_writer")) ||
		(read && has_role("persist_sink_reader"));
}

/*
 * Raises 42501 unless the current user has the privileges of
 * persist_sink_writer (write is true) or persist_sink_reader (read is
 * true), or of either when both are true.  EXECUTE grants are the first
 * gate; this check keeps the rule when a function is granted to others.
 */
void
ps_require_privilege(bool write, bool read, const char *function)
{
	const char *role = write && read ? "persist_sink_writer or persist_sink_reader" :
	write ? "persist_sink_writer" : "persist_sink_reader";

	if (ps_has_privilege(write, read))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for function %s", function),
			 errdetail("Only members of %s may call it.", role),
			 errhint("Grant the role to it: GRANT %s TO %s;",
					 write ? "persist_sink_writer" : "persist_sink_reader",
					 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
}

/*
 * Raises 55000 if the SQL function being called is SECURITY DEFINER, as the
 * typed functions of the extension's SQL objects before version 0.3 are: a
 * typed call runs the row type's I/O and domain checks, code a user can
 * define, which must never run with the owner's rights.
 */
void
ps_refuse_security_definer(FunctionCallInfo fcinfo, const char *function)
{
	HeapTuple	tuple;
	bool		secdef = false;

	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (HeapTupleIsValid(tuple))
	{
		secdef = ((Form_pg_proc) GETSTRUCT(tuple))->prosecdef;
		ReleaseSysCache(tuple);
	}
	if (secdef)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("function %s of persist_sink is SECURITY DEFINER", function),
				 errdetail("Its SQL objects are older than version 0.3: a typed call would run the row type's code with the owner's rights."),
				 errhint("Run ALTER EXTENSION persist_sink UPDATE.")));
}
