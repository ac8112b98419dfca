/*-------------------------------------------------------------------------
 *
 * consensus.c
 *	  The consensus table: one row per shard, changed only by compare-and-
 *	  swap on seqno, and the log of state diffs after each row's rollup.
 *
 * A shard's row holds its head seqno and a rollup: its whole state at some
 * seqno r <= head.  Every CaS moves the head from s to s + 1 and, in the
 * same transaction, either logs the diff s + 1 in consensus_diff or writes
 * the whole state as the new rollup and deletes the diffs it replaces.
 * The state at the head is the rollup with the diffs (r, head] applied in
 * order.  The row is the lock and the check of every CaS, as before; a
 * reader's snapshot sees a row and the diffs that were committed with it.
 * A read first looks at the row's seqno and xmin: if this process holds
 * the state of that row version (it wrote it or read it last), it takes
 * that copy instead of rebuilding the state (see state_cache.c).
 *
 * The sink's workers and the compactors commit without waiting for the WAL
 * flush (a sink worker's writers wait for it), so a read can see a state a
 * crash would undo.
 * Reads therefore wait for the flush of the commit that wrote what they
 * saw, except in a process that only reads to write (a sink worker, a
 * compactor): what it commits comes later in the WAL, and a crash that
 * undoes what it read undoes that too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/resowner.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "store/store.h"

/* Whether this process's reads wait for the flush of what they read */
static bool durable_reads = true;

/*
 * Makes this process's reads of states skip the wait for the WAL flush of
 * what they read: for a process whose reads only feed its own CaS.
 */
void
ps_consensus_skip_durable_wait(void)
{
	durable_reads = false;
}

/* The version of a shard's consensus row a read sees, and its lock. */
typedef struct RowVersion
{
	int64		seqno;
	TransactionId xmin;			/* the (sub)transaction that wrote it */
	TransactionId xmax;			/* one that deleted or locked it, or invalid */
	ItemPointerData tid;		/* where it is */
} RowVersion;

/* A look at a tuple's header, with its buffer share-locked */
typedef bool (*TupleLook) (HeapTuple tuple, Buffer buf, void *arg);

/*
 * Runs look on the consensus table's tuple at tid, its buffer
 * share-locked, and returns what it says; false if there is no tuple there.
 */
static bool
look_at_row_version(ItemPointer tid, TupleLook look, void *arg)
{
	Relation	rel;
	HeapTupleData tuple;
	Buffer		buf = InvalidBuffer;
	bool		said = false;

	if (!ItemPointerIsValid(tid))
		return false;
	rel = table_open(get_relname_relid("consensus", get_namespace_oid(PS_SCHEMA, false)),
					 AccessShareLock);
	tuple.t_self = *tid;
	if (heap_fetch(rel, SnapshotAny, &tuple, &buf, true))
	{
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		said = look(&tuple, buf, arg);
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	}
	if (BufferIsValid(buf))
		ReleaseBuffer(buf);
	table_close(rel, AccessShareLock);
	return said;
}

/* TupleLook: true if the tuple's xmin is hinted committed (or frozen). */
static bool
xmin_hinted_look(HeapTuple tuple, Buffer buf, void *arg)
{
	return HeapTupleHeaderXminCommitted(tuple->t_data);
}

/*
 * True if the row version at tid is known to be committed and flushed:
 * hinted committed, or frozen (both bits).  PostgreSQL hints an
 * asynchronous commit only once its commit record is flushed, and freezes
 * only what is long committed.  A frozen row's raw xmin says nothing: after
 * xid wraparound it may name a transaction whose commit log is gone.
 */
static bool
xmin_hinted(ItemPointer tid)
{
	return look_at_row_version(tid, xmin_hinted_look, NULL);
}

/*
 * TupleLook: true if a transaction other than this one that is still in
 * progress has locked or changed the tuple (as locking it would find:
 * HeapTupleSatisfiesUpdate); its xid goes to *arg, a TransactionId, unless
 * several hold it.
 */
