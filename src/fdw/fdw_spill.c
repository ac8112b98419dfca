/*-------------------------------------------------------------------------
 *
 * fdw_spill.c
 *	  The rows of a large INSERT or COPY into a shard's foreign table,
 *	  sorted on disk and read back as a stream of consolidated updates.
 *
 * A statement holds its rows in memory up to
 * persist_sink.table_write_memory (fdw_modify.c); past that they go into
 * a tuplesort of (key, val, diff) in the same memory, which spills to
 * temporary files.  Once sorted by (key, val) (bytea's order: the bytes,
 * shorter first on a tie, as the sink orders keys), the rows are read
 * back as a PsUpdateStream: equal (key, val) summed, zero sums dropped,
 * a slice at a time, so that the sink encodes and hands over the write a
 * part at a time (ps_sink_append_stream) and no more than a part of it is
 * ever in memory.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/stratnum.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/tuplesort.h"

#include "codec/diff_sum.h"
#include "fdw/fdw.h"
#include "shard/read.h"
#include "sql/sql.h"

/* Columns of the sorted rows */
#define SPILL_KEY	0
#define SPILL_VAL	1
#define SPILL_DIFF	2

/* An update read back, its key and val in a buffer of its own */
typedef struct HeldUpdate
{
	PsUpdate	u;
	StringInfoData bytes;
} HeldUpdate;

struct PsSpill
{
	PsUpdateStream stream;		/* first: the stream is the spill */
	Tuplesortstate *sort;
	TupleTableSlot *slot;
	MemoryContext cxt;			/* where the spill lives */
	MemoryContext row_cxt;
	bool		rereadable;
	bool		started;		/* read from since the last rewind */
	HeldUpdate	held[2];		/* the consolidated update not yet returned,
								 * and the row read ahead */
	HeldUpdate *cur;
	HeldUpdate *ahead;
	bool		have_cur;
	bool		have_ahead;
	PsUpdate   *slice;			/* what next() returned last */
	int			slice_cap;
	StringInfoData slice_bytes;
};

static bool spill_next(PsUpdateStream *s, uint64 max_raw, PsUpdateArrays *out);
static void spill_rewind(PsUpdateStream *s);

/*
 * Starts a spill sorting in work_mem_kb of memory, then on disk;
 * rereadable if its stream may be read twice (a keyed write's digest).
 */
PsSpill *
ps_spill_begin(int work_mem_kb, bool rereadable)
{
	PsSpill    *sp = palloc0(sizeof(PsSpill));
	TupleDesc	desc = CreateTemplateTupleDesc(3);
	AttrNumber	cols[2] = {SPILL_KEY + 1, SPILL_VAL + 1};
	Oid			less = get_opfamily_member(BYTEA_BTREE_FAM_OID, BYTEAOID, BYTEAOID,
										   BTLessStrategyNumber);
	Oid			ops[2] = {less, less};
	Oid			collations[2] = {InvalidOid, InvalidOid};
	bool		nulls_first[2] = {false, false};

	TupleDescInitEntry(desc, SPILL_KEY + 1, "key", BYTEAOID, -1, 0);
	TupleDescInitEntry(desc, SPILL_VAL + 1, "val", BYTEAOID, -1, 0);
	TupleDescInitEntry(desc, SPILL_DIFF + 1, "diff", INT8OID, -1, 0);
	sp->sort = tuplesort_begin_heap(desc, 2, cols, ops, collations, nulls_first,
									work_mem_kb, NULL,
									rereadable ? TUPLESORT_RANDOMACCESS : TUPLESORT_NONE);
	sp->slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	sp->cxt = CurrentMemoryContext;
	sp->row_cxt = AllocSetContextCreate(CurrentMemoryContext, "persist_sink spill row",
										ALLOCSET_SMALL_SIZES);
	sp->rereadable = rereadable;
	for (int i = 0; i < 2; i++)
		initStringInfo(&sp->held[i].bytes);
	sp->cur = &sp->held[0];
	sp->ahead = &sp->held[1];
	initStringInfo(&sp->slice_bytes);
	sp->stream.next = spill_next;
	sp->stream.rewind = spill_rewind;
	return sp;
}

/* Adds an update (its time is ignored) to the spill. */
void
ps_spill_add(PsSpill *sp, const PsUpdate *u)
{
	MemoryContext old = MemoryContextSwitchTo(sp->row_cxt);

	ExecClearTuple(sp->slot);
	sp->slot->tts_values[SPILL_KEY] = ps_bytea_datum(u->key, u->key_len);
	sp->slot->tts_values[SPILL_VAL] = ps_bytea_datum(u->val, u->val_len);
	sp->slot->tts_values[SPILL_DIFF] = Int64GetDatum(u->diff);
	memset(sp->slot->tts_isnull, false, sizeof(bool) * 3);
	ExecStoreVirtualTuple(sp->slot);
	tuplesort_puttupleslot(sp->sort, sp->slot);
	MemoryContextSwitchTo(old);
	MemoryContextReset(sp->row_cxt);
	sp->stream.n++;
}

