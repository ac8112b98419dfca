/*-------------------------------------------------------------------------
 *
 * fdw_table.c
 *	  A shard's foreign table: its options, what each of its columns holds,
 *	  and rows turned into updates and back.
 *
 * A table of an untyped shard has a column key and optionally val (bytea
 * or text: the bytes of the text), diff and time (bigint).  A table of a
 * typed shard has the fields of the shard's row type, each under its own
 * name and of its own type (or, for a scalar row type, one column of it),
 * and optionally diff and time.  A row is stored as append_rows stores it:
 * the key is the row's binary send form, the val empty.  diff is 1 unless
 * given (or NULL); time is the sink's to choose, and reads as the snapshot's time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/typcache.h"

#include "base/settings.h"
#include "fdw/fdw.h"
#include "shard/read.h"
#include "sql/sql.h"

/* Raises an error about column attnum of rel: it cannot be bound (why). */
static void
raise_column(Relation rel, int attnum, const char *shard, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_COLUMN_NAME),
			 errmsg("column \"%s\" of foreign table \"%s\" does not match shard \"%s\"",
					NameStr(TupleDescAttr(RelationGetDescr(rel), attnum)->attname),
					RelationGetRelationName(rel), shard),
			 errdetail("%s", why)));
}

/*
 * Reads a foreign table's options into t: its shard (checked by the
 * validator when it was set) and, if given, the time it is read as of.
 */
void
ps_fdw_table_options(Oid relid, PsShardTable *t)
{
	ForeignTable *ft = GetForeignTable(relid);
	ListCell   *lc;

	t->shard = NULL;
	t->has_as_of = false;
	t->as_of = 0;
	foreach(lc, ft->options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (strcmp(def->defname, "shard") == 0)
			t->shard = defGetString(def);
		else if (strcmp(def->defname, "as_of") == 0)
		{
			t->has_as_of = true;
			t->as_of = pg_strtoint64(defGetString(def));
		}
	}
	if (t->shard == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("foreign table \"%s\" has no option shard", get_rel_name(relid))));
}

/* True if column att is named name. */
static bool
named(Form_pg_attribute att, const char *name)
{
	return strcmp(NameStr(att->attname), name) == 0;
}

/* The field of row type desc named like att, or -1. */
static int
field_named(TupleDesc desc, Form_pg_attribute att)
{
	for (int i = 0; desc && i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped &&
			named(TupleDescAttr(desc, i), NameStr(att->attname)))
			return i;
	return -1;
}

/* Binds column i of rel as diff or time (bigint); false if it is neither. */
static bool
bind_diff_or_time(PsShardTable *t, Relation rel, int i)
{
	Form_pg_attribute att = TupleDescAttr(t->desc, i);

	if (!named(att, "diff") && !named(att, "time"))
		return false;
	if (att->atttypid != INT8OID)
		raise_column(rel, i, t->shard, "Columns diff and time are of type bigint.");
	t->kind[i] = named(att, "diff") ? PS_COLUMN_DIFF : PS_COLUMN_TIME;
	t->has_diff |= t->kind[i] == PS_COLUMN_DIFF;
	return true;
}

/* Binds the columns of a table of an untyped shard. */
static void
bind_untyped(PsShardTable *t, Relation rel)
{
	for (int i = 0; i < t->desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(t->desc, i);

		if (att->attisdropped || bind_diff_or_time(t, rel, i))
			continue;
		if (!named(att, "key") && !named(att, "val"))
			raise_column(rel, i, t->shard,
						 "A table of an untyped shard has columns key and val (bytea or text) and, if wanted, diff and time (bigint).");
		if (att->atttypid != BYTEAOID && att->atttypid != TEXTOID)
			raise_column(rel, i, t->shard, "Columns key and val are of type bytea or text.");
		t->kind[i] = named(att, "key") ? PS_COLUMN_KEY : PS_COLUMN_VAL;
		if (t->kind[i] == PS_COLUMN_KEY)
			t->key_column = i;
	}
	if (t->key_column < 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_COLUMN_NAME_NOT_FOUND),
				 errmsg("foreign table \"%s\" has no column key", RelationGetRelationName(rel)),
				 errdetail("A table of an untyped shard has columns key and val (bytea or text) and, if wanted, diff and time (bigint).")));
}