static bool
held_look(HeapTuple tuple, Buffer buf, void *arg)
{
	if (HeapTupleSatisfiesUpdate(tuple, GetCurrentCommandId(false), buf) != TM_BeingModified)
		return false;
	if (!(tuple->t_data->t_infomask & HEAP_XMAX_IS_MULTI))
		*(TransactionId *) arg = HeapTupleHeaderGetRawXmax(tuple->t_data);
	return true;
}

/*
 * Waits until the commit of a row version a read saw (its xmin) is
 * flushed.  Cheap when it is: a synchronous commit has no LSN to wait for,
 * and XLogFlush returns at once below the flushed position.  A row version
 * hinted committed or frozen was flushed (xmin_hinted); an xmin older than
 * what the commit log still holds was flushed long ago; the log is read
 * under XactTruncationLock, as txid_status does, so that it is not
 * truncated meanwhile.
 */
static void
wait_durable(const RowVersion *v)
{
	XLogRecPtr	lsn = InvalidXLogRecPtr;
	TransactionId xmin = v->xmin;

	if (!durable_reads || RecoveryInProgress() || !TransactionIdIsNormal(xmin) ||
		xmin_hinted((ItemPointer) &v->tid))
		return;
	LWLockAcquire(XactTruncationLock, LW_SHARED);
	if (!TransactionIdPrecedes(xmin, ShmemVariableCache->oldestClogXid))
		lsn = TransactionIdGetCommitLSN(xmin);
	LWLockRelease(XactTruncationLock);
	if (!XLogRecPtrIsInvalid(lsn))
		XLogFlush(lsn);
}

/*
 * Where the WAL inserted so far ends.  GetXLogInsertRecPtr gives where the
 * next record starts, which at a page's start lies past the page header
 * that is not written yet: a flush cannot reach it.
 */
XLogRecPtr
ps_wal_inserted_end(void)
{
	XLogRecPtr	pos = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(pos, wal_segment_size) == SizeOfXLogLongPHD)
		return pos - SizeOfXLogLongPHD;
	if (pos % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		return pos - SizeOfXLogShortPHD;
	return pos;
}

/* Waits until the WAL of every commit a read can see is flushed. */
static void
wait_durable_all(void)
{
	if (durable_reads && !RecoveryInProgress())
		XLogFlush(ps_wal_inserted_end());
}

/* Decodes a shard's state, raising ERRCODE_DATA_CORRUPTED if it is damaged. */
void
ps_state_decode_or_error(const char *shard, const char *data, uint64 len,
						 PsState *state)
{
	const char *why = NULL;

	if (!ps_state_decode(data, len, state, &why))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is corrupted", shard),
				 errdetail("%s.", why)));
}

/*
 * How often a CaS writes the whole state (a rollup) instead of its diff:
 * when the state encodes to at most ROLLUP_SMALL_BYTES (it fits in the
 * row, a diff would save nothing), when ROLLUP_MAX_DIFFS diffs follow the
 * last rollup, or when the diffs since it would outweigh the state.  So a
 * read that rebuilds the state applies at most ROLLUP_MAX_DIFFS diffs of
 * at most the state's size in all, and a CaS writes on average at most its
 * diff twice plus 1/ROLLUP_MAX_DIFFS of the state.  The writers of a shard
 * keep its state in memory (state_cache.c), so a rebuild is what a process
 * does once after another one changed the shard, and the diffs can be
 * many: with 1024, a state of 500 kB costs half a kB per CaS in rollups.
 */
#define ROLLUP_SMALL_BYTES	1024
#define ROLLUP_MAX_DIFFS	1024

/*
 * Applies the logged diff that leads to seqno to state (in the current
 * memory context); raises ERRCODE_DATA_CORRUPTED if it does not fit.
 */
static void
apply_logged_diff(const char *shard, PsState *state, int64 seqno,
				  const bytea *diff)
{
	const char *why = NULL;

	if (!ps_state_diff_apply(state, VARDATA_ANY(diff), VARSIZE_ANY_EXHDR(diff), &why))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is corrupted", shard),
				 errdetail("Diff " INT64_FORMAT ": %s.", seqno, why)));
	state->diff_bytes += VARSIZE_ANY_EXHDR(diff);
}

