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
 * Parts in an object store (keys that are URLs, see blob.c) are listed the
 * same way, and so are those of a dropped shard (one row, of a negative
 * seqno that no state has).  An object has no snapshots: a reader that read
 * an older state may still read it after the row's commit.  So the
 * collector deletes a row's objects only once every snapshot of every
 * database sees the row (its xmin precedes the horizon VACUUM uses for
 * shared catalogs): from then on no transaction can read a state that
 * names them, exactly as no transaction can then see a deleted blob row.
 * A row not yet past the horizon is left for a later collection.  The
 * row's commit must also outlive a crash: merges commit without waiting
 * for the WAL flush (ps_worker_commit), and a crash before it would bring
 * back a state that names the objects.  So the collector flushes the WAL
 * inserted so far, which holds that commit, before it deletes them.
 *
 * An object under a store this database does not own (a part a copy of a
 * database inherited from the original, see objstore/store_owner.c) is never
 * deleted: its garbage row is dropped all the same, the object left where
 * it is, and a LOG line counts it.
 *
 * Locks: the collector takes garbage rows FOR UPDATE SKIP LOCKED, one at a
 * time, then deletes their blob rows; drop_shard() deletes the shard's
 * garbage rows before its blob rows, so both take them in that order and
 * neither waits for the other while holding a blob row.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "storage/procarray.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "base/base.h"
#include "store/store.h"

/* Most garbage rows one collection takes in one transaction */
#define COLLECT_ROWS		64

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

/*
 * Records the objects of shard, which the caller's transaction drops, as
 * garbage of no seqno a state can have (minus the transaction's id).
 */
void
ps_garbage_put_dropped(const char *shard, List *objects)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, TEXTARRAYOID};
	Datum		values[2];
	const char **keys;
	int			n = 0;
	ListCell   *lc;

	if (objects == NIL)
		return;
	keys = palloc(sizeof(char *) * list_length(objects));
	foreach(lc, objects)
		keys[n++] = lfirst(lc);
	values[0] = CStringGetTextDatum(shard);
	values[1] = text_array(keys, n);
	/* a shard of that name made and dropped again in this transaction adds to it */
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.garbage AS g (shard, seqno, keys)"
			   " VALUES ($1, OPERATOR(pg_catalog.-) pg_catalog.txid_current(), $2)"
			   " ON CONFLICT (shard, seqno) DO UPDATE"
			   " SET keys = g.keys OPERATOR(pg_catalog.||) EXCLUDED.keys",
			   2, types, values, false);
	pfree(keys);
}

/* A garbage row taken for deletion */
typedef struct GarbageRow
{
	char	   *shard;
	int64		seqno;
	Datum		keys;			/* text[], once the row is locked */
	TransactionId xmin;			/* the transaction that wrote it, likewise */
} GarbageRow;

/*
 * Lists up to COLLECT_ROWS garbage rows of shard (of every shard if NULL),
 * their shard and seqno only, locking none.
 */
static List *
list_rows(const char *shard)
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
				   "SELECT shard, seqno FROM persist_sink.garbage"
				   " WHERE shard OPERATOR(pg_catalog.=) $1 ORDER BY seqno"
				   " LIMIT " CppAsString2(COLLECT_ROWS),
				   1, types, values, true);
	}
	else
		ps_spi_run(&all_plan,
				   "SELECT shard, seqno FROM persist_sink.garbage"
				   " ORDER BY shard, seqno"
				   " LIMIT " CppAsString2(COLLECT_ROWS),
				   0, NULL, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		GarbageRow *row = palloc0(sizeof(GarbageRow));
		bool		isnull;

		row->shard = SPI_getvalue(tup, desc, 1);
		row->seqno = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		rows = lappend(rows, row);
	}
	return rows;
}

/*
 * Locks a listed garbage row until the transaction ends and reads its keys
 * and xmin; false if another transaction holds it or it is gone.
 */
static bool
lock_row(GarbageRow *row)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2];
	bool		isnull;

	values[0] = CStringGetTextDatum(row->shard);
	values[1] = Int64GetDatum(row->seqno);
	ps_spi_run(&plan,
			   "SELECT keys, xmin FROM persist_sink.garbage"
			   " WHERE shard OPERATOR(pg_catalog.=) $1"
			   " AND seqno OPERATOR(pg_catalog.=) $2"
			   " FOR UPDATE SKIP LOCKED",
			   2, types, values, false);
	if (SPI_processed == 0)
		return false;
	/* the result stays until SPI_finish */
	row->keys = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	row->xmin = DatumGetTransactionId(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 2,
													&isnull));
	return true;
}

