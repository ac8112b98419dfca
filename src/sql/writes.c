/*-------------------------------------------------------------------------
 *
 * writes.c
 *	  The SQL functions that write: compare_and_append, in the caller's
 *	  transaction, and append, through the sink.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/builtins.h"

#include "base/base.h"

#include "shard/shard.h"
#include "sink/sink.h"
#include "sql/sql.h"

PG_FUNCTION_INFO_V1(ps_compare_and_append);
PG_FUNCTION_INFO_V1(ps_append);

/*
 * compare_and_append of a write's updates (times already checked) in the
 * caller's transaction; raises PS001 on an upper mismatch.  Returns the new
 * seqno.  row_type, if valid, must be the shard's row type.
 */
int64
ps_sql_compare_and_append(const char *shard, PsUpdateArrays *w,
						  int64 expected_upper, int64 new_upper, Oid row_type)
{
	PsAppendResult result;

	ps_require_writable(shard);
	ps_updates_sort_consolidate(w);
	ps_shard_compare_and_append(shard, w, expected_upper, new_upper, row_type,
								&result);
	if (!result.ok)
		ps_raise_upper_mismatch(shard, expected_upper, result.current_upper);
	return result.seqno;
}

/*
 * compare_and_append(shard, keys, vals, times, diffs, expected_upper,
 * new_upper) returns bigint: the new seqno.  keys and vals are bytea[] or
 * text[].  Runs in the caller's transaction.
 */
Datum
ps_compare_and_append(PG_FUNCTION_ARGS)
{
	char	   *shard;
	int64		expected_upper;
	int64		new_upper;
	PsUpdateArrays w;

	PS_WRITER("compare_and_append");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_APPEND, "compare_and_append");
	expected_upper = ps_int64_arg(fcinfo, 5, "expected_upper");
	new_upper = ps_int64_arg(fcinfo, 6, "new_upper");

	ps_require_arg(fcinfo, 1, "keys");
	ps_require_arg(fcinfo, 2, "vals");
	ps_require_arg(fcinfo, 3, "times");
	ps_require_arg(fcinfo, 4, "diffs");
	ps_check_new_upper(expected_upper, new_upper);
	ps_updates_from_arrays(&w, PG_GETARG_ARRAYTYPE_P(1), PG_GETARG_ARRAYTYPE_P(2),
						   PG_GETARG_ARRAYTYPE_P(3), PG_GETARG_ARRAYTYPE_P(4), 0);
	ps_check_times(&w, expected_upper, new_upper);
	PG_RETURN_INT64(ps_sql_compare_and_append(shard, &w, expected_upper, new_upper,
											  InvalidOid));
}

/*
 * Returns argument argno as an idempotency key (NULL if the argument is
 * NULL); 22023 for an empty or too long key.
 */
const char *
ps_idempotency_key_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *key;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	key = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (key[0] == '\0' || strlen(key) > PS_MAX_IDEMPOTENCY_KEY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"idempotency_key\" must have 1 to %d bytes",
						PS_MAX_IDEMPOTENCY_KEY)));
	return key;
}

/*
 * Appends a write through the sink; returns its time once it is durable.
 * With an idempotency key, a retry of a committed append returns that
 * append's time and writes nothing.
 */
int64
ps_sql_append(const char *shard, PsUpdateArrays *w, const char *idempotency_key)
{
	MemoryContext cxt = CurrentMemoryContext;

	/* the sink commits in a worker: the caller's read-only mode must hold */
	PreventCommandIfReadOnly("append()");
	ps_require_writable(shard);
	PG_TRY();
	{
		ps_updates_sort_consolidate(w);
	}
	PG_CATCH();
	{
		ps_sink_rethrow_before_lookup(shard, idempotency_key, cxt);
	}
	PG_END_TRY();
	return ps_sink_append(shard, w, idempotency_key);
}

/*
 * ps_sql_append of a write too large to hold in memory: sort(arg) sorts it
 * (on disk) and returns its stream of sorted, consolidated updates, which
 * the sink takes a part at a time.
 */
int64
ps_sql_append_stream(const char *shard, PsUpdateStream *(*sort) (void *arg),
					 void *arg, const char *idempotency_key)
{
	MemoryContext cxt = CurrentMemoryContext;
	PsUpdateStream *volatile s = NULL;

	PreventCommandIfReadOnly("append()");
	ps_require_writable(shard);
	PG_TRY();
	{
		s = sort(arg);
	}
	PG_CATCH();
	{
		ps_sink_rethrow_before_lookup(shard, idempotency_key, cxt);
	}
	PG_END_TRY();
	return ps_sink_append_stream(shard, s, idempotency_key);
}

/* append(shard, keys, vals, diffs, idempotency_key) returns bigint: the sink */
Datum
ps_append(PG_FUNCTION_ARGS)
{
	char	   *shard;
	PsUpdateArrays w;

	MemoryContext cxt = CurrentMemoryContext;
	const char *key;

	PS_WRITER("append");
	shard = ps_shard_arg(fcinfo, 0);
	key = ps_idempotency_key_arg(fcinfo, 4);

	ps_require_arg(fcinfo, 1, "keys");
	ps_require_arg(fcinfo, 2, "vals");
	ps_require_arg(fcinfo, 3, "diffs");
	/* a keyed call cancelled here is 40003: see ps_sink_rethrow_before_lookup */
	PG_TRY();
	{
		ps_require_shard_right(shard, PS_SHARD_APPEND, "append");
		ps_updates_from_arrays(&w, PG_GETARG_ARRAYTYPE_P(1), PG_GETARG_ARRAYTYPE_P(2),
							   NULL, PG_GETARG_ARRAYTYPE_P(3), 0);
	}
	PG_CATCH();
	{
		ps_sink_rethrow_before_lookup(shard, key, cxt);
	}
	PG_END_TRY();
	PG_RETURN_INT64(ps_sql_append(shard, &w, key));
}