/*
 * Rebuilds a shard's state from rows [first, end) of a result that joins
 * its consensus row with its diffs, in seqno order: columns col (head
 * seqno), col + 1 (rollup), then, if with_diffs, col + 2 and col + 3 (a
 * diff's seqno and bytes, NULL when there is none).  One statement reads
 * them all, so the row and its diffs come from one snapshot: a rollup
 * committed in between cannot take diffs away.  Allocates in dest; raises
 * ERRCODE_DATA_CORRUPTED for a damaged rollup or diff, or a missing diff.
 */
static void
rebuild_state(const char *shard, SPITupleTable *rows, uint64 first, uint64 end,
			  int col, bool with_diffs, PsState *state, MemoryContext dest)
{
	HeapTuple	head_row = rows->vals[first];
	bool		isnull;
	int64		head = DatumGetInt64(SPI_getbinval(head_row, rows->tupdesc, col, &isnull));
	Datum		d = SPI_getbinval(head_row, rows->tupdesc, col + 1, &isnull);
	MemoryContext old;
	bytea	   *rollup;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is missing", shard)));
	old = MemoryContextSwitchTo(dest);
	rollup = DatumGetByteaPP(d);
	ps_state_decode_or_error(shard, VARDATA_ANY(rollup), VARSIZE_ANY_EXHDR(rollup), state);
	state->rollup_seqno = state->seqno;
	state->diff_bytes = 0;
	if (state->seqno > head)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is corrupted", shard),
				 errdetail("Row seqno is " INT64_FORMAT ", state seqno is " INT64_FORMAT ".",
						   head, state->seqno)));
	for (uint64 i = first; with_diffs && i < end && state->seqno < head; i++)
	{
		int64		seqno = DatumGetInt64(SPI_getbinval(rows->vals[i], rows->tupdesc,
														col + 2, &isnull));
		bytea	   *diff;

		/* no diff, or one the rollup already holds */
		if (isnull || seqno <= state->seqno)
			continue;
		if (seqno != state->seqno + 1)
			break;
		diff = DatumGetByteaPP(SPI_getbinval(rows->vals[i], rows->tupdesc, col + 3, &isnull));
		apply_logged_diff(shard, state, seqno, diff);
	}
	if (state->seqno != head)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is corrupted", shard),
				 errdetail("Row seqno is " INT64_FORMAT ", and diff " INT64_FORMAT " is missing.",
						   head, state->seqno + 1)));
	MemoryContextSwitchTo(old);
}

/*
 * Rebuilds a shard's state into dest from its row: its rollup with every
 * diff after it applied.  Returns false if there is no such shard; the
 * xmin and place of the row version it read go to *seen.
 */
static bool
read_stored(const char *shard, PsState *state, MemoryContext dest,
			bool read_only, RowVersion *seen)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_no_log = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		with_diffs = ps_sql_objects_have(PS_OBJ_DIFF_LOG);
	SPITupleTable *rows;
	bool		isnull;

	values[0] = CStringGetTextDatum(shard);
	if (with_diffs)
		ps_spi_run(&plan,
				   "SELECT c.seqno, c.state, d.seqno, d.diff, c.xmin, c.ctid"
				   " FROM persist_sink.consensus c"
				   " LEFT JOIN persist_sink.consensus_diff d"
				   " ON d.shard OPERATOR(pg_catalog.=) c.shard"
				   " AND d.seqno OPERATOR(pg_catalog.<=) c.seqno"
				   " WHERE c.shard OPERATOR(pg_catalog.=) $1"
				   " ORDER BY d.seqno",
				   1, types, values, read_only);
	else
		ps_spi_run(&plan_no_log,
				   "SELECT seqno, state, xmin, ctid FROM persist_sink.consensus"
				   " WHERE shard OPERATOR(pg_catalog.=) $1",
				   1, types, values, read_only);
	if (SPI_processed == 0)
		return false;
	rows = SPI_tuptable;
	seen->xmin = DatumGetTransactionId(SPI_getbinval(rows->vals[0], rows->tupdesc,
													 with_diffs ? 5 : 3, &isnull));
	seen->tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(rows->vals[0], rows->tupdesc,
												   with_diffs ? 6 : 4, &isnull));
	rebuild_state(shard, rows, 0, SPI_processed, 1, with_diffs, state, dest);
	SPI_freetuptable(rows);
	return true;
}