/* Sorts what was added; returns the spill's stream of updates. */
PsUpdateStream *
ps_spill_sort(PsSpill *sp)
{
	tuplesort_performsort(sp->sort);
	return &sp->stream;
}

/* Frees the spill and its temporary files. */
void
ps_spill_end(PsSpill *sp)
{
	tuplesort_end(sp->sort);
	ExecDropSingleTupleTableSlot(sp->slot);
	MemoryContextDelete(sp->row_cxt);
}

/* Reads the next sorted row into sp->ahead; false at the end. */
static bool
fetch(PsSpill *sp)
{
	HeldUpdate *h = sp->ahead;
	bytea	   *key;
	bytea	   *val;

	if (!tuplesort_gettupleslot(sp->sort, true, false, sp->slot, NULL))
		return false;
	slot_getallattrs(sp->slot);
	key = DatumGetByteaPP(sp->slot->tts_values[SPILL_KEY]);
	val = DatumGetByteaPP(sp->slot->tts_values[SPILL_VAL]);
	resetStringInfo(&h->bytes);
	appendBinaryStringInfo(&h->bytes, VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key));
	appendBinaryStringInfo(&h->bytes, VARDATA_ANY(val), VARSIZE_ANY_EXHDR(val));
	h->u.key_len = VARSIZE_ANY_EXHDR(key);
	h->u.val_len = VARSIZE_ANY_EXHDR(val);
	h->u.key = h->bytes.data;
	h->u.val = h->bytes.data + h->u.key_len;
	h->u.time = 0;
	h->u.diff = DatumGetInt64(sp->slot->tts_values[SPILL_DIFF]);
	return true;
}

/*
 * Reads the next consolidated update into sp->cur: the rows of one
 * (key, val) summed; sums of zero are skipped.  False at the end.  A sum
 * past bigint refuses the write (22003), as append() does (codec/diff_sum.h).
 */
static bool
next_consolidated(PsSpill *sp)
{
	for (;;)
	{
		HeldUpdate *swap;
		PsDiffSum	sum;

		if (!sp->have_ahead && !fetch(sp))
			return false;
		swap = sp->cur;
		sp->cur = sp->ahead;
		sp->ahead = swap;
		sp->have_ahead = false;
		sum = ps_diff_sum_of(sp->cur->u.diff);
		while (fetch(sp))
		{
			if (ps_update_cmp_kv(&sp->cur->u, &sp->ahead->u) != 0)
			{
				sp->have_ahead = true;
				break;
			}
			ps_diff_sum_add(&sum, sp->ahead->u.diff);
		}
		if (!ps_diff_sum_fits(sum))
			ps_raise_write_diff_overflow(NULL, false);
		sp->cur->u.diff = ps_diff_sum_value(sum);
		if (sp->cur->u.diff != 0)
			return true;
	}
}

/* PsUpdateStream.next of a spill. */
static bool
spill_next(PsUpdateStream *s, uint64 max_raw, PsUpdateArrays *out)
{
	PsSpill    *sp = (PsSpill *) s;
	int			n = 0;
	uint64		raw = 0;

	sp->started = true;
	resetStringInfo(&sp->slice_bytes);
	for (;;)
	{
		PsUpdate   *u;

		if (!sp->have_cur && !(sp->have_cur = next_consolidated(sp)))
			break;
		if (n > 0 && raw + PS_UPDATE_RAW_SIZE(&sp->cur->u) > max_raw)
			break;
		if (n == sp->slice_cap)
		{
			sp->slice_cap = Max(sp->slice_cap * 2, 1024);
			sp->slice = sp->slice ? repalloc_huge(sp->slice, sizeof(PsUpdate) * sp->slice_cap) :
				MemoryContextAllocHuge(sp->cxt, sizeof(PsUpdate) * sp->slice_cap);
		}
		/* offsets into slice_bytes until it stops growing */
		u = &sp->slice[n++];
		*u = sp->cur->u;
		u->key = (const char *) (uintptr_t) sp->slice_bytes.len;
		appendBinaryStringInfo(&sp->slice_bytes, sp->cur->u.key, sp->cur->u.key_len);
		u->val = (const char *) (uintptr_t) sp->slice_bytes.len;
		appendBinaryStringInfo(&sp->slice_bytes, sp->cur->u.val, sp->cur->u.val_len);
		raw += PS_UPDATE_RAW_SIZE(u);
		sp->have_cur = false;
	}
	for (int i = 0; i < n; i++)
	{
		sp->slice[i].key = sp->slice_bytes.data + (uintptr_t) sp->slice[i].key;
		sp->slice[i].val = sp->slice_bytes.data + (uintptr_t) sp->slice[i].val;
	}
	out->updates = sp->slice;
	out->n = n;
	out->raw_bytes = raw;
	return n > 0;
}

/* PsUpdateStream.rewind of a spill: reads it again from the start. */
static void
spill_rewind(PsUpdateStream *s)
{
	PsSpill    *sp = (PsSpill *) s;

	if (!sp->started)
		return;
	if (!sp->rereadable)
		elog(ERROR, "a spill of a shard's foreign table was read twice");
	tuplesort_rescan(sp->sort);
	sp->started = false;
	sp->have_cur = false;
	sp->have_ahead = false;
}
