/*-------------------------------------------------------------------------
 *
 * rows.c
 *	  Typed rows: shards of a row type, written and read as that type.
 *
 * A row is stored as an update whose key is the row's binary send form and
 * whose val is empty; reading runs the type's receive function.  The row
 * type is recorded (as a qualified name) when the shard is created, and
 * every typed call checks it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "base/base.h"
#include "shard/read.h"
#include "shard/shard.h"
#include "sink/sink.h"
#include "sql/sql.h"
#include "store/store.h"

PG_FUNCTION_INFO_V1(ps_append_rows);
PG_FUNCTION_INFO_V1(ps_compare_and_append_rows);
PG_FUNCTION_INFO_V1(ps_snapshot_rows);
PG_FUNCTION_INFO_V1(ps_listen_rows);
PG_FUNCTION_INFO_V1(ps_read_next_rows);

/* Raises an error unless the shard holds rows of type. */
static void
require_row_type(const char *shard, Oid type)
{
	PsState		state;

	SPI_connect();
	ps_consensus_read_or_error(shard, &state, CurrentMemoryContext, false);
	ps_check_row_type(shard, &state, type);
	SPI_finish();
}

/*
 * Builds updates from an array of rows: key = send form, val empty, diff 1
 * unless diffs is given, time from times if given.
 */
static Oid
rows_to_updates(PsUpdateArrays *w, ArrayType *rows, ArrayType *times,
				ArrayType *diffs)
{
	Oid			type = ARR_ELEMTYPE(rows);
	Datum	   *row_d;
	Datum	   *time_d = NULL;
	Datum	   *diff_d = NULL;
	Oid			send;
	bool		varlena;
	FmgrInfo	flinfo;
	int			n = ps_array_elements(rows, "rows", type, &row_d);

	if (times)
		ps_check_array_length(ps_array_elements(times, "times", INT8OID, &time_d),
							  n, "times", "rows");
	if (diffs)
		ps_check_array_length(ps_array_elements(diffs, "diffs", INT8OID, &diff_d),
							  n, "diffs", "rows");
	getTypeBinaryOutputInfo(type, &send, &varlena);
	fmgr_info(send, &flinfo);
	w->n = n;
	w->raw_bytes = 0;
	w->updates = palloc_extended(sizeof(PsUpdate) * Max(n, 1), MCXT_ALLOC_HUGE);
	for (int i = 0; i < n; i++)
	{
		bytea	   *b = SendFunctionCall(&flinfo, row_d[i]);
		PsUpdate   *u = &w->updates[i];

		u->key = VARDATA(b);
		u->key_len = VARSIZE(b) - VARHDRSZ;
		u->val = "";
		u->val_len = 0;
		u->time = times ? DatumGetInt64(time_d[i]) : 0;
		u->diff = diffs ? DatumGetInt64(diff_d[i]) : 1;
		w->raw_bytes += PS_UPDATE_RAW_SIZE(u);
	}
	return type;
}

/*
 * append_rows(shard text, rows anyarray, diffs bigint[] default null,
 * idempotency_key text default null) returns bigint
 */
Datum
ps_append_rows(PG_FUNCTION_ARGS)
{
	char	   *shard;
	PsUpdateArrays w;
	Oid			type;

	MemoryContext cxt = CurrentMemoryContext;
	const char *key;

	PS_WRITER("append_rows");
	ps_refuse_security_definer(fcinfo, "append_rows");
	shard = ps_shard_arg(fcinfo, 0);
	key = ps_idempotency_key_arg(fcinfo, 3);

	ps_require_arg(fcinfo, 1, "rows");
	/* a keyed call cancelled here is 40003: see ps_sink_rethrow_before_lookup */
	PG_TRY();
	{
		ps_require_shard_right(shard, PS_SHARD_APPEND, "append_rows");
		type = rows_to_updates(&w, PG_GETARG_ARRAYTYPE_P(1), NULL,
							   PG_ARGISNULL(2) ? NULL : PG_GETARG_ARRAYTYPE_P(2));
		require_row_type(shard, type);
	}
	PG_CATCH();
	{
		ps_sink_rethrow_before_lookup(shard, key, cxt);
	}
	PG_END_TRY();
	PG_RETURN_INT64(ps_sql_append(shard, &w, key));
}

/*
 * compare_and_append_rows(shard text, rows anyarray, times bigint[],
 * diffs bigint[], expected_upper bigint, new_upper bigint) returns bigint
 */