/* The attribute number of column name of rel. */
static AttrNumber
column_of(Relation rel, const char *name)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped &&
			strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return (AttrNumber) (i + 1);
	elog(ERROR, "persist_sink.consensus has no column \"%s\"", name);
	return InvalidAttrNumber;	/* keep compiler quiet */
}

/*
 * read_row_version in the active snapshot, by a scan of the consensus
 * table's primary key (what the statement would do, without the cost of
 * one): the row version the snapshot sees.  Takes AccessShareLock on the
 * table, as the statement would.
 */
static bool
scan_row_version(const char *shard, RowVersion *v)
{
	Relation	rel = table_open(get_relname_relid("consensus",
												   get_namespace_oid(PS_SCHEMA, false)),
								 AccessShareLock);
	AttrNumber	shard_col = column_of(rel, "shard");
	AttrNumber	seqno_col = column_of(rel, "seqno");
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;
	bool		isnull;

	ScanKeyEntryInitialize(&key, 0, shard_col, BTEqualStrategyNumber, InvalidOid,
						   TupleDescAttr(RelationGetDescr(rel), shard_col - 1)->attcollation,
						   F_TEXTEQ, CStringGetTextDatum(shard));
	scan = systable_beginscan(rel, RelationGetPrimaryKeyIndex(rel), true,
							  GetActiveSnapshot(), 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		found = true;
		v->seqno = DatumGetInt64(heap_getattr(tuple, seqno_col,
											  RelationGetDescr(rel), &isnull));
		v->xmin = HeapTupleHeaderGetRawXmin(tuple->t_data);
		v->xmax = HeapTupleHeaderGetRawXmax(tuple->t_data);
		v->tid = tuple->t_self;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Reads the seqno, xmin and xmax of a shard's row; false if there is none.
 * A read-only read scans the table's key in the active snapshot; others
 * run the statement (in a snapshot of their own).
 */
static bool
read_row_version(const char *shard, RowVersion *v, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	HeapTuple	row;
	TupleDesc	desc;
	bool		isnull;

	if (read_only && ActiveSnapshotSet())
		return scan_row_version(shard, v);
	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "SELECT seqno, xmin, xmax, ctid FROM persist_sink.consensus"
			   " WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, read_only);
	if (SPI_processed == 0)
		return false;
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	v->seqno = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
	v->xmin = DatumGetTransactionId(SPI_getbinval(row, desc, 2, &isnull));
	v->xmax = DatumGetTransactionId(SPI_getbinval(row, desc, 3, &isnull));
	if (isnull)
		v->xmax = InvalidTransactionId;
	v->tid = *(ItemPointer) DatumGetPointer(SPI_getbinval(row, desc, 4, &isnull));
	return true;
}

/*
 * True if the diffs of shard's log in rows (seqno, xmin, diff; in seqno
 * order) lead from this process's copy of its state, at seqno c and
 * written by xmin x, to the row version v: the log holds diff c as x wrote
 * it (so the copy is of this history, not of a shard dropped since or of a
 * rolled-back CaS), every diff after it, and diff v->seqno as v's own
 * writer wrote it (not a change of the row made beside the CaS).
 */
static bool
diffs_follow_copy(SPITupleTable *rows, uint64 n, int64 c, TransactionId x,
				  const RowVersion *v)
{
	bool		isnull;

	if (n != (uint64) (v->seqno - c + 1))
		return false;
	for (uint64 i = 0; i < n; i++)
		if (DatumGetInt64(SPI_getbinval(rows->vals[i], rows->tupdesc, 1, &isnull)) !=
			c + (int64) i)
			return false;
	return DatumGetTransactionId(SPI_getbinval(rows->vals[0], rows->tupdesc, 2, &isnull)) == x &&
		DatumGetTransactionId(SPI_getbinval(rows->vals[n - 1], rows->tupdesc, 2, &isnull)) == v->xmin;
}

/*
 * Brings this process's copy of shard's state up to the row version v by
 * applying the diffs logged since the copy, into dest: a process that
 * follows another one's CaSes applies their few diffs instead of decoding
 * the rollup and every diff after it.  Returns false, with nothing read
 * into state, if there is no copy before v or the log does not lead from
 * it to v (diffs_follow_copy; a rollup since the copy, say).
 */
static bool
catch_up_copy(const char *shard, const RowVersion *v, PsState *state,
			  MemoryContext dest, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[3] = {TEXTOID, INT8OID, INT8OID};
	Datum		values[3];
	int64		c;
	TransactionId x;
	SPITupleTable *rows;
	uint64		n;
	MemoryContext old;
	bool		isnull;

	if (!ps_state_cache_version(shard, &c, &x) || c >= v->seqno ||
		!TransactionIdIsNormal(v->xmin) || !ps_sql_objects_have(PS_OBJ_DIFF_LOG))
		return false;
	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(c);
	values[2] = Int64GetDatum(v->seqno);
	ps_spi_run(&plan,
			   "SELECT seqno, xmin, diff FROM persist_sink.consensus_diff"
			   " WHERE shard OPERATOR(pg_catalog.=) $1"
			   " AND seqno OPERATOR(pg_catalog.>=) $2 AND seqno OPERATOR(pg_catalog.<=) $3"
			   " ORDER BY seqno",
			   3, types, values, read_only);
	rows = SPI_tuptable;
	n = SPI_processed;
	if (!diffs_follow_copy(rows, n, c, x, v) ||
		!ps_state_cache_get(shard, c, x, state, dest))
	{
		SPI_freetuptable(rows);
		return false;
	}
	old = MemoryContextSwitchTo(dest);
	for (uint64 i = 1; i < n; i++)
		apply_logged_diff(shard, state, c + (int64) i,
						  DatumGetByteaPP(SPI_getbinval(rows->vals[i], rows->tupdesc, 3, &isnull)));
	MemoryContextSwitchTo(old);
	SPI_freetuptable(rows);
	ereport(DEBUG1,
			(errmsg_internal("state of shard \"%s\" brought up from seqno " INT64_FORMAT
							 " to " INT64_FORMAT " with the diffs logged since",
							 shard, c, v->seqno)));
	return true;
}

/* Raises the error of a shard that does not exist. */
static void
raise_no_shard(const char *shard)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("shard \"%s\" does not exist", shard)));
}

