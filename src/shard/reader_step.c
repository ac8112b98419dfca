/*-------------------------------------------------------------------------
 *
 * reader_step.c
 *	  The window a reader reads next (read_next), each step read once.
 *
 * read_next returns the updates after the reader's position up to the
 * first time by which they number at least max_updates (its cut), whole
 * times only, or all of them up to upper if they never do within the
 * window its batches' update counts bound (see window_bound).  A step
 * finds its cut in the cheapest way that is exact:
 *
 * - Batches of one time whose parts cannot share an update (one part, or
 *   parts whose key ranges follow each other) hold exactly their parts'
 *   update count at that time (each part is consolidated), so while the
 *   batches after the position are such batches, the cut comes from the
 *   state alone and the step merges only the batches up to it.
 * - Otherwise the window is merged once: each time's updates are counted
 *   and those of the lowest times kept in a temporary file (about twice
 *   max_updates of them at most, fewer as the counts show where the cut
 *   must be), then returned from there up to the cut.
 * - A window of three steps or more (a reader far behind a compacted
 *   batch, whose blocks each hold every time) is sorted by time into
 *   temporary files: read once into a file a time if it has at most
 *   READER_CACHE_STEPS times and persist_sink.reader_cache bytes, else
 *   twice (once to count its times, once into a file a step, up to
 *   persist_sink.reader_cache bytes past the first step).  Those files
 *   stay with the backend across transactions (the reader cache), so the
 *   next steps read only their own updates (a step of several times in
 *   time order, each time's in (key, val) order), as long as the parts of
 *   the batches the window read are the same (a compaction, or another
 *   shard, replaces it).  Updates at times below upper never change, and
 *   a step starting at or past since sees none advanced, so what a step
 *   takes from the cache is what merging would return.
 *
 * Every function here must be called between SPI_connect and SPI_finish,
 * with an active snapshot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "commands/tablespace.h"
#include "miscadmin.h"
#include "storage/buffile.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "base/base.h"
#include "base/settings.h"
#include "shard/read.h"
#include "shard/shard.h"

/* The most steps the reader cache holds at once */
#define READER_CACHE_STEPS	256
#define READER_CACHE_STEPS_MIN	16

/* The fewest times counted exactly by a merge that fills the reader cache */
#define READER_CACHE_TIMES	65536

/*
 * An update in a temporary file: a tag byte, the fields it says follow,
 * then its key and val.  A length below 256 takes a byte, a time equal to
 * the update's before it in the file and a diff of 1 none: an update of a
 * file a time with short keys and vals takes three bytes besides them.
 */
#define SPILL_KEY_LEN4	0x01	/* key length in 4 bytes, else 1 */
#define SPILL_VAL_LEN4	0x02	/* val length in 4 bytes, else 1 */
#define SPILL_TIME		0x04	/* time in 8 bytes, else the previous one */
#define SPILL_DIFF		0x08	/* diff in 8 bytes, else 1 */
#define SPILL_HEADER_MAX	(1 + 4 + 4 + 8 + 8)

/* Updates written to a temporary file, to be read back in that order */
typedef struct Spill
{
	BufFile    *file;
	uint64		nrows;
	uint64		bytes;
	int64		put_time;		/* the time of the last update written */
	int64		get_time;		/* and of the last one read */
} Spill;

/* Updates counted per time (a hash entry) */
typedef struct TimeCount
{
	int64		time;			/* hash key */
	int64		count;
	uint64		bytes;			/* their size in a spill */
} TimeCount;

/* The counts of a window's times: only the lowest `keep` of them kept */
typedef struct Counts
{
	HTAB	   *hash;
	long		keep;
	int64		highest;		/* times above it are not counted */
	bool		pruned;			/* some were dropped */
} Counts;

/*
 * The steps a backend's read_next read past its cut (see the file's
 * comment): step i is the updates of (start(i), ends[i]], start(0) being
 * after0 and start(i) ends[i - 1].  They are kept in segments, segment j
 * the updates of (seg_start(j), seg_ends[j]] in (key, val, time) order in
 * its spill; a step's times are those of whole segments.
 */
typedef struct ReaderCache
{
	MemoryContext cxt;
	char	   *shard;
	int64		max_updates;
	int64		after0;			/* the position it was read from */
	int64		since;			/* the shard's since then */
	int64		until;			/* the end (exclusive) of the window read */
	bool		last_complete;	/* its last step holds max_updates */
	PsState		held;			/* the batches it was read from */
	int64		min_time;		/* and the times of them read */
	int64		max_time;
	int			nsteps;
	int64	   *ends;
	int			served;			/* steps read from it */
	int			nsegs;
	int			first;			/* segments before it are dropped */
	int64	   *seg_ends;
	Spill	   *spills;
} ReaderCache;