Datum
ps_compare_and_append_rows(PG_FUNCTION_ARGS)
{
	char	   *shard;
	PsUpdateArrays w;
	Oid			type;

	PS_WRITER("compare_and_append_rows");
	ps_refuse_security_definer(fcinfo, "compare_and_append_rows");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_APPEND, "compare_and_append_rows");

	ps_require_arg(fcinfo, 1, "rows");
	ps_require_arg(fcinfo, 2, "times");
	ps_require_arg(fcinfo, 4, "expected_upper");
	ps_require_arg(fcinfo, 5, "new_upper");
	ps_check_new_upper(PG_GETARG_INT64(4), PG_GETARG_INT64(5));
	type = rows_to_updates(&w, PG_GETARG_ARRAYTYPE_P(1), PG_GETARG_ARRAYTYPE_P(2),
						   PG_ARGISNULL(3) ? NULL : PG_GETARG_ARRAYTYPE_P(3));
	ps_check_times(&w, PG_GETARG_INT64(4), PG_GETARG_INT64(5));
	PG_RETURN_INT64(ps_sql_compare_and_append(shard, &w, PG_GETARG_INT64(4),
											  PG_GETARG_INT64(5), type));
}

/* How to turn stored keys back into rows of a type */
typedef struct RowReader
{
	Oid			type;
	bool		composite;
	FmgrInfo	recv;
	Oid			ioparam;
	StringInfoData buf;
} RowReader;

/* Prepares to receive rows of type. */
static void
row_reader_init(RowReader *r, Oid type)
{
	Oid			recv;

	r->type = type;
	r->composite = type_is_rowtype(type);
	getTypeBinaryInputInfo(type, &recv, &r->ioparam);
	fmgr_info(recv, &r->recv);
	initStringInfo(&r->buf);
}

/* Receives the row stored as u's key. */
static Datum
row_from_update(RowReader *r, const PsUpdate *u)
{
	resetStringInfo(&r->buf);
	appendBinaryStringInfo(&r->buf, u->key, u->key_len);
	return ReceiveFunctionCall(&r->recv, &r->buf, r->ioparam, -1);
}

/* Points tuple at the composite value row (a tuple of no table). */
void
ps_row_tuple(Datum row, HeapTupleData *tuple)
{
	HeapTupleHeader th = DatumGetHeapTupleHeader(row);

	tuple->t_len = HeapTupleHeaderGetDatumLength(th);
	ItemPointerSetInvalid(&tuple->t_self);
	tuple->t_tableOid = InvalidOid;
	tuple->t_data = th;
}

/* Puts a row into a SETOF anyelement result: a whole tuple, or one value. */
static void
put_row(ReturnSetInfo *rsinfo, RowReader *r, Datum row)
{
	if (r->composite)
	{
		HeapTupleData tuple;

		ps_row_tuple(row, &tuple);
		tuplestore_puttuple(rsinfo->setResult, &tuple);
	}
	else
	{
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &row, &isnull);
	}
}

/* Raises PS004 for a row whose multiplicity is negative. */
static void
raise_negative(const char *shard, Oid type, Datum row, int64 diff)
{
	Oid			out;
	bool		varlena;

	getTypeOutputInfo(type, &out, &varlena);
	ereport(ERROR,
			(errcode(ERRCODE_PS_NEGATIVE_MULTIPLICITY),
			 errmsg("row %s of shard \"%s\" has negative multiplicity " INT64_FORMAT,
					OidOutputFunctionCall(out, row), shard, diff)));
}

/*
 * snapshot_rows(shard text, row_type anyelement, as_of bigint default null)
 * returns setof anyelement: each row of the collection, diff times.
 */
Datum
ps_snapshot_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *shard;
	Oid			type = get_fn_expr_argtype(fcinfo->flinfo, 1);
	MemoryContext row_cxt;
	RowReader	r;
	PsState		state;
	PsMerge    *m;
	PsUpdate	u;
	int64		as_of;

	PS_READER("snapshot_rows");
	ps_refuse_security_definer(fcinfo, "snapshot_rows");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_READ, "snapshot_rows");

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	row_reader_init(&r, type);
	row_cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink rows",
									ALLOCSET_DEFAULT_SIZES);
	SPI_connect();
	ps_consensus_read_or_error(shard, &state, CurrentMemoryContext, true);
	ps_check_row_type(shard, &state, type);
	as_of = ps_snapshot_as_of(shard, &state, PG_ARGISNULL(2), PG_GETARG_INT64(2));
	m = ps_merge_begin(shard, &state, PG_INT64_MIN, as_of, true);
	while (ps_merge_next_consolidated(m, false, PG_INT64_MIN, &u))
	{
		MemoryContext old = MemoryContextSwitchTo(row_cxt);
		Datum		row = row_from_update(&r, &u);

		if (u.diff < 0)
			raise_negative(shard, type, row, u.diff);
		for (int64 i = 0; i < u.diff; i++)
		{
			CHECK_FOR_INTERRUPTS();
			put_row(rsinfo, &r, row);
		}
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
	}
	ps_merge_end(m);
	SPI_finish();
	return (Datum) 0;
}