/*
 * Reads the state at row version v of shard into dest, not from this
 * process's copy of it: from that copy brought up to v with the diffs
 * logged since, else rebuilt from the row; and keeps what it read.
 * Returns false if there is no such shard.
 */
static bool
read_uncached(const char *shard, RowVersion *v, PsState *state,
			  MemoryContext dest, bool read_only)
{
	if (!catch_up_copy(shard, v, state, dest, read_only) &&
		!read_stored(shard, state, dest, read_only, v))
		return false;
	ps_state_cache_put(shard, v->xmin, state);
	return true;
}

/*
 * Reads a shard's state into dest: this process's copy of the row version
 * the read sees, or that copy brought up to it with the diffs logged since,
 * or else the state rebuilt from the row; what it read is kept, and
 * returned once the commit that wrote it is flushed.  Returns false if
 * there is no such shard.
 */
bool
ps_consensus_read(const char *shard, PsState *state, MemoryContext dest,
				  bool read_only)
{
	RowVersion	v;

	if (!read_row_version(shard, &v, read_only))
		return false;
	if (!ps_state_cache_get(shard, v.seqno, v.xmin, state, dest) &&
		!read_uncached(shard, &v, state, dest, read_only))
		return false;
	wait_durable(&v);
	return true;
}

/*
 * As ps_consensus_read_or_error, read-only, for a reader that never
 * changes the state: this process's copy of the row version the read
 * sees is lent to it until dest is reset or deleted, instead of copied
 * (a lookup's state costs nothing once cached); else the state is read
 * into dest as ps_consensus_read does.
 */