static ReaderCache *reader_cache = NULL;

/*
 * The most steps a window read twice keeps (READER_CACHE_STEPS_MIN up to
 * READER_CACHE_STEPS): doubled each time a reader read every step of a
 * cache, back to the least when one is replaced (the shard's batches
 * changed) with fewer than half of its steps read.  So a cache that the
 * compactor replaces every step or two costs little more than reading
 * the window, and one that holds lasts.
 */
static int	cache_steps = READER_CACHE_STEPS_MIN;

/* A step being read: from a merge, or from spills up to max_time */
struct PsReaderStep
{
	PsMerge    *merge;
	int64		time_floor;
	Spill	   *spill;			/* the spill being read */
	int			nspills;		/* the spills left after it */
	bool		own_spill;		/* closed at the end */
	int64		max_time;
	StringInfoData buf;
};

/* Opens an empty spill (interXact: kept across transactions). */
static void
spill_open(Spill *s, bool interXact)
{
	PrepareTempTablespaces();
	s->file = BufFileCreateTemp(interXact);
	s->nrows = 0;
	s->bytes = 0;
}

/* The tag of update u in a spill whose last update is at time prev_time. */
static inline uint8
spill_tag(const PsUpdate *u, bool first, int64 prev_time)
{
	return (u->key_len > PG_UINT8_MAX ? SPILL_KEY_LEN4 : 0) |
		(u->val_len > PG_UINT8_MAX ? SPILL_VAL_LEN4 : 0) |
		(first || u->time != prev_time ? SPILL_TIME : 0) |
		(u->diff != 1 ? SPILL_DIFF : 0);
}

/* The bytes of the header a tag announces, the tag included. */
static inline int
spill_header_size(uint8 tag)
{
	return 1 + ((tag & SPILL_KEY_LEN4) ? 4 : 1) + ((tag & SPILL_VAL_LEN4) ? 4 : 1) +
		((tag & SPILL_TIME) ? 8 : 0) + ((tag & SPILL_DIFF) ? 8 : 0);
}

/*
 * The bytes an update takes in a spill, its time given in full: what the
 * update of a file of several times takes, at most.
 */
static inline uint64
spill_size(const PsUpdate *u)
{
	return spill_header_size(spill_tag(u, true, 0)) + u->key_len + u->val_len;
}

/* Writes a length in 4 bytes (if wide) or 1 at at; returns how many. */
static inline int
spill_put_length(char *at, uint32 len, bool wide)
{
	if (!wide)
	{
		*at = (char) (uint8) len;
		return 1;
	}
	memcpy(at, &len, 4);
	return 4;
}

/* Appends an update to a spill; returns the bytes it took. */
static uint64
spill_put(Spill *s, const PsUpdate *u)
{
	char		h[SPILL_HEADER_MAX];
	uint8		tag = spill_tag(u, s->nrows == 0, s->put_time);
	int			n = 1;
	uint64		size;

	h[0] = (char) tag;
	n += spill_put_length(h + n, u->key_len, (tag & SPILL_KEY_LEN4) != 0);
	n += spill_put_length(h + n, u->val_len, (tag & SPILL_VAL_LEN4) != 0);
	if (tag & SPILL_TIME)
	{
		memcpy(h + n, &u->time, 8);
		n += 8;
	}
	if (tag & SPILL_DIFF)
	{
		memcpy(h + n, &u->diff, 8);
		n += 8;
	}
	Assert(n == spill_header_size(tag));
	BufFileWrite(s->file, h, n);
	if (u->val == u->key + u->key_len)
		BufFileWrite(s->file, unconstify(char *, u->key), u->key_len + u->val_len);
	else
	{
		BufFileWrite(s->file, unconstify(char *, u->key), u->key_len);
		BufFileWrite(s->file, unconstify(char *, u->val), u->val_len);
	}
	size = n + u->key_len + u->val_len;
	s->put_time = u->time;
	s->nrows++;
	s->bytes += size;
	return size;
}