static void bind_table(PsShardTable *t, Relation rel, const PsState *state);

/* Binds the columns of a table of a typed shard to its row type's fields. */
static void
bind_typed(PsShardTable *t, Relation rel)
{
	int			bound = 0;
	int			fields = 0;

	for (int i = 0; i < t->desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(t->desc, i);
		int			f = field_named(t->row_desc, att);

		if (att->attisdropped || (f < 0 && bind_diff_or_time(t, rel, i)))
			continue;
		if (!t->composite)
		{
			if (bound > 0 || att->atttypid != t->row_type)
				raise_column(rel, i, t->shard,
							 psprintf("A table of a shard of rows of type %s has one column of that type and, if wanted, diff and time (bigint).",
									  format_type_be(t->row_type)));
			t->kind[i] = PS_COLUMN_ROW;
			bound++;
			continue;
		}
		if (f < 0 || att->atttypid != TupleDescAttr(t->row_desc, f)->atttypid)
			raise_column(rel, i, t->shard,
						 psprintf("A table of a shard of rows of type %s has the fields of that type, each under its name and of its type, and, if wanted, diff and time (bigint).",
								  format_type_be(t->row_type)));
		t->kind[i] = PS_COLUMN_FIELD;
		t->field[i] = f;
		bound++;
	}
	for (int f = 0; t->composite && f < t->row_desc->natts; f++)
		fields += TupleDescAttr(t->row_desc, f)->attisdropped ? 0 : 1;
	if (bound != (t->composite ? fields : 1))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_COLUMN_NAME_NOT_FOUND),
				 errmsg("foreign table \"%s\" lacks fields of the rows of shard \"%s\"",
						RelationGetRelationName(rel), t->shard),
				 errdetail("The shard holds rows of type %s; the table needs a column for each of its fields.",
						   format_type_be(t->row_type))));
}

/*
 * Binds the columns of rel, a foreign table of t->shard (options read), to
 * the shard as its state describes it, allocating in cxt: raises an error
 * naming the first column that does not fit.
 */
void
ps_fdw_table_bind(PsShardTable *t, Relation rel, const PsState *state,
				  MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);

	bind_table(t, rel, state);
	t->row_bytes = NULL;
	t->unused = NULL;
	t->needs_row = OidIsValid(t->row_type);
	MemoryContextSwitchTo(old);
}

/* ps_fdw_table_bind, in the current memory context. */
static void
bind_table(PsShardTable *t, Relation rel, const PsState *state)
{
	int			natts = RelationGetDescr(rel)->natts;

	t->desc = CreateTupleDescCopy(RelationGetDescr(rel));
	t->kind = palloc0(sizeof(PsColumnKind) * Max(natts, 1));
	t->field = palloc0(sizeof(int) * Max(natts, 1));
	t->key_column = -1;
	t->has_diff = false;
	t->row_type = InvalidOid;
	t->row_desc = NULL;
	t->composite = false;
	if (state->row_type == NULL)
	{
		bind_untyped(t, rel);
		return;
	}
	{
		int32		typmod;
		Oid			send;
		Oid			recv;
		bool		varlena;

		parseTypeString(state->row_type, &t->row_type, &typmod, false);
		t->composite = type_is_rowtype(t->row_type);
		if (t->composite)
		{
			t->row_desc = lookup_rowtype_tupdesc_copy(t->row_type, -1);
			t->fields = palloc(sizeof(Datum) * t->row_desc->natts);
			t->field_nulls = palloc(sizeof(bool) * t->row_desc->natts);
		}
		getTypeBinaryOutputInfo(t->row_type, &send, &varlena);
		fmgr_info(send, &t->send);
		getTypeBinaryInputInfo(t->row_type, &recv, &t->recv_ioparam);
		fmgr_info(recv, &t->recv);
	}
	bind_typed(t, rel);
}

/* The bytes of a bytea or text value. */
static void
value_bytes(Datum value, const char **data, uint32 *len)
{
	struct varlena *v = PG_DETOAST_DATUM_PACKED(value);

	*data = VARDATA_ANY(v);
	*len = VARSIZE_ANY_EXHDR(v);
}