const PsState *
ps_consensus_read_lent(const char *shard, MemoryContext dest)
{
	RowVersion	v;
	const PsState *lent;
	PsState    *state;

	if (!read_row_version(shard, &v, true))
		raise_no_shard(shard);
	if (!ps_state_cache_lend(shard, v.seqno, v.xmin, &lent, dest))
	{
		state = MemoryContextAllocZero(dest, sizeof(PsState));
		if (!read_uncached(shard, &v, state, dest, true))
			raise_no_shard(shard);
		lent = state;
	}
	wait_durable(&v);
	return lent;
}

/*
 * Reads a shard's state into dest from its row, never from memory (what
 * verify() checks), raising an error if the shard does not exist.
 */
void
ps_consensus_read_stored(const char *shard, PsState *state, MemoryContext dest,
						 bool read_only)
{
	RowVersion	v;

	if (!read_stored(shard, state, dest, read_only, &v))
		raise_no_shard(shard);
	wait_durable(&v);
}

/* Reads a shard's state, raising an error if the shard does not exist. */
void
ps_consensus_read_or_error(const char *shard, PsState *state,
						   MemoryContext dest, bool read_only)
{
	if (!ps_consensus_read(shard, state, dest, read_only))
		raise_no_shard(shard);
}

/* Encoded bytes as a bytea datum. */
static Datum
bytes_datum(const char *data, uint64 len)
{
	bytea	   *b;

	if (len > MaxAllocSize - VARHDRSZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("shard state would exceed 1GB")));
	b = palloc(VARHDRSZ + len);
	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	return PointerGetDatum(b);
}

/* Encodes a state as a bytea datum; its size goes to *len. */
static Datum
state_datum(const PsState *state, uint64 *len)
{
	char	   *data = ps_state_encode(state, len);
	Datum		d = bytes_datum(data, *len);

	pfree(data);
	return d;
}

/* Inserts a new shard's row; returns false if the shard already exists. */
bool
ps_consensus_insert(const char *shard, const PsState *state)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[3] = {TEXTOID, INT8OID, BYTEAOID};
	Datum		values[3];
	uint64		len;

	ps_state_cache_forget(shard);
	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(state->seqno);
	values[2] = state_datum(state, &len);
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.consensus (shard, seqno, state)"
			   " VALUES ($1, $2, $3) ON CONFLICT (shard) DO NOTHING",
			   3, types, values, false);
	return SPI_processed == 1;
}

/*
 * Moves the shard's head from expected_seqno to expected_seqno + 1, with
 * `rollup` as its new whole state (or keeping the row's rollup, if NULL),
 * if the head is still expected_seqno.  The row's lock is the CaS's.
 */
static bool
move_head(const char *shard, int64 expected_seqno, Datum *rollup)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr rollup_plan = NULL;
	Oid			types[4] = {TEXTOID, INT8OID, INT8OID, BYTEAOID};
	Datum		values[4];

	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(expected_seqno);
	values[2] = Int64GetDatum(expected_seqno + 1);
	if (rollup == NULL)
		ps_spi_run(&plan,
				   "UPDATE persist_sink.consensus SET seqno = $3"
				   " WHERE shard OPERATOR(pg_catalog.=) $1"
				   " AND seqno OPERATOR(pg_catalog.=) $2",
				   3, types, values, false);
	else
	{
		values[3] = *rollup;
		ps_spi_run(&rollup_plan,
				   "UPDATE persist_sink.consensus SET seqno = $3, state = $4"
				   " WHERE shard OPERATOR(pg_catalog.=) $1"
				   " AND seqno OPERATOR(pg_catalog.=) $2",
				   4, types, values, false);
	}
	return SPI_processed == 1;
}

/* Logs the diff that leads to the shard's state at seqno. */
static void
log_diff(const char *shard, int64 seqno, Datum diff)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[3] = {TEXTOID, INT8OID, BYTEAOID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(seqno);
	values[2] = diff;
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.consensus_diff (shard, seqno, diff)"
			   " VALUES ($1, $2, $3)",
			   3, types, values, false);
}

