/*-------------------------------------------------------------------------
 *
 * verify.c
 *	  verify(shard): checks a shard's state against its parts and blob rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

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

/* Reports every part that is missing, corrupted, or unlike its description. */
static List *
check_parts(ReturnSetInfo *rsinfo, const char *shard, const PsState *s)
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
				report(rsinfo, problem);
			if (p->blob_key)
				referenced = lappend(referenced, p->blob_key);
			MemoryContextReset(part_cxt);
		}
	MemoryContextDelete(part_cxt);
	return referenced;
}

/* Orders C strings in a List. */
static int
cstring_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/* Reports blob rows of the shard that no part references. */
static void
check_orphans(ReturnSetInfo *rsinfo, const char *shard, List *referenced)
{
	List	   *stored = ps_blob_shard_keys(shard, true);
	ListCell   *lc;
	int			r = 0;

	list_sort(referenced, cstring_cmp);
	list_sort(stored, cstring_cmp);
	foreach(lc, stored)
	{
		const char *key = lfirst(lc);
		int			c = 1;

		while (r < list_length(referenced) &&
			   (c = strcmp(list_nth(referenced, r), key)) < 0)
			r++;
		if (c != 0)
			report(rsinfo, psprintf("blob row \"%s\" is not referenced by the state of shard \"%s\"",
									key, shard));
	}
}

/* verify(shard text) returns table(problem text); no rows means healthy */
Datum
ps_verify(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *shard;
	PsState		state;
	List	   *referenced;

	PS_READER("verify");
	shard = ps_shard_arg(fcinfo, 0);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	SPI_connect();
	ps_consensus_read_or_error(shard, &state, CurrentMemoryContext, true);
	check_tiling(rsinfo, &state);
	referenced = check_parts(rsinfo, shard, &state);
	check_orphans(rsinfo, shard, referenced);
	SPI_finish();
	return (Datum) 0;
}
