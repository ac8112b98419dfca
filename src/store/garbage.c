/*-------------------------------------------------------------------------
 *
 * garbage.c
 *	  The parts a background merge replaced, waiting to be deleted: one row
 *	  of the table persist_sink.garbage per merge, written in the merge's
 *	  transaction beside its CaS, and deleted with the parts' blob rows by a
 *	  compactor in a transaction of its own once the merge has committed.
 *
 * So a merge deletes nothing while it holds its shard's state row: the
 * row is held from the CaS to the commit, and deleting the blob rows of
 * many replaced parts there kept every append of the shard waiting.  The
 * garbage row is part of the merge's transaction, so a state and its
 * garbage are seen together: in any snapshot a blob row of the shard is
 * referenced by the state, or listed by a garbage row, or was never
 * committed.  A crash between the merge's commit and the deletion leaves
 * the row, which the next collection finds.
 *
 * Locks: the collector takes garbage rows FOR UPDATE SKIP LOCKED, then
 * deletes their blob rows; drop_shard() deletes the shard's garbage rows
 * before its blob rows, so both take them in that order and neither waits
 * for the other while holding a blob row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "base/base.h"
#include "store/store.h"

/* Most garbage rows one collection takes in one transaction */
#define COLLECT_ROWS		64

/* True if the garbage table exists (false while the SQL objects are 0.11 or older). */
bool
ps_garbage_table_exists(void)
{
	Oid			schema = get_namespace_oid(PS_SCHEMA, false);

	return OidIsValid(get_relname_relid("garbage", schema));
}

/* Makes a text[] of n C strings. */
static Datum
text_array(const char *const *strings, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(strings[i]);
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/*
 * Records the blob keys of the parts the merge that made seqno of shard
 * replaced, in the caller's transaction (the merge's, after its CaS).
 */
void
ps_garbage_put(const char *shard, int64 seqno, const char *const *keys, int n)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[3] = {TEXTOID, INT8OID, TEXTARRAYOID};
	Datum		values[3];

	if (n == 0)
		return;
	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(seqno);
	values[2] = text_array(keys, n);
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.garbage (shard, seqno, keys)"
			   " VALUES ($1, $2, $3)",
			   3, types, values, false);
}

/* A garbage row taken for deletion */
typedef struct GarbageRow
{
	char	   *shard;
	int64		seqno;
	Datum		keys;			/* text[] */
} GarbageRow;

/*
 * Takes up to COLLECT_ROWS garbage rows of shard (of every shard if NULL)
 * that no other transaction holds, locked until the transaction ends.
 */
static List *
take_rows(const char *shard)
{
	static SPIPlanPtr one_plan = NULL;
	static SPIPlanPtr all_plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	List	   *rows = NIL;

	if (shard)
	{
		values[0] = CStringGetTextDatum(shard);
		ps_spi_run(&one_plan,
				   "SELECT shard, seqno, keys FROM persist_sink.garbage"
				   " WHERE shard OPERATOR(pg_catalog.=) $1 ORDER BY seqno"
				   " LIMIT " CppAsString2(COLLECT_ROWS) " FOR UPDATE SKIP LOCKED",
				   1, types, values, false);
	}
	else
		ps_spi_run(&all_plan,
				   "SELECT shard, seqno, keys FROM persist_sink.garbage"
				   " ORDER BY shard, seqno"
				   " LIMIT " CppAsString2(COLLECT_ROWS) " FOR UPDATE SKIP LOCKED",
				   0, NULL, NULL, false);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		GarbageRow *row = palloc(sizeof(GarbageRow));
		bool		isnull;

		row->shard = SPI_getvalue(tup, desc, 1);
		row->seqno = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		/* the result stays until SPI_finish */
		row->keys = SPI_getbinval(tup, desc, 3, &isnull);
		rows = lappend(rows, row);
	}
	return rows;
}

/* Deletes the blob rows of the parts a garbage row lists, then the row. */
static void
delete_row(const GarbageRow *row)
{
	static SPIPlanPtr blob_plan = NULL;
	static SPIPlanPtr row_plan = NULL;
	Oid			blob_types[1] = {TEXTARRAYOID};
	Oid			row_types[2] = {TEXTOID, INT8OID};
	Datum		values[2];

	values[0] = row->keys;
	ps_spi_run(&blob_plan,
			   "DELETE FROM persist_sink.blob"
			   " WHERE key OPERATOR(pg_catalog.=) ANY ($1)",
			   1, blob_types, values, false);
	values[0] = CStringGetTextDatum(row->shard);
	values[1] = Int64GetDatum(row->seqno);
	ps_spi_run(&row_plan,
			   "DELETE FROM persist_sink.garbage"
			   " WHERE shard OPERATOR(pg_catalog.=) $1"
			   " AND seqno OPERATOR(pg_catalog.=) $2",
			   2, row_types, values, false);
}

/*
 * Deletes the parts listed by up to COLLECT_ROWS garbage rows of shard (of
 * every shard if NULL), and those rows, in the caller's transaction; rows
 * another transaction holds are left.  True if rows may be left to take.
 */
bool
ps_garbage_collect(const char *shard)
{
	List	   *rows = take_rows(shard);
	ListCell   *lc;

	foreach(lc, rows)
		delete_row(lfirst(lc));
	return list_length(rows) == COLLECT_ROWS;
}

/* Lists the blob keys the garbage rows of shard hold, palloc'd in the caller's context. */
List *
ps_garbage_shard_keys(const char *shard, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	List	   *keys = NIL;

	if (!ps_garbage_table_exists())
		return NIL;
	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "SELECT pg_catalog.unnest(keys) FROM persist_sink.garbage"
			   " WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, read_only);
	for (uint64 i = 0; i < SPI_processed; i++)
		keys = lappend(keys, SPI_getvalue(SPI_tuptable->vals[i],
										  SPI_tuptable->tupdesc, 1));
	return keys;
}

/* Deletes the garbage rows of shard (drop_shard() then deletes its blob rows). */
void
ps_garbage_delete_shard(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	if (!ps_garbage_table_exists())
		return;
	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.garbage WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}