/* Raises 22004: column i of a row written to t's shard is NULL. */
static void
raise_null(PsShardTable *t, int i)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("column \"%s\" of a row written to shard \"%s\" must not be NULL",
					NameStr(TupleDescAttr(t->desc, i)->attname), t->shard)));
}

/*
 * Makes the update a row of t's table writes: key and val point into the
 * row's values or into *row (a typed row's send form, palloc'd), valid
 * while they are; time 0 (the sink's to choose).
 */
void
ps_fdw_row_to_update(PsShardTable *t, Datum *values, bool *isnull, PsUpdate *u,
					 bytea **row)
{
	memset(u, 0, sizeof(PsUpdate));
	u->key = "";
	u->val = "";
	u->diff = 1;
	*row = NULL;
	if (t->composite)
	{
		/* a dropped field stays NULL */
		memset(t->fields, 0, sizeof(Datum) * t->row_desc->natts);
		memset(t->field_nulls, true, sizeof(bool) * t->row_desc->natts);
	}
	for (int i = 0; i < t->desc->natts; i++)
	{
		switch (t->kind[i])
		{
			case PS_COLUMN_DROPPED:
				break;
			case PS_COLUMN_KEY:
			case PS_COLUMN_VAL:
				if (isnull[i])
					raise_null(t, i);
				if (t->kind[i] == PS_COLUMN_KEY)
					value_bytes(values[i], &u->key, &u->key_len);
				else
					value_bytes(values[i], &u->val, &u->val_len);
				break;
			case PS_COLUMN_DIFF:
				/* left out of the INSERT: an insertion */
				u->diff = isnull[i] ? 1 : DatumGetInt64(values[i]);
				break;
			case PS_COLUMN_TIME:
				if (!isnull[i])
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("the time of a row written to shard \"%s\" is chosen by the sink",
									t->shard),
							 errhint("Leave column \"time\" out of the INSERT, or write NULL to it.")));
				break;
			case PS_COLUMN_FIELD:
				t->fields[t->field[i]] = values[i];
				t->field_nulls[t->field[i]] = isnull[i];
				break;
			case PS_COLUMN_ROW:
				if (isnull[i])
					raise_null(t, i);
				*row = SendFunctionCall(&t->send, values[i]);
				break;
		}
	}
	if (t->composite)
		*row = SendFunctionCall(&t->send,
								HeapTupleGetDatum(heap_form_tuple(t->row_desc, t->fields,
																  t->field_nulls)));
	if (*row)
	{
		u->key = VARDATA(*row);
		u->key_len = VARSIZE(*row) - VARHDRSZ;
	}
}

/*
 * A bytea or text value of len bytes at data (text checked as text): made
 * in t->row_bytes if the caller gave room there, else palloc'd.
 */
static Datum
bytes_value(PsShardTable *t, Oid type, const char *data, uint32 len)
{
	char	   *value;

	if (type == TEXTOID)
		(void) pg_verifymbstr(data, len, false);
	if (t->row_bytes == NULL)
		return type == TEXTOID ?
			PointerGetDatum(cstring_to_text_with_len(data, len)) :
			ps_bytea_datum(data, len);
	/* the room was made for the row's values: no repalloc moves them */
	t->row_bytes->len = MAXALIGN(t->row_bytes->len);
	Assert(t->row_bytes->len + VARHDRSZ + len <= t->row_bytes->maxlen);
	value = t->row_bytes->data + t->row_bytes->len;
	SET_VARSIZE(value, VARHDRSZ + len);
	memcpy(VARDATA(value), data, len);
	t->row_bytes->len += VARHDRSZ + len;
	return PointerGetDatum(value);
}

/*
 * Fills values and isnull with the row of t's table that update u at time
 * reads as; buf is scratch space for receiving a typed row.
 */