/* Moves a spill back to its first update. */
static void
spill_rewind(Spill *s)
{
	if (BufFileSeek(s->file, 0, 0, SEEK_SET) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rewind persist_sink reader temporary file")));
}

/* Reads exactly len bytes of a spill into ptr. */
static void
spill_read(Spill *s, void *ptr, size_t len)
{
	if (len > 0 && BufFileRead(s->file, ptr, len) != len)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read persist_sink reader temporary file")));
}

/* Reads a length of 4 bytes (if wide) or 1 at *at, and moves past it. */
static inline uint32
spill_length(const char **at, bool wide)
{
	uint32		len = 0;

	if (wide)
		memcpy(&len, *at, 4);
	else
		len = (uint8) **at;
	*at += wide ? 4 : 1;
	return len;
}

/*
 * Reads a spill's next update into out, its key and val into buf; false
 * at its end.
 */
static bool
spill_get(Spill *s, StringInfo buf, PsUpdate *out)
{
	char		h[SPILL_HEADER_MAX];
	const char *at = h + 1;
	uint8		tag;
	size_t		got = BufFileRead(s->file, h, 1);

	if (got == 0)
		return false;
	tag = (uint8) h[0];
	spill_read(s, h + 1, spill_header_size(tag) - 1);
	out->key_len = spill_length(&at, (tag & SPILL_KEY_LEN4) != 0);
	out->val_len = spill_length(&at, (tag & SPILL_VAL_LEN4) != 0);
	if (tag & SPILL_TIME)
	{
		memcpy(&s->get_time, at, 8);
		at += 8;
	}
	out->time = s->get_time;
	out->diff = 1;
	if (tag & SPILL_DIFF)
		memcpy(&out->diff, at, 8);
	resetStringInfo(buf);
	enlargeStringInfo(buf, (int) (out->key_len + out->val_len));
	spill_read(s, buf->data, out->key_len + out->val_len);
	out->key = buf->data;
	out->val = buf->data + out->key_len;
	return true;
}

/* Closes a spill, deleting its file. */
static void
spill_close(Spill *s)
{
	if (s->file)
		BufFileClose(s->file);
	s->file = NULL;
}

/*
 * True if a batch may hold updates a reader at `after` has yet to read: a
 * reader at since - 1 reads every batch (the history before since summed
 * at since), any other one those with times after it.
 */
static bool
batch_after(const PsState *state, const PsBatch *b, int64 after)
{
	if (after < state->since)
		return true;
	if (b->single_time)
		return b->time > after;
	return b->upper > after + 1;
}

/*
 * An estimate of the updates after `after`: the update counts of the
 * batches that may hold some, the one it falls in whole (its times say
 * nothing of how its updates spread: a merged batch of sink times starts
 * at 0).  Counts are those written (a compacted batch's once
 * consolidated), so it errs high, never to 0 while an update is left.
 */
uint64
ps_updates_after(const PsState *state, int64 after)
{
	uint64		sum = 0;

	for (int i = 0; i < state->nbatches; i++)
		if (batch_after(state, &state->batches[i], after))
			sum += ps_batch_updates(&state->batches[i]);
	return sum;
}

/*
 * True, with its time in *time, if every update of a batch is at one time
 * and its parts cannot hold the same (key, val): one part, or parts whose
 * keys follow each other.  Its update count is then that time's, exactly.
 */
static bool
batch_exact_time(const PsBatch *b, int64 *time)
{
	if (b->nparts == 0)
		return false;
	if (b->single_time)
		*time = b->time;
	else if (b->parts[0].has_time)
		*time = b->parts[0].time;
	else if (b->upper == b->lower + 1 && b->since <= b->lower)
		*time = b->lower;		/* the batch's only time */
	else
		return false;
	for (int i = 0; i < b->nparts; i++)
	{
		const PsPart *p = &b->parts[i];

		if (!b->single_time && p->has_time != b->parts[0].has_time)
			return false;
		if (!b->single_time && p->has_time && p->time != *time)
			return false;
		/* its last key's prefix below the next part's first key's */
		if (i > 0 &&
			(!b->parts[i - 1].has_upper ||
			 ps_bytes_cmp(b->parts[i - 1].upper, b->parts[i - 1].upper_len,
						  p->lower, p->lower_len) >= 0))
			return false;
	}
	return true;
}

/* How a step's window is bounded (window_bound) */
typedef enum WindowKind
{
	WINDOW_ALL,					/* (after, upper): fewer than max_updates */
	WINDOW_EXACT,				/* (after, cut]: the state gave the cut */
	WINDOW_COUNT				/* (after, until): the cut must be counted */
} WindowKind;

/*
 * Bounds the window of a reader at `after`: the whole times after it up
 * to the first time boundary at which it holds at least max_updates
 * updates.  The batches' update counts, which only overstate, give the
 * end (exclusive, *until) of a window that holds it; batches of one exact
 * count (batch_exact_time) give the cut itself (*until is then cut + 1)
 * while every batch before them does too.  *window_updates: the window's
 * batches' update counts.
 */
static WindowKind
window_bound(const PsState *state, int64 after, int64 max_updates,
			 int64 *until, uint64 *window_updates)
{
	uint64		sum = 0;
	bool		exact = true;

	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];
		int64		time;

		if (!batch_after(state, b, after))
			continue;
		sum += ps_batch_updates(b);
		*window_updates = sum;
		/* times below since are read at since, with other batches' */
		if (exact && batch_exact_time(b, &time) && time > after &&
			(after >= state->since || time > state->since))
		{
			if (sum >= (uint64) max_updates)
			{
				*until = time + 1;
				return WINDOW_EXACT;
			}
			continue;
		}
		exact = exact && ps_batch_updates(b) == 0;
		if (sum > (uint64) max_updates)
		{
			*until = b->upper;
			/* a reader at since - 1 reads the time since whole */
			if (after < state->since)
				*until = Min(state->upper, Max(*until, state->since + 1));
			return WINDOW_COUNT;
		}
	}
	*until = state->upper;
	*window_updates = sum;
	return WINDOW_ALL;
}

