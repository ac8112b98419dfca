/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  verify(shard): checks a shard's state against its parts and blob rows,
 *	  and finds the (key, val)s whose sums of diffs leave bigint.  Parts in
 *	  another database's object store (a copy's inherited parts) are read
 *	  and checked, and said to be that database's in a NOTICE, not a row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "codec/diff_sum.h"
#include "codec/part.h"
#include "shard/read.h"
#include "sql/sql.h"
#include "store/store.h"

PG_FUNCTION_INFO_V1(ps_verify);

/* Adds one problem row. */
static void
report(ReturnSetInfo *rsinfo, const char *problem)
{
	Datum		value = CStringGetTextDatum(problem);
	bool		isnull = false;

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
}

/* Reports batches that do not tile [0, upper) or break since <= upper. */
static void
check_tiling(ReturnSetInfo *rsinfo, const PsState *s)
{
	int64		expect = 0;

	if (s->since < 0 || s->since > s->upper)
		report(rsinfo, psprintf("since " INT64_FORMAT " is outside [0, upper " INT64_FORMAT "]",
								s->since, s->upper));
	for (int i = 0; i < s->nbatches; i++)
	{
		const PsBatch *b = &s->batches[i];

		if (b->lower != expect || b->upper <= b->lower)
			report(rsinfo, psprintf("batch %d [" INT64_FORMAT ", " INT64_FORMAT ") does not follow the previous batch, which ends at " INT64_FORMAT,
									i + 1, b->lower, b->upper, expect));
		expect = b->upper;
	}
	if (expect != s->upper)
		report(rsinfo, psprintf("batches end at " INT64_FORMAT ", but upper is " INT64_FORMAT,
								expect, s->upper));
}

/*
 * Reports every part that is missing, corrupted, or unlike its description;
 * *broken is set if there is one.
 */
static List *
check_parts(ReturnSetInfo *rsinfo, const char *shard, const PsState *s,
			bool *broken)
{
	MemoryContext part_cxt = AllocSetContextCreate(CurrentMemoryContext,
												   "persist_sink verify",
												   ALLOCSET_DEFAULT_SIZES);
	List	   *referenced = NIL;

	for (int i = 0; i < s->nbatches; i++)
		for (int j = 0; j < s->batches[i].nparts; j++)
		{
			const PsPart *p = &s->batches[i].parts[j];
			MemoryContext old = MemoryContextSwitchTo(part_cxt);
			PsDecodedPart decoded;
			char	   *problem = ps_part_problem(shard, p, true, &decoded);

			MemoryContextSwitchTo(old);
			if (problem)
			{
				report(rsinfo, problem);
				*broken = true;
			}
			if (p->blob_key)
				referenced = lappend(referenced, p->blob_key);
			MemoryContextReset(part_cxt);
		}
	MemoryContextDelete(part_cxt);
	return referenced;
}

/*
 * Reports blob rows of the shard, and objects under its object store
 * (store, NULL if none), that no part references and no garbage row lists
 * (a merge's replaced parts wait there for their deletion), and garbage
 * that the state still references.  An object an append has put but not
 * yet committed is reported too: it is not referenced yet.
 */
static void
check_orphans(ReturnSetInfo *rsinfo, const char *shard, const char *store,
			  List *referenced)
{
	List	   *stored = ps_blob_shard_keys(shard, true);
	List	   *garbage = ps_garbage_shard_keys(shard, true);
	ListCell   *lc;

	if (store)
		stored = list_concat(stored, ps_blob_store_keys(store, shard));
	ps_blob_keys_sort(referenced);
	ps_blob_keys_sort(garbage);
	foreach(lc, garbage)
		if (ps_blob_keys_have(referenced, lfirst(lc)))
			report(rsinfo, psprintf("%s \"%s\" is listed as garbage but referenced by the state of shard \"%s\"",
									ps_blob_is_object(lfirst(lc)) ? "object" : "blob row",
									(char *) lfirst(lc), shard));
	foreach(lc, stored)
	{
		const char *key = lfirst(lc);

		if (!ps_blob_keys_have(referenced, key) && !ps_blob_keys_have(garbage, key))
			report(rsinfo, psprintf("%s \"%s\" is not referenced by the state of shard \"%s\"",
									ps_blob_is_object(key) ? "object" : "blob row",
									key, shard));
	}
}

/*
 * The diffs of one (key, val) being summed in time order (times below since
 * advanced to since), to find where its sums leave bigint.
 */
typedef struct SumCheck
{
	ReturnSetInfo *rsinfo;
	const char *shard;
	const PsState *state;
	MemoryContext cxt;			/* the copies of key and val */
	bool		started;
	PsUpdate	kv;				/* key and val (copies) */
	int64		time;			/* the time being summed */
	PsDiffSum		at_time;		/* sum of the diffs at time */
	PsDiffSum		total;			/* sum of the diffs up to time */
	bool		out;			/* total left bigint at out_from */
	int64		out_from;
} SumCheck;