void
ps_fdw_update_to_row(PsShardTable *t, const PsUpdate *u, int64 time,
					 StringInfo buf, Datum *values, bool *isnull)
{
	Datum		row = (Datum) 0;

	if (OidIsValid(t->row_type) && t->needs_row)
	{
		resetStringInfo(buf);
		appendBinaryStringInfo(buf, u->key, u->key_len);
		row = ReceiveFunctionCall(&t->recv, buf, t->recv_ioparam, -1);
	}
	if (t->row_bytes)
	{
		/* room for the key and the val, each aligned, made at once */
		resetStringInfo(t->row_bytes);
		enlargeStringInfo(t->row_bytes,
						  2 * MAXIMUM_ALIGNOF + 2 * VARHDRSZ + u->key_len + u->val_len);
	}
	if (t->composite && t->needs_row)
	{
		HeapTupleData tuple;

		ps_row_tuple(row, &tuple);
		heap_deform_tuple(&tuple, t->row_desc, t->fields, t->field_nulls);
	}
	for (int i = 0; i < t->desc->natts; i++)
	{
		isnull[i] = false;
		if (t->unused && t->unused[i])
		{
			/* a column the query does not read: not made */
			isnull[i] = true;
			continue;
		}
		switch (t->kind[i])
		{
			case PS_COLUMN_DROPPED:
				isnull[i] = true;
				break;
			case PS_COLUMN_KEY:
				values[i] = bytes_value(t, TupleDescAttr(t->desc, i)->atttypid, u->key, u->key_len);
				break;
			case PS_COLUMN_VAL:
				values[i] = bytes_value(t, TupleDescAttr(t->desc, i)->atttypid, u->val, u->val_len);
				break;
			case PS_COLUMN_DIFF:
				values[i] = Int64GetDatum(u->diff);
				break;
			case PS_COLUMN_TIME:
				values[i] = Int64GetDatum(time);
				break;
			case PS_COLUMN_FIELD:
				values[i] = t->fields[t->field[i]];
				isnull[i] = t->field_nulls[t->field[i]];
				break;
			case PS_COLUMN_ROW:
				values[i] = row;
				break;
		}
	}
}

/*
 * The column of rel that holds an untyped shard's key (0-based), or -1: a
 * column key of type bytea, whatever the shard, read from the table alone
 * (the planner pushes down conditions on it without reading the shard).
 */
int
ps_fdw_key_column(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && named(att, "key") && att->atttypid == BYTEAOID)
			return i;
	}
	return -1;
}

/*
 * The time a table of shard is read as of: the setting persist_sink.as_of
 * if set, else the table's option as_of, else upper - 1 (as snapshot()).
 * Raises PS002 or PS003 if that time is not readable in state.
 */
int64
ps_fdw_table_as_of(const PsShardTable *t, const PsState *state)
{
	int64		as_of;

	if (ps_table_as_of[0] && ps_parse_time(ps_table_as_of, &as_of))
		return ps_snapshot_as_of(t->shard, state, false, as_of);
	return ps_snapshot_as_of(t->shard, state, !t->has_as_of, t->as_of);
}

/*
 * Raises PS004: a row of shard has a negative multiplicity (diff), which a
 * table without a column diff cannot show as rows.
 */
void
ps_fdw_raise_negative(const char *shard, int64 diff)
{
	ereport(ERROR,
			(errcode(ERRCODE_PS_NEGATIVE_MULTIPLICITY),
			 errmsg("a row of shard \"%s\" has negative multiplicity " INT64_FORMAT,
					shard, diff),
			 errhint("Declare a column diff (bigint) in the foreign table to read the diffs as they are.")));
}

/*
 * Makes the rows of a bound table with only the given 0-based columns
 * (NIL: all of them; -1 alone: none); the others read as NULL, for a
 * query that never looks at them.  Allocates in cxt.
 */
void
ps_fdw_table_use_columns(PsShardTable *t, List *columns, MemoryContext cxt)
{
	ListCell   *lc;

	t->unused = NULL;
	t->needs_row = OidIsValid(t->row_type);
	if (columns == NIL)
		return;
	t->unused = MemoryContextAlloc(cxt, sizeof(bool) * Max(t->desc->natts, 1));
	memset(t->unused, true, sizeof(bool) * t->desc->natts);
	foreach(lc, columns)
		if (lfirst_int(lc) >= 0 && lfirst_int(lc) < t->desc->natts)
			t->unused[lfirst_int(lc)] = false;
	t->needs_row = false;
	for (int i = 0; i < t->desc->natts; i++)
		if (!t->unused[i] && (t->kind[i] == PS_COLUMN_FIELD || t->kind[i] == PS_COLUMN_ROW))
			t->needs_row = true;
}
