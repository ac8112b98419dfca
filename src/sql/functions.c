/*-------------------------------------------------------------------------
 *
 * functions.c
 *	  The SQL functions over shards: create, drop, upper, since, the shards
 *	  view, batches, snapshot, listen and compact.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/tuplestore.h"

#include "shard/compact.h"
#include "shard/read.h"
#include "shard/shard.h"
#include "shard/stats.h"
#include "shard/upper_wait.h"
#include "sql/sql.h"
#include "store/store.h"

PG_FUNCTION_INFO_V1(ps_create_shard);
PG_FUNCTION_INFO_V1(ps_drop_shard);
PG_FUNCTION_INFO_V1(ps_shard_upper);
PG_FUNCTION_INFO_V1(ps_shard_since);
PG_FUNCTION_INFO_V1(ps_downgrade_since);
PG_FUNCTION_INFO_V1(ps_shard_info);
PG_FUNCTION_INFO_V1(ps_batches);
PG_FUNCTION_INFO_V1(ps_snapshot);
PG_FUNCTION_INFO_V1(ps_listen);
PG_FUNCTION_INFO_V1(ps_compact);
PG_FUNCTION_INFO_V1(ps_wait_upper);


/* Reads a shard's state with the statement's snapshot. */
static void
read_state(const char *shard, PsState *state)
{
	ps_consensus_read_or_error(shard, state, CurrentMemoryContext, true);
}

/*
 * The qualified name of a row type a shard may hold; 42804 for types whose
 * values cannot be sent and received as rows (pseudo-types, arrays).
 */
static char *
row_type_name(Oid type)
{
	if (get_typtype(type) == TYPTYPE_PSEUDO || OidIsValid(get_element_type(type)))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("type %s cannot be the row type of a shard", format_type_be(type)),
				 errdetail("A row type must be a base, composite, domain, enum or range type, not a pseudo-type or an array.")));
	return format_type_be_qualified(type);
}

/* create_shard(name text, row_type regtype default null) returns void */
Datum
ps_create_shard(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *row_type = NULL;

	PS_WRITER("create_shard");
	name = ps_name_arg(fcinfo, 0, "name");
	ps_require_writable(name);

	if (!PG_ARGISNULL(1))
		row_type = row_type_name(PG_GETARG_OID(1));
	SPI_connect();
	ps_shard_create(name, row_type);
	ps_shard_owner_set(name);
	SPI_finish();
	ps_stats_forget(name);
	PG_RETURN_VOID();
}

/* drop_shard(name text) returns void */
Datum
ps_drop_shard(PG_FUNCTION_ARGS)
{
	char	   *name;

	PS_WRITER("drop_shard");
	name = ps_name_arg(fcinfo, 0, "name");
	ps_require_writable(name);
	ps_require_shard_right(name, PS_SHARD_OWNER, "drop_shard");

	SPI_connect();
	ps_shard_drop(name);
	ps_shard_owner_forget(name);
	SPI_finish();
	ps_stats_forget(name);
	PG_RETURN_VOID();
}

/* shard_upper(shard text) returns bigint */
Datum
ps_shard_upper(PG_FUNCTION_ARGS)
{
	char	   *name;
	PsState		state;

	PS_ANY_ROLE("shard_upper");
	name = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(name, PS_SHARD_USE, "shard_upper");

	SPI_connect();
	read_state(name, &state);
	SPI_finish();
	PG_RETURN_INT64(state.upper);
}

/* shard_since(shard text) returns bigint */
Datum
ps_shard_since(PG_FUNCTION_ARGS)
{
	char	   *name;
	PsState		state;

	PS_ANY_ROLE("shard_since");
	name = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(name, PS_SHARD_USE, "shard_since");

	SPI_connect();
	read_state(name, &state);
	SPI_finish();
	PG_RETURN_INT64(state.since);
}

/* downgrade_since(shard text, since bigint) returns void */
Datum
ps_downgrade_since(PG_FUNCTION_ARGS)
{
	char	   *name;
	int64		since;

	PS_WRITER("downgrade_since");
	name = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(name, PS_SHARD_OWNER, "downgrade_since");
	ps_require_writable(name);
	since = ps_int64_arg(fcinfo, 1, "since");

	SPI_connect();
	ps_shard_downgrade_since(name, since);
	SPI_finish();
	PG_RETURN_VOID();
}

/* Returns a new bytea holding len bytes. */
Datum
ps_bytea_datum(const char *data, uint32 len)
{
	bytea	   *b = palloc(VARHDRSZ + len);

	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	return PointerGetDatum(b);
}

/* One store's objects_owned, found once per shard_info() call */
typedef struct OwnedAnswer
{
	char	   *store;
	bool		known;			/* false: null, the owner not known */
	bool		owned;
} OwnedAnswer;

/* A shard_info() call: its result and the stores' answers so far */
typedef struct ShardInfoScan
{
	ReturnSetInfo *rsinfo;
	MemoryContext cxt;			/* where answers live (not the row's) */
	List	   *answers;
} ShardInfoScan;

