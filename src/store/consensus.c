/*-------------------------------------------------------------------------
 *
 * consensus.c
 *	  The consensus table: one row per shard, changed only by compare-and-
 *	  swap on seqno.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "utils/memutils.h"

#include "store/store.h"

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
 * Reads and decodes a shard's state into dest.  Returns false if there is
 * no such shard.
 */
bool
ps_consensus_read(const char *shard, PsState *state, MemoryContext dest,
				  bool read_only)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	int64		seqno;
	Datum		d;
	bytea	   *raw;
	MemoryContext old;

	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "SELECT seqno, state FROM persist_sink.consensus"
			   " WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, read_only);
	if (SPI_processed == 0)
		return false;
	seqno = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is missing", shard)));
	raw = DatumGetByteaPP(d);
	old = MemoryContextSwitchTo(dest);
	ps_state_decode_or_error(shard, VARDATA_ANY(raw), VARSIZE_ANY_EXHDR(raw), state);
	MemoryContextSwitchTo(old);
	if (state->seqno != seqno)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("state of shard \"%s\" is corrupted", shard),
				 errdetail("Row seqno is " INT64_FORMAT ", state seqno is " INT64_FORMAT ".",
						   seqno, state->seqno)));
	SPI_freetuptable(SPI_tuptable);
	return true;
}

/* Reads a shard's state, raising an error if the shard does not exist. */
void
ps_consensus_read_or_error(const char *shard, PsState *state,
						   MemoryContext dest, bool read_only)
{
	if (!ps_consensus_read(shard, state, dest, read_only))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("shard \"%s\" does not exist", shard)));
}

/* Encodes a state as a bytea datum. */
static Datum
state_datum(const PsState *state, uint64 *state_bytes)
{
	uint64		len;
	char	   *data = ps_state_encode(state, &len);
	bytea	   *b;

	if (len > MaxAllocSize - VARHDRSZ)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("shard state would exceed 1GB")));
	b = palloc(VARHDRSZ + len);
	SET_VARSIZE(b, VARHDRSZ + len);
	memcpy(VARDATA(b), data, len);
	pfree(data);
	if (state_bytes)
		*state_bytes = len;
	return PointerGetDatum(b);
}

/* Inserts a new shard's row; returns false if the shard already exists. */
bool
ps_consensus_insert(const char *shard, const PsState *state)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[3] = {TEXTOID, INT8OID, BYTEAOID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(state->seqno);
	values[2] = state_datum(state, NULL);
	ps_spi_run(&plan,
			   "INSERT INTO persist_sink.consensus (shard, seqno, state)"
			   " VALUES ($1, $2, $3) ON CONFLICT (shard) DO NOTHING",
			   3, types, values, false);
	return SPI_processed == 1;
}

/*
 * Replaces a shard's state if its seqno is still expected_seqno.  The new
 * state gets seqno expected_seqno + 1.  Returns true if it was swapped; the
 * encoded size goes to *state_bytes.
 */
bool
ps_consensus_cas(const char *shard, int64 expected_seqno, PsState *state,
				 uint64 *state_bytes)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[4] = {TEXTOID, INT8OID, INT8OID, BYTEAOID};
	Datum		values[4];

	state->seqno = expected_seqno + 1;
	values[0] = CStringGetTextDatum(shard);
	values[1] = Int64GetDatum(expected_seqno);
	values[2] = Int64GetDatum(state->seqno);
	values[3] = state_datum(state, state_bytes);
	ps_spi_run(&plan,
			   "UPDATE persist_sink.consensus SET seqno = $3, state = $4"
			   " WHERE shard OPERATOR(pg_catalog.=) $1"
			   " AND seqno OPERATOR(pg_catalog.=) $2",
			   4, types, values, false);
	pfree(DatumGetPointer(values[3]));
	return SPI_processed == 1;
}

/* Deletes a shard's row; returns false if there was none. */
bool
ps_consensus_delete(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "DELETE FROM persist_sink.consensus WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, false);
	return SPI_processed == 1;
}

/*
 * Calls fn for every shard, in name order, with its decoded state; each
 * call's allocations are freed after it.  Raises ERRCODE_DATA_CORRUPTED for
 * a damaged state.
 */
void
ps_consensus_foreach(PsStateVisitor fn, void *arg, bool read_only)
{
	static SPIPlanPtr plan = NULL;
	MemoryContext row_cxt = AllocSetContextCreate(CurrentMemoryContext,
												  "persist_sink consensus scan",
												  ALLOCSET_DEFAULT_SIZES);

	ps_spi_run(&plan,
			   "SELECT shard, state FROM persist_sink.consensus ORDER BY shard",
			   0, NULL, NULL, read_only);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;
		char	   *name = SPI_getvalue(tup, SPI_tuptable->tupdesc, 1);
		Datum		d = SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull);
		MemoryContext old = MemoryContextSwitchTo(row_cxt);
		bytea	   *raw;
		PsState		state;

		if (isnull)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("state of shard \"%s\" is missing", name)));
		raw = DatumGetByteaPP(d);
		ps_state_decode_or_error(name, VARDATA_ANY(raw), VARSIZE_ANY_EXHDR(raw), &state);
		fn(name, &state, arg);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row_cxt);
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
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		mine = false;

	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return false;
	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "SELECT xmin, xmax FROM persist_sink.consensus"
			   " WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, true);
	for (int col = 1; col <= 2 && SPI_processed == 1 && !mine; col++)
	{
		bool		isnull;
		Datum		xid = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										col, &isnull);

		mine = !isnull && TransactionIdIsValid(DatumGetTransactionId(xid)) &&
			TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xid));
	}
	return mine;
}

/* The transaction in the xmax of a shard's state row, if a plain one. */
static TransactionId
row_holder(const char *shard)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	TransactionId xmax = InvalidTransactionId;

	values[0] = CStringGetTextDatum(shard);
	ps_spi_run(&plan,
			   "SELECT xmax FROM persist_sink.consensus WHERE shard OPERATOR(pg_catalog.=) $1",
			   1, types, values, true);
	if (SPI_processed == 1)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  1, &isnull);

		if (!isnull)
			xmax = DatumGetTransactionId(d);
	}
	return xmax;
}

/*
 * True if a shard's state row could be locked right now, without waiting;
 * the lock is not kept.  False, with *holder set to the transaction that
 * holds the row (InvalidTransactionId if it cannot be told), if another
 * transaction has it locked or changed.  True also when there is no such
 * shard (the CaS will say so).  The attempt runs in a subtransaction that
 * is rolled back, so the caller's transaction stays as it was.
 */
bool
ps_consensus_probe_lock(const char *shard, TransactionId *holder)
{
	static SPIPlanPtr plan = NULL;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	volatile bool free = true;

	values[0] = CStringGetTextDatum(shard);
	*holder = InvalidTransactionId;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		ps_spi_run(&plan,
				   "SELECT 1 FROM persist_sink.consensus"
				   " WHERE shard OPERATOR(pg_catalog.=) $1 FOR UPDATE NOWAIT",
				   1, types, values, false);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		free = false;
	}
	PG_END_TRY();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	if (!free)
		*holder = row_holder(shard);
	return free;
}