/* Deletes the shard's diffs up to seqno: a rollup at seqno holds them. */
static void
trim_diffs(const char *shard, int64 seqno)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2];

	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(seqno);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.consensus_diff"
			   " WHERE shard OPERATOR(pg_catalog.=) $1"
			   " AND seqno OPERATOR(pg_catalog.<=) $2",
			   2, types, values, false);
}

/*
 * The diff from `from` to `to` (palloc'd, its length in *len) if writing
 * it beats writing the whole state of full bytes (see ROLLUP_*), else NULL.
 */
static char *
diff_worth_writing(const PsState *from, const PsState *to, uint64 full,
				   uint64 *len)
{
	char	   *diff;

	if (full <= ROLLUP_SMALL_BYTES ||
		to->seqno - from->rollup_seqno >= ROLLUP_MAX_DIFFS ||
		!ps_sql_objects_have(PS_OBJ_DIFF_LOG))
		return NULL;
	diff = ps_state_diff_encode(from, to, len);
	if (from->diff_bytes + *len < full)
		return diff;
	pfree(diff);
	return NULL;
}

/*
 * Replaces a shard's state `from` (as read, at seqno s) by `to`, if the
 * shard's seqno is still s: to gets seqno s + 1.  Writes the diff from
 * `from` to `to`, or now and then the whole state (see ROLLUP_*).  Returns
 * true if it was swapped; the bytes written go to *state_bytes.
 */
bool
ps_consensus_cas(const char *shard, const PsState *from, PsState *to,
				 uint64 *state_bytes)
{
	uint64		len = 0;
	char	   *diff;
	Datum		d;
	bool		swapped;

	to->seqno = from->seqno + 1;
	diff = diff_worth_writing(from, to, ps_state_encoded_size(to), &len);
	if (diff)
	{
		d = bytes_datum(diff, len);
		pfree(diff);
		swapped = move_head(shard, from->seqno, NULL);
		if (swapped)
			log_diff(shard, to->seqno, d);
		to->rollup_seqno = from->rollup_seqno;
		to->diff_bytes = from->diff_bytes + len;
	}
	else
	{
		d = state_datum(to, &len);
		swapped = move_head(shard, from->seqno, &d);
		/* the diffs the new rollup holds go, if there are any */
		if (swapped && from->rollup_seqno < from->seqno)
			trim_diffs(shard, to->seqno);
		to->rollup_seqno = to->seqno;
		to->diff_bytes = 0;
	}
	/* the new row version's xmin is this (sub)transaction, which wrote it */
	if (swapped)
		ps_state_cache_put(shard, GetCurrentTransactionId(), to);
	pfree(DatumGetPointer(d));
	if (state_bytes)
		*state_bytes = len;
	return swapped;
}

/* Deletes a shard's row and its diffs; returns false if there was none. */
bool
ps_consensus_delete(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	static SPIPlanPtr log_plan = NULL;
	bool		found;

	ps_state_cache_forget(shard);
	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.consensus WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
	found = SPI_processed == 1;
	if (found && ps_sql_objects_have(PS_OBJ_DIFF_LOG))
		ps_spi_run(&log_plan,
				   "DELETE FROM persist_sink.consensus_diff"
				   " WHERE shard OPERATOR(pg_catalog.=) $1",
				   1, types, values, false);
	return found;
}

/*
 * Calls fn for every shard, in name order, with its state; each call's
 * allocations are freed after it.  Raises ERRCODE_DATA_CORRUPTED for a
 * damaged state.
 */