/*
 * Whose store is, by its owner marker (ps_store_owner), in a subtransaction
 * so that a store that cannot be asked gives *failed instead of an error.
 */
static PsStoreOwner
owner_if_known(const char *store, bool *failed)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile PsStoreOwner result = PS_STORE_UNMARKED;
	volatile bool error = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		result = ps_store_owner(store, NULL);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		error = true;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	*failed = error;
	return result;
}

/*
 * The objects_owned of a shard whose parts are in store (NULL: the blob
 * table, this database's): true if the store's marker names this
 * database, false if another's; *known false (null) if the store has no
 * marker yet or cannot be asked.  Each store is asked once per scan.
 */
static bool
objects_owned(ShardInfoScan *scan, const char *store, bool *known)
{
	OwnedAnswer *a;
	MemoryContext old;
	PsStoreOwner owner;
	bool		failed;
	ListCell   *lc;

	*known = true;
	if (store == NULL)
		return true;
	foreach(lc, scan->answers)
	{
		a = lfirst(lc);
		if (strcmp(a->store, store) == 0)
		{
			*known = a->known;
			return a->owned;
		}
	}
	owner = owner_if_known(store, &failed);
	old = MemoryContextSwitchTo(scan->cxt);
	a = palloc(sizeof(OwnedAnswer));
	a->store = pstrdup(store);
	a->known = !failed && owner != PS_STORE_UNMARKED;
	a->owned = a->known && owner == PS_STORE_OURS;
	scan->answers = lappend(scan->answers, a);
	MemoryContextSwitchTo(old);
	*known = a->known;
	return a->owned;
}

/*
 * Adds one row of the shards view for a decoded state.  The shard_info()
 * of an older version of the extension's SQL has no runs column (0.4) or
 * neither runs nor debt_batches (0.3), no blob_store (0.13) or no
 * objects_owned (0.16): they are left out until ALTER EXTENSION ...
 * UPDATE.
 */