/* Starts counting times, keeping the lowest `keep` (at least 1). */
static void
counts_init(Counts *c, long keep)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(TimeCount);
	ctl.hcxt = CurrentMemoryContext;
	c->hash = hash_create("persist_sink read_next counts", 1024, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	c->keep = Max(keep, 1);
	c->highest = PG_INT64_MAX;
	c->pruned = false;
}

/* qsort order of TimeCounts by time. */
static int
time_count_cmp(const void *a, const void *b)
{
	int64		ta = ((const TimeCount *) a)->time;
	int64		tb = ((const TimeCount *) b)->time;

	return ta < tb ? -1 : ta > tb ? 1 : 0;
}

/* The counts, sorted by time, in a palloc'd array of *n. */
static TimeCount *
counts_sorted(const Counts *c, long *n)
{
	HASH_SEQ_STATUS seq;
	TimeCount  *e;
	TimeCount  *all = palloc(sizeof(TimeCount) * Max(1, hash_get_num_entries(c->hash)));
	long		i = 0;

	hash_seq_init(&seq, c->hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		all[i++] = *e;
	qsort(all, i, sizeof(TimeCount), time_count_cmp);
	*n = i;
	return all;
}

/* Keeps only the lowest `keep` times: no time above them is counted. */
static void
counts_prune(Counts *c)
{
	long		n;
	TimeCount  *all = counts_sorted(c, &n);

	c->highest = all[c->keep - 1].time;
	for (long i = c->keep; i < n; i++)
		(void) hash_search(c->hash, &all[i].time, HASH_REMOVE, NULL);
	c->pruned = true;
	pfree(all);
}

/* Counts an update; false if its time is above those counted. */
static bool
counts_add(Counts *c, const PsUpdate *u)
{
	TimeCount  *e;
	bool		found;

	if (u->time > c->highest)
		return false;
	e = hash_search(c->hash, &u->time, HASH_ENTER, &found);
	e->count = found ? e->count + 1 : 1;
	e->bytes = (found ? e->bytes : 0) + spill_size(u);
	if (hash_get_num_entries(c->hash) > 2 * c->keep)
		counts_prune(c);
	return true;
}

/*
 * The first time counted by which the counts number at least max_updates,
 * or `otherwise` if they never do.  As more updates are counted it can
 * only come earlier.
 */
static int64
counts_cut(const Counts *c, int64 max_updates, int64 otherwise)
{
	long		n;
	TimeCount  *all = counts_sorted(c, &n);
	int64		sum = 0;
	int64		cut = otherwise;

	for (long i = 0; i < n; i++)
	{
		sum += all[i].count;
		if (sum >= max_updates)
		{
			cut = all[i].time;
			break;
		}
	}
	pfree(all);
	return cut;
}

/* Starts a merge of the window (after, until) of a step, by time. */
static PsMerge *
window_merge(const char *shard, const PsState *state, int64 after,
			 int64 until, int64 *time_floor)
{
	int64		min_time;
	int64		max_time;

	if (!ps_listen_window(shard, state, after, false, until, &min_time,
						  &max_time, time_floor))
		return NULL;
	return ps_merge_begin(shard, state, min_time, max_time, true);
}

/* Keeps only the updates of a spill at or below time bound. */
static void
spill_keep_below(Spill *s, int64 bound, StringInfo buf)
{
	Spill		kept;
	PsUpdate	u;

	spill_open(&kept, false);
	spill_rewind(s);
	while (spill_get(s, buf, &u))
		if (u.time <= bound)
			spill_put(&kept, &u);
	spill_close(s);
	*s = kept;
}

/*
 * Reads the window (after, until) once into step: counts each time's
 * updates and keeps those of the lowest times in a spill (at most about
 * twice max_updates of them beyond the times the cut needs whole), then
 * sets the step to return those up to the cut.
 */
static void
read_counted(PsReaderStep *step, const char *shard, const PsState *state,
			 int64 after, int64 until, int64 max_updates)
{
	Counts		counts;
	int64		bound = PG_INT64_MAX;
	uint64		limit = 2 * (uint64) max_updates;
	int64		time_floor;
	PsMerge    *m = window_merge(shard, state, after, until, &time_floor);
	PsUpdate	u;

	counts_init(&counts, (long) Min(max_updates, (int64) (LONG_MAX / 4)));
	step->spill = palloc0(sizeof(Spill));
	step->own_spill = true;
	spill_open(step->spill, false);
	step->max_time = until - 1;
	if (m == NULL)
		return;
	while (ps_merge_next_consolidated(m, true, time_floor, &u))
	{
		if (u.time > bound || !counts_add(&counts, &u))
			continue;
		spill_put(step->spill, &u);
		if (step->spill->nrows > limit)
		{
			/* the cut is no later than it would be now */
			bound = counts_cut(&counts, max_updates, bound);
			counts.highest = Min(counts.highest, bound);
			spill_keep_below(step->spill, bound, &step->buf);
			limit = Max(limit, 2 * step->spill->nrows);
		}
	}
	ps_merge_end(m);
	step->max_time = counts_cut(&counts, max_updates, until - 1);
	hash_destroy(counts.hash);
	spill_rewind(step->spill);
}

/* Drops the reader cache, deleting its files. */
static void
cache_drop(void)
{
	ReaderCache *c = reader_cache;

	if (c == NULL)
		return;
	reader_cache = NULL;
	for (int i = c->first; c->spills && i < c->nsegs; i++)
		spill_close(&c->spills[i]);
	MemoryContextDelete(c->cxt);
}

/* The first time (exclusive) of a cached step. */
static inline int64
cache_start(const ReaderCache *c, int i)
{
	return i == 0 ? c->after0 : c->ends[i - 1];
}

/* True if a batch may hold times in [min_time, max_time]. */
static inline bool
batch_in(const PsBatch *b, int64 min_time, int64 max_time)
{
	return !(b->lower > max_time || b->upper <= min_time);
}

/*
 * True if the batches of state that hold the cache's times have the same
 * parts as those it was read from.
 */
static bool
cache_same_batches(const ReaderCache *c, const PsState *state)
{
	int			j = 0;

	if ((c->held.blob_store == NULL) != (state->blob_store == NULL) ||
		(c->held.blob_store && strcmp(c->held.blob_store, state->blob_store) != 0))
		return false;
	for (int i = 0; i < state->nbatches; i++)
	{
		const PsBatch *b = &state->batches[i];
		const PsBatch *h;

		if (!batch_in(b, c->min_time, c->max_time))
			continue;
		if (j >= c->held.nbatches)
			return false;
		h = &c->held.batches[j++];
		if (b->single_time != h->single_time ||
			(b->single_time && b->time != h->time) ||
			!ps_batch_same_parts(b, h))
			return false;
	}
	return j == c->held.nbatches;
}

/*
 * Sets step to return the cached step that starts at `after`, if the
 * cache holds the one a merge of (after, until) would return: true if so.
 * Segments before it are dropped (the reader is past them).
 */
static bool
cache_serve(PsReaderStep *step, const char *shard, const PsState *state,
			int64 after, int64 until, int64 max_updates)
{
	ReaderCache *c = reader_cache;
	int			i;
	int			j;

	if (c == NULL || strcmp(c->shard, shard) != 0 || c->max_updates != max_updates)
		return false;
	/* from since - 1, the history before since is read at since */
	if (after < state->since && !(after == c->after0 && state->since == c->since))
		return false;
	for (i = 0; i < c->nsteps; i++)
		if (cache_start(c, i) == after)
			break;
	/* its segments are dropped once a reader passed them */
	if (i == c->nsteps ||
		(c->first > 0 && c->seg_ends[c->first - 1] > after))
		return false;
	if (!cache_same_batches(c, state))
	{
		if (c->served * 2 < c->nsteps)
			cache_steps = READER_CACHE_STEPS_MIN;
		cache_drop();
		return false;
	}
	/* its last step, short of max_updates, holds only the times read */
	if (i == c->nsteps - 1 && !c->last_complete && until > c->until)
		return false;
	for (; c->first < c->nsegs && c->seg_ends[c->first] <= after; c->first++)
		spill_close(&c->spills[c->first]);
	for (j = c->first; j < c->nsegs && c->seg_ends[j] <= c->ends[i]; j++)
		;
	/* every step read: the next cache may keep more */
	c->served = Max(c->served, i + 1);
	if (i == c->nsteps - 1 && c->nsteps >= cache_steps)
		cache_steps = Min(2 * cache_steps, READER_CACHE_STEPS);
	step->own_spill = false;
	step->max_time = Min(c->ends[i], until - 1);
	step->nspills = j - c->first;
	if (step->nspills > 0)
	{
		step->spill = &c->spills[c->first];
		step->nspills--;
		spill_rewind(step->spill);
	}
	return true;
}

/*
 * Chooses the steps of a cache from the counts of its window (after,
 * until), sorted by time: each the lowest times after the one before that
 * hold max_updates, at most max_steps of them and, past the first, cap
 * bytes, and the rest of the window as a last, shorter one if every time
 * of it was counted (not pruned).
 */
static void
cache_choose_steps(ReaderCache *c, const TimeCount *all, long n, bool pruned,
				   uint64 cap, int max_steps)
{
	uint64		bytes = 0;
	uint64		step_bytes = 0;
	int64		sum = 0;

	c->ends = MemoryContextAlloc(c->cxt, sizeof(int64) * (READER_CACHE_STEPS + 1));
	c->nsteps = 0;
	c->last_complete = true;
	for (long i = 0; i < n && c->nsteps < max_steps; i++)
	{
		sum += all[i].count;
		step_bytes += all[i].bytes;
		if (sum < c->max_updates)
			continue;
		if (c->nsteps > 0 && bytes + step_bytes > cap)
			break;
		if (c->nsteps > 0)
			bytes += step_bytes;
		c->ends[c->nsteps++] = all[i].time;
		sum = 0;
		step_bytes = 0;
	}
	/* the rest of the window, every time of it counted (or none at all) */
	if ((c->nsteps < max_steps && !pruned && sum > 0 &&
		 (c->nsteps == 0 || bytes + step_bytes <= cap)) || c->nsteps == 0)
	{
		c->ends[c->nsteps++] = c->until - 1;
		c->last_complete = false;
	}
}

/* The cache's most temporary file bytes past its first step. */
static uint64
cache_cap(void)
{
	uint64		cap = (uint64) ps_reader_cache_kb * 1024;

	/* leave the session's other temporary files half of their limit */
	if (temp_file_limit >= 0)
		cap = Min(cap, (uint64) temp_file_limit * 1024 / 2);
	return cap;
}

/* The cached segment of a time in (after0, seg_ends[nsegs - 1]]. */
static int
cache_seg_of(const ReaderCache *c, int64 time)
{
	int			lo = 0;
	int			hi = c->nsegs - 1;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (c->seg_ends[mid] >= time)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* Opens the cache's segments' spills, kept across transactions. */
static void
cache_open_spills(ReaderCache *c)
{
	MemoryContext old = MemoryContextSwitchTo(c->cxt);

	c->spills = palloc0(sizeof(Spill) * Max(c->nsegs, 1));
	for (int i = 0; i < c->nsegs; i++)
		spill_open(&c->spills[i], true);
	MemoryContextSwitchTo(old);
}

/*
 * Counts the times of the cache's window, chooses its steps, and writes
 * the updates of their times into one segment a step: two reads of the
 * window.
 */
static void
cache_read_twice(ReaderCache *c, const char *shard, const PsState *state)
{
	Counts		counts;
	int64		time_floor;
	PsMerge    *m;
	PsUpdate	u;
	TimeCount  *all;
	long		n;

	counts_init(&counts, (long) Min(Max(c->max_updates, READER_CACHE_TIMES),
									(int64) (LONG_MAX / 4)));
	m = window_merge(shard, state, c->after0, c->until, &time_floor);
	if (m)
	{
		while (ps_merge_next_consolidated(m, true, time_floor, &u))
			(void) counts_add(&counts, &u);
		ps_merge_end(m);
	}
	all = counts_sorted(&counts, &n);
	cache_choose_steps(c, all, n, counts.pruned, cache_cap(), cache_steps);
	pfree(all);
	hash_destroy(counts.hash);
	c->nsegs = c->nsteps;
	c->seg_ends = c->ends;
	cache_open_spills(c);
	m = window_merge(shard, state, c->after0, c->ends[c->nsteps - 1] + 1,
					 &time_floor);
	if (m == NULL)
		return;
	while (ps_merge_next_consolidated(m, true, time_floor, &u))
		spill_put(&c->spills[cache_seg_of(c, u.time)], &u);
	ps_merge_end(m);
}

/* A time of a window read once: its count, bytes and segment */
typedef struct TimeSegment
{
	int64		time;
	int64		count;
	uint64		bytes;
	Spill		spill;
} TimeSegment;

/* Slots of the open-addressing table of a window's times: 4 per time */
#define TIME_SLOTS		(4 * READER_CACHE_STEPS)

/*
 * The times of a window read once, at most READER_CACHE_STEPS, in the
 * order first met; slots[] holds 1 + the index of each (0: empty) at the
 * slot its time hashes to, or the next free one.
 */
typedef struct TimeSegments
{
	int			n;
	TimeSegment segs[READER_CACHE_STEPS];
	uint16		slots[TIME_SLOTS];
} TimeSegments;

/* Closes the spills of a window's times. */
static void
close_time_segments(TimeSegments *times)
{
	for (int i = 0; i < times->n; i++)
		spill_close(&times->segs[i].spill);
	times->n = 0;
}

/*
 * The segment of time among times, a new one (its spill opened in cxt) if
 * none; NULL if that would pass READER_CACHE_STEPS.
 */
static TimeSegment *
time_segment(TimeSegments *times, int64 time, MemoryContext cxt)
{
	uint32		slot = (uint32) (((uint64) time * UINT64CONST(0x9E3779B97F4A7C15)) >> 54);
	MemoryContext old;
	TimeSegment *e;

	StaticAssertStmt(TIME_SLOTS == 1024, "the hash takes 10 bits");
	for (;; slot = (slot + 1) % TIME_SLOTS)
	{
		uint16		at = times->slots[slot];

		if (at == 0)
			break;
		if (times->segs[at - 1].time == time)
			return &times->segs[at - 1];
	}
	if (times->n == READER_CACHE_STEPS)
		return NULL;
	e = &times->segs[times->n++];
	times->slots[slot] = (uint16) times->n;
	memset(e, 0, sizeof(TimeSegment));
	e->time = time;
	old = MemoryContextSwitchTo(cxt);
	spill_open(&e->spill, true);
	MemoryContextSwitchTo(old);
	return e;
}

/* qsort order of TimeSegments by time. */
static int
time_segment_cmp(const void *a, const void *b)
{
	int64		ta = ((const TimeSegment *) a)->time;
	int64		tb = ((const TimeSegment *) b)->time;

	return ta < tb ? -1 : ta > tb ? 1 : 0;
}

/* Makes the cache's segments of a window's times, and chooses its steps. */
static void
cache_take_time_segments(ReaderCache *c, TimeSegments *times)
{
	int			n = times->n;
	TimeCount  *all = palloc(sizeof(TimeCount) * Max(n, 1));

	qsort(times->segs, n, sizeof(TimeSegment), time_segment_cmp);
	c->nsegs = n;
	c->seg_ends = MemoryContextAlloc(c->cxt, sizeof(int64) * Max(n, 1));
	c->spills = MemoryContextAllocZero(c->cxt, sizeof(Spill) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		c->seg_ends[i] = times->segs[i].time;
		c->spills[i] = times->segs[i].spill;
		all[i].time = times->segs[i].time;
		all[i].count = times->segs[i].count;
		all[i].bytes = times->segs[i].bytes;
	}
	times->n = 0;
	cache_choose_steps(c, all, n, false, PG_UINT64_MAX, READER_CACHE_STEPS);
	pfree(all);
}

/*
 * Writes the updates of merge m into a spill a time, counting them in
 * times, while there are at most READER_CACHE_STEPS times and cap bytes:
 * false once there are more.
 */
static bool
fill_time_segments(ReaderCache *c, PsMerge *m, int64 time_floor,
				   TimeSegments *times, uint64 cap)
{
	TimeSegment *last = NULL;
	uint64		bytes = 0;
	PsUpdate	u;

	while (ps_merge_next_consolidated(m, true, time_floor, &u))
	{
		TimeSegment *e = last;
		uint64		size;

		if (e == NULL || e->time != u.time)
		{
			e = time_segment(times, u.time, c->cxt);
			if (e == NULL)
				return false;
			last = e;
		}
		size = spill_put(&e->spill, &u);
		bytes += size;
		if (bytes > cap)
			return false;
		e->count++;
		e->bytes += size;
	}
	return true;
}

/*
 * Reads the cache's window once into a segment a time, if it holds at
 * most READER_CACHE_STEPS times and persist_sink.reader_cache bytes: true
 * if so.  Else (having read some of it) false, with nothing kept.
 */
static bool
cache_read_once(ReaderCache *c, const char *shard, const PsState *state)
{
	int64		time_floor;
	PsMerge    *m = window_merge(shard, state, c->after0, c->until, &time_floor);
	TimeSegments *times;
	bool		fits;

	if (m == NULL)
		return false;
	times = palloc0(sizeof(TimeSegments));
	PG_TRY();
	{
		fits = fill_time_segments(c, m, time_floor, times, cache_cap());
	}
	PG_CATCH();
	{
		close_time_segments(times);
		PG_RE_THROW();
	}
	PG_END_TRY();
	ps_merge_end(m);
	if (fits)
		cache_take_time_segments(c, times);
	else
		close_time_segments(times);
	pfree(times);
	return fits;
}

/* Copies into the cache the batches of state that hold its times. */
static void
cache_hold_batches(ReaderCache *c, const PsState *state)
{
	PsState		held = *state;
	MemoryContext old;
	int64		time_floor;

	if (!ps_listen_window(c->shard, state, c->after0, false,
						  c->ends[c->nsteps - 1] + 1, &c->min_time,
						  &c->max_time, &time_floor))
		c->min_time = c->max_time = c->after0;
	held.nbatches = 0;
	held.batches = palloc(sizeof(PsBatch) * Max(state->nbatches, 1));
	for (int i = 0; i < state->nbatches; i++)
		if (batch_in(&state->batches[i], c->min_time, c->max_time))
			held.batches[held.nbatches++] = state->batches[i];
	old = MemoryContextSwitchTo(c->cxt);
	ps_state_copy(&held, &c->held);
	MemoryContextSwitchTo(old);
	pfree(held.batches);
}

/*
 * True if the window (after, until) can hold at most READER_CACHE_STEPS
 * times (from since - 1, those before since are read at since): only
 * then is it worth reading once into a file a time, which a window of
 * more times gives up on once it meets one too many, maybe at its end.
 */
static bool
window_few_times(const PsState *state, int64 after, int64 until)
{
	int64		first = after < state->since ? state->since : after + 1;

	return until - first <= READER_CACHE_STEPS;
}

/*
 * Reads the window (after, until) into a new reader cache (see the file's
 * comment), replacing the backend's: once, into a segment a time, if it
 * has few enough times, else twice.
 */
static void
cache_build(const char *shard, const PsState *state, int64 after,
			int64 until, int64 max_updates)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext,
											  "persist_sink reader cache",
											  ALLOCSET_DEFAULT_SIZES);
	ReaderCache *c = MemoryContextAllocZero(cxt, sizeof(ReaderCache));

	cache_drop();
	c->cxt = cxt;
	c->shard = MemoryContextStrdup(cxt, shard);
	c->max_updates = max_updates;
	c->after0 = after;
	c->since = state->since;
	c->until = until;
	PG_TRY();
	{
		if (!window_few_times(state, after, until) ||
			!cache_read_once(c, shard, state))
			cache_read_twice(c, shard, state);
		cache_hold_batches(c, state);
	}
	PG_CATCH();
	{
		for (int i = 0; c->spills && i < c->nsegs; i++)
			spill_close(&c->spills[i]);
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	reader_cache = c;
}

/*
 * Starts reading the updates a reader at `after` reads next (read_next's
 * window, see the file's comment), consolidated per (key, val, time).
 * Raises PS003 if after is below since - 1 (ps_listen_window).
 */
PsReaderStep *
ps_reader_step_begin(const char *shard, const PsState *state, int64 after,
					 int64 max_updates)
{
	PsReaderStep *step = palloc0(sizeof(PsReaderStep));
	uint64		window_updates = 0;
	int64		until;
	WindowKind	kind = window_bound(state, after, max_updates, &until,
									&window_updates);

	initStringInfo(&step->buf);
	if (kind != WINDOW_COUNT)
	{
		step->merge = window_merge(shard, state, after, until, &step->time_floor);
		return step;
	}
	if (ps_reader_cache_kb == 0)
		cache_drop();
	if (cache_serve(step, shard, state, after, until, max_updates))
		return step;
	if (ps_reader_cache_kb > 0 && window_updates >= 3 * (uint64) max_updates)
	{
		cache_build(shard, state, after, until, max_updates);
		if (cache_serve(step, shard, state, after, until, max_updates))
			return step;
	}
	read_counted(step, shard, state, after, until, max_updates);
	return step;
}

/*
 * The step's next update; its bytes stay valid until the next call.  False
 * at its end.
 */
bool
ps_reader_step_next(PsReaderStep *step, PsUpdate *out)
{
	if (step->merge)
		return ps_merge_next_consolidated(step->merge, true, step->time_floor, out);
	while (step->spill != NULL)
	{
		while (spill_get(step->spill, &step->buf, out))
		{
			CHECK_FOR_INTERRUPTS();
			if (out->time <= step->max_time)
				return true;
		}
		/* the step's next segment */
		if (step->nspills == 0)
			break;
		step->spill++;
		step->nspills--;
		spill_rewind(step->spill);
	}
	return false;
}

/* Ends a step, releasing what it read. */
void
ps_reader_step_end(PsReaderStep *step)
{
	if (step->merge)
		ps_merge_end(step->merge);
	if (step->spill && step->own_spill)
		spill_close(step->spill);
	pfree(step->buf.data);
	pfree(step);
}