void
ps_consensus_foreach(PsStateVisitor fn, void *arg, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_no_log = NULL;
	MemoryContext row_cxt = AllocSetContextCreate(CurrentMemoryContext,
												  "persist_sink consensus scan",
												  ALLOCSET_DEFAULT_SIZES);
	bool		with_diffs = ps_sql_objects_have(PS_OBJ_DIFF_LOG);
	SPITupleTable *rows;
	uint64		nrows;
	uint64		end;

	if (with_diffs)
		ps_spi_run(&plan,
				   "SELECT c.shard, c.seqno, c.state, d.seqno, d.diff"
				   " FROM persist_sink.consensus c"
				   " LEFT JOIN persist_sink.consensus_diff d"
				   " ON d.shard OPERATOR(pg_catalog.=) c.shard"
				   " AND d.seqno OPERATOR(pg_catalog.<=) c.seqno"
				   " ORDER BY c.shard, d.seqno",
				   0, NULL, NULL, read_only);
	else
		ps_spi_run(&plan_no_log,
				   "SELECT shard, seqno, state FROM persist_sink.consensus ORDER BY shard",
				   0, NULL, NULL, read_only);
	rows = SPI_tuptable;
	nrows = SPI_processed;
	wait_durable_all();
	for (uint64 i = 0; i < nrows; i = end)
	{
		char	   *name = SPI_getvalue(rows->vals[i], rows->tupdesc, 1);
		MemoryContext old;
		PsState		state;

		/* the rows of this shard */
		for (end = i + 1; end < nrows; end++)
		{
			char	   *next = SPI_getvalue(rows->vals[end], rows->tupdesc, 1);
			bool		same = strcmp(next, name) == 0;

			pfree(next);
			if (!same)
				break;
		}
		rebuild_state(name, rows, i, end, 2, with_diffs, &state, row_cxt);
		old = MemoryContextSwitchTo(row_cxt);
		fn(name, &state, arg);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
		pfree(name);
	}
	MemoryContextDelete(row_cxt);
}

/* The names of every shard, allocated in dest. */
List *
ps_consensus_shards(MemoryContext dest, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	List	   *names = NIL;
	MemoryContext old;

	ps_spi_run(&plan, "SELECT shard FROM persist_sink.consensus", 0, NULL, NULL,
			   read_only);
	old = MemoryContextSwitchTo(dest);
	for (uint64 i = 0; i < SPI_processed; i++)
		names = lappend(names, SPI_getvalue(SPI_tuptable->vals[i],
											SPI_tuptable->tupdesc, 1));
	MemoryContextSwitchTo(old);
	return names;
}

/*
 * True if the current transaction has written, deleted or locked the
 * shard's consensus row (and so holds its row lock until it ends): the
 * row's xmin or xmax is this transaction.  (An xmax that is a multixact of
 * several share lockers is read as a transaction id, which at worst makes
 * a caller refuse a call it could have made.)
 */
bool
ps_consensus_held_here(const char *shard)
{
	RowVersion	v;

	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()) ||
		!read_row_version(shard, &v, true))
		return false;
	return (TransactionIdIsValid(v.xmin) &&
			TransactionIdIsCurrentTransactionId(v.xmin)) ||
		(TransactionIdIsValid(v.xmax) &&
		 TransactionIdIsCurrentTransactionId(v.xmax));
}

/*
 * Locks a shard's state row until the transaction ends, waiting for it if
 * another transaction holds it; a read after this sees the state no other
 * transaction can change.  False if there is no such shard.
 */
bool
ps_consensus_lock(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "SELECT 1 FROM persist_sink.consensus"
			   " WHERE shard OPERATOR(pg_catalog.=) $1 FOR UPDATE",
			   1, types, values, false);
	return SPI_processed == 1;
}

/*
 * True if a shard's state row could be locked right now, without waiting:
 * no other transaction in progress has locked or changed the version a
 * fresh snapshot sees (held_look).  False, with *holder set to the
 * transaction that holds the row (InvalidTransactionId if it cannot be
 * told), otherwise.  True also when there is no such shard (the CaS will
 * say so).  It only looks: it takes no lock, writes nothing and assigns no
 * xid.
 */
bool
ps_consensus_probe_lock(const char *shard, TransactionId *holder)
{
	RowVersion	v;

	*holder = InvalidTransactionId;
	if (!read_row_version(shard, &v, false))
		return true;
	return !look_at_row_version(&v.tid, held_look, holder);
}