static void
put_shard_info(ShardInfoScan *scan, const char *name, const PsState *s)
{
	ReturnSetInfo *rsinfo = scan->rsinfo;
	Datum		values[13];
	bool		nulls[13] = {0};
	int64		parts = 0,
				inline_bytes = 0,
				blob_bytes = 0,
				updates = 0,
				runs = 0;

	for (int i = 0; i < s->nbatches; i++)
	{
		runs += ps_batch_runs(&s->batches[i]);
		for (int j = 0; j < s->batches[i].nparts; j++)
		{
			const PsPart *p = &s->batches[i].parts[j];

			parts++;
			updates += p->nupdates;
			if (p->blob_key)
				blob_bytes += p->encoded_size;
			else
				inline_bytes += p->encoded_size;
		}
	}
	values[0] = CStringGetTextDatum(name);
	values[1] = Int64GetDatum(s->seqno);
	values[2] = Int64GetDatum(s->upper);
	values[3] = Int64GetDatum(s->since);
	values[4] = Int64GetDatum(s->nbatches);
	values[5] = Int64GetDatum(parts);
	values[6] = Int64GetDatum(inline_bytes);
	values[7] = Int64GetDatum(blob_bytes);
	values[8] = Int64GetDatum(updates);
	if (rsinfo->setDesc->natts > 9)
		values[9] = Int64GetDatum(ps_compact_debt(s));
	if (rsinfo->setDesc->natts > 10)
		values[10] = Int64GetDatum(runs);
	if (rsinfo->setDesc->natts > 11)
		values[11] = CStringGetTextDatum(s->blob_store ? s->blob_store : "table");
	if (rsinfo->setDesc->natts > 12)
	{
		bool		known;

		values[12] = BoolGetDatum(objects_owned(scan, s->blob_store, &known));
		nulls[12] = !known;
	}
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* Adds a shard's row to the shards view's result (a PsStateVisitor). */
static void
visit_shard(const char *name, const PsState *state, void *arg)
{
	put_shard_info((ShardInfoScan *) arg, name, state);
}

/* shard_info(): one row per shard, for the shards view */
Datum
ps_shard_info(PG_FUNCTION_ARGS)
{
	ShardInfoScan scan = {(ReturnSetInfo *) fcinfo->resultinfo, NULL, NIL};

	PS_READER("shard_info");

	InitMaterializedSRF(fcinfo, 0);
	scan.cxt = CurrentMemoryContext;
	SPI_connect();
	ps_consensus_foreach(visit_shard, &scan, true);
	SPI_finish();
	return (Datum) 0;
}

/* batches(shard text): one row per batch */
Datum
ps_batches(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	PsState		state;

	PS_READER("batches");
	name = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(name, PS_SHARD_READ, "batches");

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	read_state(name, &state);
	for (int i = 0; i < state.nbatches; i++)
	{
		const PsBatch *b = &state.batches[i];
		Datum		values[7];
		bool		nulls[7] = {0};

		values[0] = Int64GetDatum(b->lower);
		values[1] = Int64GetDatum(b->upper);
		values[2] = Int64GetDatum(b->since);
		values[3] = Int32GetDatum(b->nparts);
		values[4] = Int64GetDatum(ps_batch_updates(b));
		values[5] = Int64GetDatum(ps_batch_encoded_bytes(b));
		values[6] = BoolGetDatum(ps_batch_is_inline(b));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * Puts one (key, val, time, diff) row into a materialized SRF's result.
 * Its key and val are made as byteas in buf, which is reused row after
 * row (the tuplestore copies the row).
 */
static void
put_update(ReturnSetInfo *rsinfo, StringInfo buf, const PsUpdate *u,
		   int64 time, int64 diff)
{
	Datum		values[4];
	bool		nulls[4] = {0};
	uint32		val_at = MAXALIGN(VARHDRSZ + u->key_len);

	resetStringInfo(buf);
	enlargeStringInfo(buf, val_at + VARHDRSZ + u->val_len);
	SET_VARSIZE(buf->data, VARHDRSZ + u->key_len);
	memcpy(buf->data + VARHDRSZ, u->key, u->key_len);
	SET_VARSIZE(buf->data + val_at, VARHDRSZ + u->val_len);
	memcpy(buf->data + val_at + VARHDRSZ, u->val, u->val_len);
	values[0] = PointerGetDatum(buf->data);
	values[1] = PointerGetDatum(buf->data + val_at);
	values[2] = Int64GetDatum(time);
	values[3] = Int64GetDatum(diff);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * Streams the consolidated updates of [min_time, max_time] into the result,
 * times below time_floor advanced to it: summed per (key, val) with every
 * time out_time (by_time false), or per (key, val, time) (by_time true).
 */
void
ps_emit_consolidated(ReturnSetInfo *rsinfo, const char *shard, const PsState *state,
				  int64 min_time, int64 max_time, int64 time_floor, bool by_time,
				  int64 out_time)
{
	PsMerge    *m = ps_merge_begin(shard, state, min_time, max_time, true);
	StringInfoData buf;
	PsUpdate	u;

	initStringInfo(&buf);
	while (ps_merge_next_consolidated(m, by_time, time_floor, &u))
		put_update(rsinfo, &buf, &u, by_time ? u.time : out_time, u.diff);
	ps_merge_end(m);
	pfree(buf.data);
}

/* Streams the updates of a reader's step into the result. */
void
ps_emit_reader_step(ReturnSetInfo *rsinfo, PsReaderStep *step)
{
	StringInfoData buf;
	PsUpdate	u;

	initStringInfo(&buf);
	while (ps_reader_step_next(step, &u))
		put_update(rsinfo, &buf, &u, u.time, u.diff);
	pfree(buf.data);
}

/* snapshot(shard text, as_of bigint default null): the collection as of as_of */
Datum
ps_snapshot(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *shard;
	PsState		state;
	int64		as_of;

	PS_READER("snapshot");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_READ, "snapshot");

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	read_state(shard, &state);
	as_of = ps_snapshot_as_of(shard, &state, PG_ARGISNULL(1), PG_GETARG_INT64(1));
	ps_emit_consolidated(rsinfo, shard, &state, PG_INT64_MIN, as_of, PG_INT64_MIN,
					  false, as_of);
	SPI_finish();
	return (Datum) 0;
}

/* listen(shard text, as_of bigint, until bigint default null): as_of < time < until */
Datum
ps_listen(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *shard;
	int64		as_of;
	PsState		state;
	int64		min_time;
	int64		max_time;
	int64		time_floor;

	PS_READER("listen");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_READ, "listen");
	as_of = ps_int64_arg(fcinfo, 1, "as_of");

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	read_state(shard, &state);
	if (ps_listen_window(shard, &state, as_of, PG_ARGISNULL(2), PG_GETARG_INT64(2),
						 &min_time, &max_time, &time_floor))
		ps_emit_consolidated(rsinfo, shard, &state, min_time, max_time, time_floor,
						  true, 0);
	SPI_finish();
	return (Datum) 0;
}

/* compact(shard text) returns void */
Datum
ps_compact(PG_FUNCTION_ARGS)
{
	char	   *shard;

	PS_WRITER("compact");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_MAINTAIN, "compact");
	ps_require_writable(shard);

	SPI_connect();
	ps_shard_compact(shard);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * wait_upper(shard text, past bigint, timeout interval default null)
 * returns bigint: the shard's upper as soon as it passes past, woken by
 * the commit that moves it, or the current upper at the timeout.
 */
Datum
ps_wait_upper(PG_FUNCTION_ARGS)
{
	char	   *shard;
	int64		past;
	int64		timeout_ms = -1;

	PS_ANY_ROLE("wait_upper");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_USE, "wait_upper");
	past = ps_int64_arg(fcinfo, 1, "past");
	if (!PG_ARGISNULL(2))
		timeout_ms = ps_timeout_ms_arg(fcinfo, 2);
	PG_RETURN_INT64(ps_upper_wait(shard, past, timeout_ms));
}