/*
 * Deletes the objects a garbage row lists, if any (*deleted set), and
 * returns true; false, deleting nothing, while a snapshot may not see the
 * row yet.  The WAL of the row's commit is flushed first.
 */
static bool
delete_objects(const GarbageRow *row, bool *deleted)
{
	Datum	   *keys;
	int			n;
	bool		checked = false;
	int			left = 0;

	deconstruct_array(DatumGetArrayTypeP(row->keys), TEXTOID, -1, false,
					  TYPALIGN_INT, &keys, NULL, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *key = TextDatumGetCString(keys[i]);

		if (!ps_blob_is_object(key))
			continue;
		if (!checked)
		{
			if (!TransactionIdPrecedes(row->xmin, GetOldestNonRemovableTransactionId(NULL)))
				return false;

			/*
			 * Merges commit without waiting for the flush: a crash before it
			 * would bring back the state naming these objects, so flush the
			 * commit that listed them first.
			 */
			XLogFlush(ps_wal_inserted_end());
		}
		checked = true;
		if (ps_blob_delete(key))
			*deleted = true;
		else
			left++;
	}
	if (left > 0)
		ereport(LOG,
				(errmsg("persist_sink: %d objects listed as garbage of shard \"%s\" are left in their store, which is not this database's",
						left, row->shard),
				 errdetail("A database deletes only objects under a store whose owner marker names it; the garbage row is dropped.")));
	return true;
}

/*
 * Deletes the parts a garbage row lists (blob rows, and objects once no
 * snapshot can miss the row: *objects_deleted set), then the row.  False
 * if it left the row.
 */
static bool
delete_row(const GarbageRow *row, bool *objects_deleted)
{
	static SPIPlanPtr blob_plan = NULL;
	static SPIPlanPtr row_plan = NULL;
	Oid			blob_types[1] = {TEXTARRAYOID};
	Oid			row_types[2] = {TEXTOID, INT8OID};
	Datum		values[2];

	if (!delete_objects(row, objects_deleted))
		return false;
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
	return true;
}

/*
 * Deletes the parts listed by up to COLLECT_ROWS garbage rows of shard (of
 * every shard if NULL), and those rows, in the caller's transaction; rows
 * another transaction holds, and rows of objects a snapshot may still
 * need, are left (*held_back set).  Each row is locked only when its turn
 * comes, and the first whose objects were deleted (requests to the store,
 * which may take seconds) ends the call, so that its transaction does not
 * hold other rows meanwhile (drop_shard() waits for its shard's).  True if
 * rows may be left that could be taken now.
 */
bool
ps_garbage_collect(const char *shard, bool *held_back)
{
	List	   *rows = list_rows(shard);
	ListCell   *lc;
	bool		all = true;
	bool		objects_deleted = false;

	foreach(lc, rows)
	{
		if (!lock_row(lfirst(lc)))
			continue;
		all &= delete_row(lfirst(lc), &objects_deleted);
		if (objects_deleted)
			break;
	}
	if (!all)
		*held_back = true;
	return objects_deleted || (all && list_length(rows) == COLLECT_ROWS);
}

/* Lists the keys of the objects every garbage row holds (see object_leaks.c). */
List *
ps_garbage_all_objects(void)
{
	static SPIPlanPtr plan = NULL;
	List	   *objects = NIL;

	if (!ps_sql_objects_have(PS_OBJ_GARBAGE))
		return NIL;
	ps_spi_run(&plan,
			   "SELECT k FROM persist_sink.garbage, pg_catalog.unnest(keys) AS k"
			   " WHERE k OPERATOR(pg_catalog.^@) 's3://'",
			   0, NULL, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
		objects = lappend(objects, SPI_getvalue(SPI_tuptable->vals[i],
												SPI_tuptable->tupdesc, 1));
	return objects;
}

/* Lists the keys of objects the garbage rows of shard hold (see ps_shard_drop). */
List *
ps_garbage_shard_objects(const char *shard)
{
	List	   *objects = NIL;
	ListCell   *lc;

	foreach(lc, ps_garbage_shard_keys(shard, false))
		if (ps_blob_is_object(lfirst(lc)))
			objects = lappend(objects, lfirst(lc));
	return objects;
}

/* Lists the blob keys the garbage rows of shard hold, palloc'd in the caller's context. */
List *
ps_garbage_shard_keys(const char *shard, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	List	   *keys = NIL;

	if (!ps_sql_objects_have(PS_OBJ_GARBAGE))
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

	if (!ps_sql_objects_have(PS_OBJ_GARBAGE))
		return;
	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.garbage WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
}