/* Reports that the (key, val)'s snapshots as of [from, to] leave bigint. */
static void
report_snapshot_sum(SumCheck *c, int64 from, int64 to)
{
	char	   *key = ps_bytes_for_message(c->kv.key, c->kv.key_len);
	char	   *val = ps_bytes_for_message(c->kv.val, c->kv.val_len);

	to = Min(to, c->state->upper - 1);
	if (from > to)
		return;
	if (from == to)
		report(c->rsinfo, psprintf("sum of diffs of key %s and val %s in shard \"%s\" leaves bigint as of " INT64_FORMAT,
								   key, val, c->shard, from));
	else
		report(c->rsinfo, psprintf("sum of diffs of key %s and val %s in shard \"%s\" leaves bigint as of " INT64_FORMAT " to " INT64_FORMAT,
								   key, val, c->shard, from, to));
}

/*
 * Ends the diffs at c->time: reports a sum at that time that leaves bigint
 * (listen sums per time; times up to since cannot be listened to), and
 * where the running sum, which snapshots see, leaves bigint or comes back.
 */
static void
end_time(SumCheck *c)
{
	bool		out;

	if (c->time > c->state->since && !ps_diff_sum_fits(c->at_time))
		report(c->rsinfo, psprintf("sum of diffs of key %s and val %s in shard \"%s\" leaves bigint at time " INT64_FORMAT,
								   ps_bytes_for_message(c->kv.key, c->kv.key_len),
								   ps_bytes_for_message(c->kv.val, c->kv.val_len),
								   c->shard, c->time));
	out = !ps_diff_sum_fits(c->total);
	if (out && !c->out)
		c->out_from = c->time;
	else if (!out && c->out)
		report_snapshot_sum(c, c->out_from, c->time - 1);
	c->out = out;
	c->at_time = ps_diff_sum_of(0);
}

/* Ends a (key, val): its running sum may still be out of range at upper. */
static void
end_kv(SumCheck *c)
{
	end_time(c);
	if (c->out)
		report_snapshot_sum(c, c->out_from, c->state->upper - 1);
}

/* Starts summing the (key, val) of u at time t. */
static void
start_kv(SumCheck *c, const PsUpdate *u, int64 t)
{
	char	   *bytes;

	MemoryContextReset(c->cxt);
	bytes = MemoryContextAlloc(c->cxt, (Size) u->key_len + u->val_len + 1);
	memcpy(bytes, u->key, u->key_len);
	memcpy(bytes + u->key_len, u->val, u->val_len);
	c->kv = *u;
	c->kv.key = bytes;
	c->kv.val = bytes + u->key_len;
	c->time = t;
	c->at_time = ps_diff_sum_of(0);
	c->total = ps_diff_sum_of(0);
	c->out = false;
	c->started = true;
}

/*
 * Reports every (key, val) whose sum of diffs leaves bigint where a read
 * sums it: as of which times snapshots fail, and at which time a listen
 * does.  The parts must all load.
 */
static void
check_sums(ReturnSetInfo *rsinfo, const char *shard, const PsState *s)
{
	PsMerge    *m = ps_merge_begin(shard, s, PG_INT64_MIN, PG_INT64_MAX, true);
	SumCheck	c = {0};
	PsUpdate	u;

	c.rsinfo = rsinfo;
	c.shard = shard;
	c.state = s;
	c.cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink verify sums",
								  ALLOCSET_SMALL_SIZES);
	while (ps_merge_next(m, &u))
	{
		int64		t = Max(u.time, s->since);

		CHECK_FOR_INTERRUPTS();
		if (!c.started || ps_update_cmp_kv(&c.kv, &u) != 0)
		{
			if (c.started)
				end_kv(&c);
			start_kv(&c, &u, t);
		}
		else if (t != c.time)
		{
			end_time(&c);
			c.time = t;
		}
		ps_diff_sum_add(&c.at_time, u.diff);
		ps_diff_sum_add(&c.total, u.diff);
	}
	if (c.started)
		end_kv(&c);
	ps_merge_end(m);
	MemoryContextDelete(c.cxt);
}

/*
 * The store whose objects check_orphans lists for shard: its state's store
 * if this database owns it, else NULL.  A store of another database (a
 * copy of a database inherited the shard's parts) is said once, in a
 * NOTICE: its parts are read here, never deleted here, and other objects
 * under it are the other database's, not leaks of this one.
 */
static const char *
store_to_list(const char *shard, const char *store)
{
	char	   *other;

	if (store == NULL || ps_store_owner(store, &other) != PS_STORE_OTHERS)
		return store;
	ereport(NOTICE,
			(errmsg("the parts of shard \"%s\" are in object store %s, which belongs to another database",
					shard, store),
			 errdetail("Its owner marker names %s.  This database reads those objects but never deletes them, and does not look for objects there that no state names.",
					   other)));
	return NULL;
}

/* verify(shard text) returns table(problem text); no rows means healthy */
Datum
ps_verify(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *shard;
	PsState		state;
	List	   *referenced;
	bool		broken = false;

	PS_READER("verify");
	shard = ps_shard_arg(fcinfo, 0);
	ps_require_shard_right(shard, PS_SHARD_READ, "verify");

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	SPI_connect();
	ps_consensus_read_stored(shard, &state, CurrentMemoryContext, true);
	check_tiling(rsinfo, &state);
	referenced = check_parts(rsinfo, shard, &state, &broken);
	check_orphans(rsinfo, shard, store_to_list(shard, state.blob_store),
				  referenced);
	if (!broken)
		check_sums(rsinfo, shard, &state);
	SPI_finish();
	return (Datum) 0;
}