/*
 * Puts update u into a materialized SRF's result as (row, time, diff),
 * its row made in row_cxt, which is reset after.
 */
static void
put_typed_update(ReturnSetInfo *rsinfo, RowReader *r, MemoryContext row_cxt,
				 const PsUpdate *u)
{
	MemoryContext old = MemoryContextSwitchTo(row_cxt);
	Datum		values[3];
	bool		nulls[3] = {0};

	values[0] = row_from_update(r, u);
	values[1] = Int64GetDatum(u->time);
	values[2] = Int64GetDatum(u->diff);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	MemoryContextSwitchTo(old);
	MemoryContextReset(row_cxt);
}
/*
 * Puts the typed rows of [min_time, max_time], consolidated per (row,
 * time), into the result as (row, time, diff), times below time_floor
 * advanced to it.
 */
static void
emit_rows_by_time(ReturnSetInfo *rsinfo, RowReader *r, const char *shard,
				  const PsState *state, int64 min_time, int64 max_time,
				  int64 time_floor)
{
	MemoryContext row_cxt = AllocSetContextCreate(CurrentMemoryContext,
												  "persist_sink rows",
												  ALLOCSET_DEFAULT_SIZES);
	PsMerge    *m = ps_merge_begin(shard, state, min_time, max_time, true);
	PsUpdate	u;

	while (ps_merge_next_consolidated(m, true, time_floor, &u))
		put_typed_update(rsinfo, r, row_cxt, &u);
	ps_merge_end(m);
	MemoryContextDelete(row_cxt);
}

/* Puts the typed rows of a reader's step into the result as (row, time, diff). */
static void
emit_step_rows(ReturnSetInfo *rsinfo, RowReader *r, PsReaderStep *step)
{
	MemoryContext row_cxt = AllocSetContextCreate(CurrentMemoryContext,
												  "persist_sink rows",
												  ALLOCSET_DEFAULT_SIZES);
	PsUpdate	u;

	while (ps_reader_step_next(step, &u))
		put_typed_update(rsinfo, r, row_cxt, &u);
	MemoryContextDelete(row_cxt);
}

/*
 * listen_rows(shard text, row_type anyelement, as_of bigint, until bigint
 * default null) returns table(row anyelement, time bigint, diff bigint)
 */
Datum
ps_listen_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *shard;
	Oid			type = get_fn_expr_argtype(fcinfo->flinfo, 1);
	RowReader	r;
	PsState		state;
	int64		min_time;
	int64		max_time;
	int64		time_floor;

	PS_READER("listen_rows");
	ps_refuse_security_definer(fcinfo, "listen_rows");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_READ, "listen_rows");

	ps_require_arg(fcinfo, 2, "as_of");
	InitMaterializedSRF(fcinfo, 0);
	row_reader_init(&r, type);
	SPI_connect();
	ps_consensus_read_or_error(shard, &state, CurrentMemoryContext, true);
	ps_check_row_type(shard, &state, type);
	if (ps_listen_window(shard, &state, PG_GETARG_INT64(2), PG_ARGISNULL(3),
						 PG_GETARG_INT64(3), &min_time, &max_time, &time_floor))
		emit_rows_by_time(rsinfo, &r, shard, &state, min_time, max_time, time_floor);
	SPI_finish();
	return (Datum) 0;
}

/*
 * read_next_rows(shard text, reader text, row_type anyelement, max_updates
 * bigint default 100000, timeout interval default null) returns
 * table(row anyelement, time bigint, diff bigint): read_next of typed rows
 */
Datum
ps_read_next_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			type = get_fn_expr_argtype(fcinfo->flinfo, 2);
	RowReader	r;
	PsReadWindow w;

	ps_refuse_security_definer(fcinfo, "read_next_rows");
	InitMaterializedSRF(fcinfo, 0);
	row_reader_init(&r, type);
	SPI_connect();
	if (ps_reader_next_window(fcinfo, 3, "read_next_rows", &w))
	{
		PsReaderStep *step;

		ps_check_row_type(w.shard, &w.state, type);
		step = ps_reader_step_begin(w.shard, &w.state, w.after, w.max_updates);
		emit_step_rows(rsinfo, &r, step);
		ps_reader_step_end(step);
	}
	PopActiveSnapshot();
	SPI_finish();
	return (Datum) 0;
}
