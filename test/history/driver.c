/*
 * The client side of the history checker: one process multiplexes many
 * libpq connections with poll() and calls persist_sink.append() on them,
 * keyed and unkeyed, of random sizes, to several shards, while it injects
 * faults: per-call statement_timeout, PQcancel after a random delay,
 * pg_terminate_backend of a busy client, sessions that hold a shard's
 * state row or a storage table's lock, same-key races (equal or other
 * content) and server crashes (SIGKILL of a backend, or pg_ctl stop -m
 * immediate and a start).  It records every call and its outcome, one
 * line each, for test/history/check.pl.
 *
 * Consumers (--consumers N, default 3; 0: none): consumer i owns the reader
 * hc<i> of one shard (created at the start at the default position, since
 * - 1) and the plain table history_consumed_<i>; consumers are spread
 * over the first R shards, R = min(shards - 1, max(1, N - 1)) (so with
 * the defaults h1 has two readers, h2 one, and h3, h4 none: their since
 * stays 0).  Each loops one statement (autocommit: one transaction) that
 * calls read_next (1-2000 updates, waiting 0-200 ms), inserts what it read
 * into its table and advances the reader to the last time read when it
 * read anything, under the appends' faults (statement_timeout, PQcancel,
 * pg_terminate_backend, crashes; a consumer that loses its connection
 * connects again and goes on).  A control session calls
 * downgrade_since(shard, shard_upper(shard)) on the readers' shards every
 * 0.2-1.5 s, then reads the since it got and then the readers' positions
 * (a "P" line), and now and then compact(shard) instead.  Once the load is
 * over and the server is up, each consumer is drained without faults
 * (until read_next returns nothing and its position is upper - 1),
 * since is moved once more on each readers' shard, and "D" lines record
 * where the readers ended.  --break-consumers (to show that check.pl
 * catches it) makes consumer 1 skip the advance on 10% of its steps, so
 * that it reads and inserts those updates again.
 *
 * Writes through foreign tables (--tables F, default 0.25: that share of
 * the writes): the write's content is sent as one INSERT into the shard's
 * foreign table public.t_h<N> (key text, val text, diff bigint), after a
 * SET of persist_sink.idempotency_key to its key (empty if none) and of
 * persist_sink.table_write_memory to 1MB (its larger writes go through a
 * sort on disk); the same faults apply.  An INSERT does not say the time:
 * its outcome ok has the value "-".
 *
 * Table readers (--table-readers N, default 2; 0: none): each is a process
 * of its own, forked at the start, on a blocking connection (application
 * name histtable<i>), until the load is over.  Half of its steps append
 * 1-3000 updates to the shard hr (keys r0 to r1999, vals v0 to v2, diffs
 * -2 to 3: retractions; now and then downgrade_since(hr, upper - 2000)
 * instead, so merges consolidate them), the other half run one REPEATABLE
 * READ transaction on a random shard (h1 to hN, whose diffs are all 1, or
 * hr), now and then with persist_sink.as_of set to a time between since and
 * upper - 1 (snapshot() then reads as of it), and in it 1 to 4 checks, each
 * in a savepoint, that compare what a shortcut of the shard's foreign
 * tables (public.r_<shard> (key bytea, val bytea, diff bigint, "time"
 * bigint) and public.n_<shard> (key bytea, val bytea), created at the
 * start) returns with the plain form and snapshot() of the same snapshot:
 *   aggregates  a random mix of count(*), sum(diff), min("time") and
 *               max("time") of r_<shard>, computed by the wrapper, against
 *               the same over (SELECT * FROM r_<shard> OFFSET 0) and over
 *               snapshot(); now and then its EXPLAIN ANALYZE, whose
 *               "Computed:" line says whether the state or a merge gave them
 *   count       count(*) of n_<shard> likewise; snapshot()'s diffs summed,
 *               PS004 if one is negative
 *   limit       LIMIT n (0-2000) of r_<shard> against snapshot()'s first n
 *               by key and val; of n_<shard>, each row of diff d d times,
 *               PS004 if a negative diff comes before the nth row
 *   exists      EXISTS of either table against snapshot()
 *   cursor      a cursor over r_<shard> fetched in chunks of 1-3000 rows
 *               (now and then MOVE), against a cursor over snapshot()
 *               ordered by key and val, to the end or a random stop
 *   lookup      key = K (a constant or a parameter; now and then twice, the
 *               second from the block cache), K a key of a write the driver
 *               made ("<wid>-<row>", or r<k> on hr) or an absent one
 *   range       one write's keys, or between two such keys (>, >=, <, <=,
 *               BETWEEN, or no upper bound): the rows' count and the md5 of
 *               them in the order the table returned them
 * An answer is its rows as text, or "error SQLSTATE"; the check passes if
 * every path gave the same rows, or the same PS002, PS003 or PS004.  A
 * cancel (SIGALRM, PQcancel, 1-300 ms into 8% of the transactions), a
 * statement_timeout of 1-50 ms (8%), a terminated backend (the terminator
 * now and then picks a table reader's) or a crash loses the transaction:
 * recorded, not judged.
 *
 * Usage: driver --out FILE --seconds N --clients N --shards N --seed S
 *               --pgdata DIR --pglog FILE [--think-ms N] [--no-crash]
 *               [--no-faults] [--consumers N] [--break-consumers]
 *               [--tables F] [--table-readers N]
 * The server is found with the usual PG* environment variables.
 *
 * History lines (tab separated):
 *   W wid shard key nrows kind group gtype via      a write (key "-" if none;
 *                                                    via: append or table)
 *   A wid client attempt send_us recv_us timeout_ms cancel_ms outcome value message
 *       outcome: ok (value = the time, "-" for a table write), err (value = SQLSTATE), lost
 *       (value = SQLSTATE or "-": FATAL, crash or connection gone)
 *   R cid shard reader position                      a consumer, its reader
 *                                                    created at position
 *   C cid step phase send_us recv_us timeout_ms cancel_ms max_updates wait_ms outcome value lo hi n message
 *       a consumer's step (phase "load", or "drain" at the end, without
 *       faults): outcome ok (committed: it read n updates, lo and hi the
 *       first and the last time, "-" if none, and advanced to hi), err
 *       (value = SQLSTATE: rolled back), lost (value = SQLSTATE or "-":
 *       FATAL, crash or connection gone before the commit was answered)
 *   P shard send_us recv_us upper since positions    downgrade_since(shard,
 *       upper) returned; then (same transaction) the since it left, then
 *       (a later statement) the readers' positions: "hc1=123,hc3=-1"
 *   E kind at_us outcome value message              a control call that
 *       failed (kind downgrade or compact; outcome err or lost)
 *   D cid shard reader position since upper          a consumer drained
 *   T reader at_us check shard as_of outcome detail  a table reader's check
 *       (outcome same, alike: the same error, detail its SQLSTATE; wrong,
 *       error: an unexpected SQLSTATE, detail every path's answer), EXPLAIN
 *       (check explain, outcome state, merge or none), transaction
 *       (committed, cut, error) or write to hr (ok, cut, error); as_of
 *       "NULL" for upper - 1
 *   F kind at_us detail                              a fault
 *   S key value                                      a summary figure
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define MAX_CLIENTS 64
#define MAX_ATTEMPTS 60
#define OID_TEXT 25
#define OID_TEXTARRAY 1009
#define OID_INT8ARRAY 1016

/* ------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t
rnd(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* uniform in [lo, hi] */
static long
rnd_range(long lo, long hi)
{
	return lo + (long) (rnd() % (uint64_t) (hi - lo + 1));
}

/* true with probability p */
static int
chance(double p)
{
	return (rnd() >> 11) * (1.0 / 9007199254740992.0) < p;
}

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static FILE *hist;
static int64_t t0;

static void
die(const char *fmt,...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "driver: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(2);
}

static void
logmsg(const char *fmt,...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "[driver %6.1fs] ", (now_us() - t0) / 1e6);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

/* a message on one line, without tabs */
static void
flatten(char *dst, size_t size, const char *src)
{
	size_t		i = 0;

	for (; src && *src && i + 1 < size; src++)
		dst[i++] = (*src == '\t' || *src == '\n' || *src == '\r') ? ' ' : *src;
	dst[i] = 0;
}

/* ------------------------------------------------------------------ */
/* a growing text buffer */

typedef struct
{
	char	   *p;
	size_t		len,
				cap;
} Buf;

static void
buf_reserve(Buf *b, size_t more)
{
	if (b->len + more + 1 > b->cap)
	{
		b->cap = (b->len + more + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			die("out of memory");
	}
}

static void
buf_printf(Buf *b, const char *fmt,...)
{
	va_list ap;
	int			n;

	buf_reserve(b, 64);
	for (;;)
	{
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if ((size_t) n < b->cap - b->len)
			break;
		buf_reserve(b, n + 1);
	}
	b->len += n;
}

/* ------------------------------------------------------------------ */
/* writes */

enum kind
{
	SMALL, SHARED, LARGE
};
static const char *kind_name[] = {"small", "shared", "large"};

typedef struct Write
{
	long		wid;
	int			shard;
	int			nrows;
	int			vlen;
	enum kind	kind;
	char		key[64];		/* idempotency key, "" if none */
	int			via_table;		/* sent as an INSERT into the shard's foreign
								 * table, not as append() */
	long		group;			/* race group, 0 if none */
	char		gtype;			/* 'e' equal content, 'd' other content, '-' */
	/* the parameters, built once: a retry sends the same content */
	char	   *keys,
			   *vals,
			   *diffs;
	int			refs;
} Write;

static long next_wid = 1;
static double table_share = 0.25;	/* writes sent through foreign tables */
static long next_group = 1;
static int	nshards = 4;

static Write *
write_new(int forced_kind)
{
	Write	   *w = calloc(1, sizeof(Write));
	Buf			k = {0}, v = {0}, d = {0};
	int			r;
	char		pad[128];

	w->wid = next_wid++;
	w->shard = (int) rnd_range(1, nshards);
	w->gtype = '-';
	w->via_table = chance(table_share);
	if (forced_kind >= 0)
		w->kind = forced_kind;
	else if (chance(0.0008))
		w->kind = LARGE;
	else if (chance(0.04))
		w->kind = SHARED;
	else
		w->kind = SMALL;
	switch (w->kind)
	{
		case SMALL:
			w->nrows = (int) rnd_range(1, 50);
			w->vlen = (int) rnd_range(0, 30);
			break;
		case SHARED:
			w->nrows = (int) rnd_range(200, 2500);
			w->vlen = (int) rnd_range(0, 20);
			break;
		case LARGE:
			w->nrows = (int) rnd_range(25000, 40000);
			w->vlen = 50;
			break;
	}
	memset(pad, 'x', sizeof(pad));
	pad[w->vlen] = 0;
	buf_reserve(&k, (size_t) w->nrows * 16);
	buf_reserve(&v, (size_t) w->nrows * (24 + w->vlen));
	buf_reserve(&d, (size_t) w->nrows * 2);
	buf_printf(&k, "{");
	buf_printf(&v, "{");
	buf_printf(&d, "{");
	for (r = 0; r < w->nrows; r++)
	{
		buf_printf(&k, "%s%ld-%d", r ? "," : "", w->wid, r);
		buf_printf(&v, "%sv%ld-%d-%s", r ? "," : "", w->wid, r, pad);
		buf_printf(&d, "%s1", r ? "," : "");
	}
	buf_printf(&k, "}");
	buf_printf(&v, "}");
	buf_printf(&d, "}");
	w->keys = k.p;
	w->vals = v.p;
	w->diffs = d.p;
	return w;
}

static void
write_record(Write *w)
{
	fprintf(hist, "W\t%ld\th%d\t%s\t%d\t%s\t%ld\t%c\t%s\n", w->wid, w->shard,
			w->key[0] ? w->key : "-", w->nrows, kind_name[w->kind], w->group, w->gtype,
			w->via_table ? "table" : "append");
}

static void
write_release(Write *w)
{
	if (--w->refs > 0)
		return;
	free(w->keys);
	free(w->vals);
	free(w->diffs);
	free(w);
}

/* ------------------------------------------------------------------ */
/* connections */

typedef enum
{
	C_DOWN,						/* no connection; reconnect at next_at */
	C_CONNECTING,
	C_IDLE,
	C_SETTING,					/* SET statement_timeout sent */
	C_CALLING,					/* append sent */
	C_WAITING,					/* start the call at next_at (race partner) */
} CState;

typedef struct
{
	int			id;
	PGconn	   *conn;
	PGcancel   *cancel;
	CState		state;
	PostgresPollingStatusType poll;
	int64_t		next_at;
	int			down_count;
	Write	   *w;				/* the write in progress (with retries) */
	int			attempt;
	int			timeout_ms;		/* of this attempt; 0 = the default */
	int			cur_timeout_ms; /* what the session has */
	char		cur_key[64];	/* its persist_sink.idempotency_key, or "?"
								 * when not known */
	int			cancel_ms;		/* -1: none */
	int64_t		send_us,
				cancel_at;
	int			cancelled;
	/* the result */
	char		outcome[8];
	char		value[32];
	char		message[512];
	int			got_result;
	int64_t		think_until;	/* no new write before */
} Client;

static Client clients[MAX_CLIENTS];
static int	nclients = 8;
static char conninfo_base[512];
static int	faults = 1;
static int	draining = 0;		/* after the deadline: no new writes, no faults */
static int	think_ms = 0;		/* a client waits 0 to think_ms between writes */

/* figures */
static long n_calls, n_retries, n_writes, n_terminates, n_cancels, n_holds,
			n_locks, n_races_eq, n_races_diff, n_crashes, n_timeouts_set, n_connects, n_hung;

static void
conn_close(Client *c, int64_t now)
{
	if (c->cancel)
		PQfreeCancel(c->cancel);
	c->cancel = NULL;
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->state = C_DOWN;
	c->cur_timeout_ms = -1;
	strcpy(c->cur_key, "?");
	c->down_count++;
	c->next_at = now + rnd_range(20, 100) * 1000L * (c->down_count > 5 ? 5 : c->down_count);
}

/* the server's warnings (a crash's "terminating connection") are not shown */
static void
quiet(void *arg, const char *message)
{
}

static void
conn_start(Client *c, const char *appname)
{
	char		ci[768];

	snprintf(ci, sizeof(ci), "%s application_name=%s", conninfo_base, appname);
	c->conn = PQconnectStart(ci);
	if (!c->conn || PQstatus(c->conn) == CONNECTION_BAD)
	{
		conn_close(c, now_us());
		return;
	}
	PQsetNoticeProcessor(c->conn, quiet, NULL);
	c->state = C_CONNECTING;
	c->poll = PGRES_POLLING_WRITING;
}

/* advances a connection attempt; returns 1 when connected */
static int
conn_poll(Client *c)
{
	c->poll = PQconnectPoll(c->conn);
	if (c->poll == PGRES_POLLING_OK)
	{
		c->down_count = 0;
		c->cancel = PQgetCancel(c->conn);
		c->cur_timeout_ms = -1;
	strcpy(c->cur_key, "?");
		n_connects++;
		return 1;
	}
	if (c->poll == PGRES_POLLING_FAILED)
		conn_close(c, now_us());
	return 0;
}

/* ------------------------------------------------------------------ */
/* the clients' calls */

static void
client_set_result_from(Client *c, PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_TUPLES_OK && PQntuples(res) == 1)
	{
		strcpy(c->outcome, "ok");
		snprintf(c->value, sizeof(c->value), "%s", PQgetvalue(res, 0, 0));
		c->message[0] = 0;
	}
	else if (st == PGRES_COMMAND_OK)
	{
		/* an INSERT into a foreign table: written, at a time it does not say */
		strcpy(c->outcome, "ok");
		strcpy(c->value, "-");
		c->message[0] = 0;
	}
	else
	{
		const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
		const char *msg = PQresultErrorMessage(res);

		if (sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0))
			strcpy(c->outcome, "lost");
		else if (!code)
			strcpy(c->outcome, "lost");
		else
			strcpy(c->outcome, "err");
		snprintf(c->value, sizeof(c->value), "%s", code ? code : "-");
		flatten(c->message, sizeof(c->message), msg);
	}
	c->got_result = 1;
}

static void
client_send_call(Client *c, int64_t now)
{
	const char *params[5];
	Oid			types[5] = {OID_TEXT, OID_TEXTARRAY, OID_TEXTARRAY, OID_INT8ARRAY, OID_TEXT};
	char		shard[16];
	char		sql[160];
	Write	   *w = c->w;

	snprintf(shard, sizeof(shard), "h%d", w->shard);
	params[0] = shard;
	params[1] = w->keys;
	params[2] = w->vals;
	params[3] = w->diffs;
	params[4] = w->key[0] ? w->key : NULL;
	c->attempt++;
	c->got_result = 0;
	c->cancelled = 0;
	c->send_us = now;
	c->cancel_at = c->cancel_ms >= 0 ? now + c->cancel_ms * 1000L : 0;
	n_calls++;
	if (c->attempt > 1)
		n_retries++;
	if (w->via_table)
		snprintf(sql, sizeof(sql),
				 "INSERT INTO public.t_h%d (key, val, diff) SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])",
				 w->shard);
	if (w->via_table ?
		!PQsendQueryParams(c->conn, sql, 3, &types[1], &params[1], NULL, NULL, 0) :
		!PQsendQueryParams(c->conn,
						   "SELECT persist_sink.append($1, $2::text[], $3::text[], $4::bigint[], $5)",
						   5, types, params, NULL, NULL, 0))
	{
		/* maybe partly sent: an unknown outcome */
		strcpy(c->outcome, "lost");
		strcpy(c->value, "-");
		flatten(c->message, sizeof(c->message), PQerrorMessage(c->conn));
		c->got_result = 1;
		c->state = C_CALLING;
		return;
	}
	c->state = C_CALLING;
}

/* picks the faults of the next attempt */
static void
client_pick_faults(Client *c)
{
	c->timeout_ms = 0;
	c->cancel_ms = -1;
	if (!faults || draining)
		return;
	if (chance(0.12))
		c->timeout_ms = (int) rnd_range(1, 20);
	else if (chance(0.05))
		c->timeout_ms = (int) rnd_range(21, 400);
	if (chance(0.08))
		c->cancel_ms = (int) rnd_range(0, 40);
}

/*
 * starts the current attempt: SET statement_timeout first if it changes,
 * and for a write through a foreign table its idempotency key (and a
 * small persist_sink.table_write_memory, so that its larger writes take
 * the path through a sort on disk)
 */
static void
client_begin_attempt(Client *c, int64_t now)
{
	int			want = c->timeout_ms ? c->timeout_ms : 30000;
	int			set_key = c->w->via_table && strcmp(c->cur_key, c->w->key) != 0;

	if (c->cur_timeout_ms != want || set_key)
	{
		char		sql[256];

		snprintf(sql, sizeof(sql), "SET statement_timeout = %d", want);
		if (set_key)
			snprintf(sql + strlen(sql), sizeof(sql) - strlen(sql),
					 "; SET persist_sink.idempotency_key = '%s'; SET persist_sink.table_write_memory = '1MB'",
					 c->w->key);
		if (!PQsendQuery(c->conn, sql))
		{
			conn_close(c, now);
			return;
		}
		c->cur_timeout_ms = want;
		if (set_key)
			strcpy(c->cur_key, c->w->key);
		c->state = C_SETTING;
		n_timeouts_set++;
		return;
	}
	client_send_call(c, now);
}

/* the attempt ended: record it and decide what comes next */
static void
client_finish_attempt(Client *c, int64_t now)
{
	Write	   *w = c->w;
	int			retry = 0;

	fprintf(hist, "A\t%ld\t%d\t%d\t%lld\t%lld\t%d\t%d\t%s\t%s\t%s\n", w->wid, c->id, c->attempt,
			(long long) (c->send_us - t0), (long long) (now - t0), c->timeout_ms,
			c->cancelled ? c->cancel_ms : -1, c->outcome, c->value, c->message[0] ? c->message : "-");
	if (w->key[0])
	{
		if (strcmp(c->outcome, "lost") == 0)
			retry = 1;
		else if (strcmp(c->outcome, "err") == 0 && strcmp(c->value, "40003") == 0)
			retry = 1;
	}
	if (retry && c->attempt < MAX_ATTEMPTS)
	{
		client_pick_faults(c);
		if (c->state == C_DOWN)
			return;				/* retried once reconnected */
		c->state = C_IDLE;
		client_begin_attempt(c, now);
		return;
	}
	write_release(w);
	c->w = NULL;
	c->attempt = 0;
	c->think_until = think_ms ? now + rnd_range(0, think_ms) * 1000L : 0;
	if (c->state != C_DOWN)
		c->state = C_IDLE;
}

static void
client_lost(Client *c, int64_t now)
{
	int			calling = (c->state == C_CALLING);

	conn_close(c, now);
	if (calling && c->w)
	{
		if (!c->got_result)
		{
			strcpy(c->outcome, "lost");
			strcpy(c->value, "-");
			c->message[0] = 0;
		}
		client_finish_attempt(c, now);
	}
}

/* reads what arrived; handles the end of a statement */
static void
client_input(Client *c, int64_t now)
{
	PGresult   *res;

	if (!PQconsumeInput(c->conn))
	{
		client_lost(c, now);
		return;
	}
	while (!PQisBusy(c->conn))
	{
		res = PQgetResult(c->conn);
		if (!res)
		{
			/* the statement is over */
			if (c->state == C_SETTING)
			{
				/* a table write goes only with its key set */
				if (PQstatus(c->conn) == CONNECTION_BAD ||
					(c->w->via_table && strcmp(c->cur_key, c->w->key) != 0))
				{
					client_lost(c, now);
					return;
				}
				client_send_call(c, now);
				if (c->got_result)	/* sending failed */
					client_lost(c, now);
				return;
			}
			if (c->state == C_CALLING)
			{
				if (!c->got_result || PQstatus(c->conn) == CONNECTION_BAD ||
					strcmp(c->outcome, "lost") == 0)
				{
					client_lost(c, now);
					return;
				}
				client_finish_attempt(c, now);
			}
			return;
		}
		if (c->state == C_CALLING && !c->got_result)
			client_set_result_from(c, res);
		else if (c->state == C_SETTING && PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			c->cur_timeout_ms = -1;
			strcpy(c->cur_key, "?");
		}
		PQclear(res);
	}
}

static void tr_share_write(const Write *w);

/* a new write for an idle client; sometimes a same-key race with another */
static void
client_new_write(Client *c, int64_t now)
{
	Write	   *w;
	Client	   *p = NULL;
	int			i;

	w = write_new(-1);
	w->refs = 1;
	n_writes++;
	if (chance(0.5))
		snprintf(w->key, sizeof(w->key), "k%ld", w->wid);
	if (faults && !draining && w->kind != LARGE && chance(0.03))
	{
		/* a race partner: an idle client */
		int			start = (int) rnd_range(0, nclients - 1);

		for (i = 0; i < nclients; i++)
		{
			Client	   *o = &clients[(start + i) % nclients];

			if (o != c && o->state == C_IDLE && !o->w)
			{
				p = o;
				break;
			}
		}
	}
	if (p)
	{
		Write	   *w2;

		if (!w->key[0])
			snprintf(w->key, sizeof(w->key), "k%ld", w->wid);
		w->group = next_group++;
		if (chance(0.5))
		{
			/* equal content: the same write, sent twice */
			w->gtype = 'e';
			w2 = w;
			w->refs++;
			n_races_eq++;
		}
		else
		{
			/* other content, the same key */
			w2 = write_new(w->kind);
			w2->refs = 1;
			w2->shard = w->shard;
			w2->group = w->group;
			w2->gtype = w->gtype = 'd';
			snprintf(w2->key, sizeof(w2->key), "%s", w->key);
			n_writes++;
			write_record(w2);
			tr_share_write(w2);
			n_races_diff++;
		}
		p->w = w2;
		p->attempt = 0;
		client_pick_faults(p);
		/* nearly the same time: 0 to 3 ms apart */
		p->state = C_WAITING;
		p->next_at = now + rnd_range(0, 3000);
	}
	write_record(w);
	tr_share_write(w);
	c->w = w;
	c->attempt = 0;
	client_pick_faults(c);
	client_begin_attempt(c, now);
}

/* ------------------------------------------------------------------ */
/* consumers: each owns a reader of a shard and a table it fills */

#define MAX_CONSUMERS 16

typedef struct
{
	Client		c;				/* its connection, the step's faults and outcome */
	int			id;				/* 1-based: reader hc<id>, table history_consumed_<id> */
	int			shard;
	char		reader[16];
	long		step;
	int			max_updates;
	int			wait_ms;
	int			brk;			/* this step does not advance (--break-consumers) */
	int			got_tuples;
	char		lo[32],
				hi[32],
				n[32];
	int64_t		pause_until;
} Consumer;

static Consumer consumers[MAX_CONSUMERS];

/* table readers (see below): their number, the terminations sent to them */
#define MAX_TABLE_READERS 8
static int	ntable_readers = 2;
static long n_t_terminates;
static int	nconsumers = 3;
static int	nreader_shards = 0;
static int	break_consumers = 0;

/* figures */
static long n_c_calls, n_c_ok, n_c_updates, n_c_terminates, n_c_broken, n_c_hung,
			n_downgrades, n_downgrades_held, n_compacts, n_control_errors;

/* the step's statement: read, insert what was read, advance to its last time */
static void
consumer_sql(int id, int advance, char *buf, size_t size)
{
	snprintf(buf, size,
			 "WITH r AS MATERIALIZED (SELECT * FROM persist_sink.read_next($1::text, $2::text, $3::bigint, $4::interval)), "
			 "ins AS (INSERT INTO history_consumed_%d SELECT key, val, \"time\", diff FROM r), "
			 "adv AS MATERIALIZED (%s) "
			 "SELECT min(\"time\"), max(\"time\"), count(*), (SELECT count(*) FROM adv) FROM r",
			 id, advance
			 ? "SELECT persist_sink.advance_reader($1::text, $2::text, max(\"time\")) FROM r HAVING count(*) > 0"
			 : "SELECT 1 WHERE false");
}

static void
consumer_record(Consumer *k, const char *phase, int64_t send_us, int64_t recv_us)
{
	Client	   *c = &k->c;
	int			ok = strcmp(c->outcome, "ok") == 0;

	fprintf(hist, "C\t%d\t%ld\t%s\t%lld\t%lld\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			k->id, k->step, phase, (long long) (send_us - t0), (long long) (recv_us - t0),
			c->timeout_ms, c->cancelled ? c->cancel_ms : -1, k->max_updates, k->wait_ms,
			c->outcome, c->value, ok && k->lo[0] ? k->lo : "-", ok && k->hi[0] ? k->hi : "-",
			ok ? k->n : "-", c->message[0] ? c->message : "-");
	if (ok)
	{
		n_c_ok++;
		n_c_updates += atol(k->n);
	}
}

static void
consumer_send(Consumer *k, int64_t now)
{
	Client	   *c = &k->c;
	const char *params[4];
	char		shard[16],
				max[16],
				wait[16],
				sql[1024];

	k->step++;
	k->max_updates = (int) rnd_range(1, 2000);
	k->wait_ms = (int) rnd_range(0, 200);
	k->brk = break_consumers && k->id == 1 && chance(0.10);
	if (k->brk)
		n_c_broken++;
	snprintf(shard, sizeof(shard), "h%d", k->shard);
	snprintf(max, sizeof(max), "%d", k->max_updates);
	snprintf(wait, sizeof(wait), "%d ms", k->wait_ms);
	params[0] = shard;
	params[1] = k->reader;
	params[2] = max;
	params[3] = wait;
	consumer_sql(k->id, !k->brk, sql, sizeof(sql));
	c->got_result = 0;
	k->got_tuples = 0;
	k->lo[0] = k->hi[0] = k->n[0] = 0;
	c->outcome[0] = 0;
	strcpy(c->value, "-");
	c->message[0] = 0;
	c->cancelled = 0;
	c->send_us = now;
	c->cancel_at = c->cancel_ms >= 0 ? now + c->cancel_ms * 1000L : 0;
	n_c_calls++;
	c->state = C_CALLING;
	if (!PQsendQueryParams(c->conn, sql, 4, NULL, params, NULL, NULL, 0))
	{
		strcpy(c->outcome, "lost");
		flatten(c->message, sizeof(c->message), PQerrorMessage(c->conn));
		c->got_result = 1;
	}
}

/* the step ended (its outcome is set): record it */
static void
consumer_finish(Consumer *k, int64_t now)
{
	Client	   *c = &k->c;

	consumer_record(k, "load", c->send_us, now);
	c->got_result = 0;
	/* now and then a pause, so that the reader lags and holds since back */
	k->pause_until = chance(0.03) ? now + rnd_range(100, 1500) * 1000L : 0;
	if (c->state != C_DOWN)
		c->state = C_IDLE;
}

static void
consumer_lost(Consumer *k, int64_t now)
{
	Client	   *c = &k->c;
	int			calling = (c->state == C_CALLING);

	conn_close(c, now);
	if (!calling)
		return;
	/*
	 * The commit's answer (ReadyForQuery) never came: unless an error had
	 * rolled the step back, its outcome is unknown.
	 */
	if (strcmp(c->outcome, "err") != 0)
	{
		if (strcmp(c->outcome, "lost") != 0)
		{
			strcpy(c->value, "-");
			c->message[0] = 0;
		}
		strcpy(c->outcome, "lost");
	}
	consumer_finish(k, now);
}

static void
consumer_begin(Consumer *k, int64_t now)
{
	Client	   *c = &k->c;
	int			want;

	client_pick_faults(c);
	want = c->timeout_ms ? c->timeout_ms : 30000;
	if (c->cur_timeout_ms != want)
	{
		char		sql[64];

		snprintf(sql, sizeof(sql), "SET statement_timeout = %d", want);
		if (!PQsendQuery(c->conn, sql))
		{
			conn_close(c, now);
			return;
		}
		c->cur_timeout_ms = want;
		c->state = C_SETTING;
		return;
	}
	consumer_send(k, now);
	if (c->got_result)			/* sending failed */
		consumer_lost(k, now);
}

static void
consumer_input(Consumer *k, int64_t now)
{
	Client	   *c = &k->c;
	PGresult   *res;

	if (!PQconsumeInput(c->conn))
	{
		consumer_lost(k, now);
		return;
	}
	while (!PQisBusy(c->conn))
	{
		res = PQgetResult(c->conn);
		if (!res)
		{
			if (PQstatus(c->conn) == CONNECTION_BAD)
			{
				consumer_lost(k, now);
				return;
			}
			if (c->state == C_SETTING)
			{
				consumer_send(k, now);
				if (c->got_result)	/* sending failed */
					consumer_lost(k, now);
				return;
			}
			if (c->state == C_CALLING)
			{
				if (!c->got_result || strcmp(c->outcome, "lost") == 0)
				{
					consumer_lost(k, now);
					return;
				}
				consumer_finish(k, now);
			}
			return;
		}
		if (c->state == C_CALLING)
		{
			ExecStatusType st = PQresultStatus(res);

			if (st == PGRES_TUPLES_OK && PQntuples(res) == 1 && !c->got_result)
			{
				snprintf(k->lo, sizeof(k->lo), "%s", PQgetvalue(res, 0, 0));
				snprintf(k->hi, sizeof(k->hi), "%s", PQgetvalue(res, 0, 1));
				snprintf(k->n, sizeof(k->n), "%s", PQgetvalue(res, 0, 2));
				strcpy(c->outcome, "ok");
				c->got_result = 1;
				k->got_tuples = 1;
			}
			else if (st != PGRES_TUPLES_OK || !c->got_result)
			{
				/* an error, even after the rows (at commit): rolled back */
				const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
				const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);

				if (!code || (sev && (!strcmp(sev, "FATAL") || !strcmp(sev, "PANIC"))))
					strcpy(c->outcome, "lost");
				else
					strcpy(c->outcome, "err");
				snprintf(c->value, sizeof(c->value), "%s", code ? code : "-");
				flatten(c->message, sizeof(c->message), PQresultErrorMessage(res));
				if (!c->message[0])
					snprintf(c->message, sizeof(c->message), "result status %s", PQresStatus(st));
				c->got_result = 1;
			}
		}
		else if (c->state == C_SETTING && PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			c->cur_timeout_ms = -1;
			strcpy(c->cur_key, "?");
		}
		PQclear(res);
	}
}

/* ------------------------------------------------------------------ */
/* control sessions: a terminator and a holder */

typedef struct
{
	Client		c;				/* its connection (only conn/state used) */
	int			step;			/* holder: 0 idle, 1 taking, 2 holding, 3 releasing */
	int64_t		release_at;
	char		what[96];
} Control;

static Control term,
			holder;

static void
control_drain(Control *k, int64_t now)
{
	PGresult   *res;

	if (!PQconsumeInput(k->c.conn))
	{
		conn_close(&k->c, now);
		k->step = 0;
		return;
	}
	while (!PQisBusy(k->c.conn))
	{
		res = PQgetResult(k->c.conn);
		if (!res)
		{
			if (PQstatus(k->c.conn) == CONNECTION_BAD)
			{
				conn_close(&k->c, now);
				k->step = 0;
				return;
			}
			k->c.state = C_IDLE;
			if (k == &holder)
			{
				if (k->step == 1)
				{
					k->step = 2;
					k->release_at = now + rnd_range(50, 500) * 1000L;
				}
				else if (k->step == 3)
				{
					k->step = 0;
					k->c.next_at = now + rnd_range(300, 2000) * 1000L;
				}
			}
			else
				k->c.next_at = now + rnd_range(100, 700) * 1000L;
			return;
		}
		PQclear(res);
	}
}

static void
control_tick(Control *k, int64_t now)
{
	if (k->c.state != C_IDLE)
		return;
	if (k == &term)
	{
		int			i,
					start;
		char		sql[96];

		if (now < k->c.next_at || draining)
			return;
		if (ntable_readers > 0 && chance(0.15))
		{
			/* a table reader's backend, in a statement or a transaction */
			if (PQsendQuery(k->c.conn,
							"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
							"WHERE application_name LIKE 'histtable%' AND state <> 'idle' "
							"ORDER BY random() LIMIT 1"))
			{
				k->c.state = C_CALLING;
				n_t_terminates++;
				fprintf(hist, "F\tterminate\t%lld\ttable reader\n", (long long) (now - t0));
			}
			return;
		}
		/* a busy client or consumer */
		start = (int) rnd_range(0, nclients + nconsumers - 1);
		for (i = 0; i < nclients + nconsumers; i++)
		{
			int			j = (start + i) % (nclients + nconsumers);
			Client	   *c = j < nclients ? &clients[j] : &consumers[j - nclients].c;

			if (c->state == C_CALLING && c->conn)
			{
				snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", PQbackendPID(c->conn));
				if (PQsendQuery(k->c.conn, sql))
				{
					k->c.state = C_CALLING;
					n_terminates++;
					if (j >= nclients)
						n_c_terminates++;
					fprintf(hist, "F\tterminate\t%lld\t%s %d pid %d\n",
							(long long) (now - t0), j < nclients ? "client" : "consumer",
							j < nclients ? c->id : consumers[j - nclients].id, PQbackendPID(c->conn));
				}
				return;
			}
		}
		k->c.next_at = now + 50000;
		return;
	}
	/* the holder */
	if (k->step == 0 && now >= k->c.next_at && !draining)
	{
		char		sql[512];
		int			shard = (int) rnd_range(1, nshards);
		static const char *tables[] = {"blob", "idempotency", "consensus"};

		if (chance(0.5))
		{
			/*
			 * The shard's state row, held by an uncommitted, empty
			 * compare_and_append at the current upper: rolled back, so it
			 * writes nothing (PS001 if the upper moved: then nothing is held).
			 */
			snprintf(sql, sizeof(sql),
					 "SET lock_timeout = '2s'; BEGIN; "
					 "SELECT persist_sink.compare_and_append('h%d', '{}'::text[], '{}'::text[], '{}'::bigint[], '{}'::bigint[], u, u + 1) "
					 "FROM (SELECT persist_sink.shard_upper('h%d') AS u) s",
					 shard, shard);
			snprintf(k->what, sizeof(k->what), "state row of h%d", shard);
			n_holds++;
		}
		else
		{
			const char *t = tables[rnd_range(0, 2)];

			snprintf(sql, sizeof(sql),
					 "SET lock_timeout = '2s'; BEGIN; LOCK TABLE persist_sink.%s IN ACCESS EXCLUSIVE MODE", t);
			snprintf(k->what, sizeof(k->what), "lock of persist_sink.%s", t);
			n_locks++;
		}
		if (PQsendQuery(k->c.conn, sql))
		{
			k->c.state = C_CALLING;
			k->step = 1;
			fprintf(hist, "F\thold\t%lld\t%s\n", (long long) (now - t0), k->what);
		}
		return;
	}
	if (k->step == 2 && now >= k->release_at)
	{
		if (PQsendQuery(k->c.conn, "ROLLBACK"))
		{
			k->c.state = C_CALLING;
			k->step = 3;
		}
	}
}

/* ------------------------------------------------------------------ */
/* the since mover: downgrade_since on the readers' shards, compact now and then */

typedef struct
{
	Client		c;				/* only conn, state, poll, next_at used */
	int			step;			/* 0 idle, 1 downgrade sent, 2 compact sent */
	int			shard;
	int64_t		send_us;
	int			nres;			/* results seen of the statement */
	int			failed;
	char		upper[32],
				since[32],
				positions[512];
	char		outcome[8],
				value[32],
				message[512];
} Sincer;

static Sincer sincer;

/* the downgrade, its since (same transaction), then the readers' positions */
static void
sincer_sql(int shard, char *sql, size_t size)
{
	snprintf(sql, size,
			 "WITH x AS MATERIALIZED (SELECT persist_sink.shard_upper('h%d') AS u) "
			 "SELECT u, persist_sink.downgrade_since('h%d', u)::text FROM x; "
			 "SELECT persist_sink.shard_since('h%d'); "
			 "SELECT coalesce(string_agg(reader || '=' || position, ',' ORDER BY reader), '') "
			 "FROM persist_sink.readers WHERE shard = 'h%d'",
			 shard, shard, shard, shard);
}

static void
sincer_tick(Sincer *k, int64_t now)
{
	char		sql[1024];

	if (k->c.state != C_IDLE || k->step != 0 || now < k->c.next_at || draining || nreader_shards == 0)
		return;
	k->shard = (int) rnd_range(1, nreader_shards);
	if (chance(0.12))
	{
		snprintf(sql, sizeof(sql), "SELECT persist_sink.compact('h%d')", k->shard);
		k->step = 2;
	}
	else
	{
		sincer_sql(k->shard, sql, sizeof(sql));
		k->step = 1;
	}
	k->send_us = now;
	k->nres = 0;
	k->failed = 0;
	k->upper[0] = k->since[0] = k->positions[0] = 0;
	if (!PQsendQuery(k->c.conn, sql))
	{
		conn_close(&k->c, now);
		k->step = 0;
		return;
	}
	k->c.state = C_CALLING;
}

static void
sincer_done(Sincer *k, int64_t now, int lost)
{
	if (lost && !k->failed)
	{
		k->failed = 1;
		strcpy(k->outcome, "lost");
		strcpy(k->value, "-");
		k->message[0] = 0;
	}
	if (k->failed)
	{
		n_control_errors++;
		fprintf(hist, "E\t%s\t%lld\t%s\t%s\t%s\n", k->step == 2 ? "compact" : "downgrade",
				(long long) (now - t0), k->outcome, k->value, k->message[0] ? k->message : "-");
	}
	else if (k->step == 1)
	{
		n_downgrades++;
		if (atoll(k->since) < atoll(k->upper))
			n_downgrades_held++;
		fprintf(hist, "P\th%d\t%lld\t%lld\t%s\t%s\t%s\n", k->shard, (long long) (k->send_us - t0),
				(long long) (now - t0), k->upper, k->since, k->positions[0] ? k->positions : "-");
	}
	else if (k->step == 2)
	{
		n_compacts++;
		fprintf(hist, "F\tcompact\t%lld\th%d\n", (long long) (k->send_us - t0), k->shard);
	}
	k->step = 0;
	k->c.next_at = now + rnd_range(200, 1500) * 1000L;
}

static void
sincer_input(Sincer *k, int64_t now)
{
	PGresult   *res;

	if (!PQconsumeInput(k->c.conn))
	{
		conn_close(&k->c, now);
		sincer_done(k, now, 1);
		return;
	}
	while (!PQisBusy(k->c.conn))
	{
		res = PQgetResult(k->c.conn);
		if (!res)
		{
			if (PQstatus(k->c.conn) == CONNECTION_BAD)
			{
				conn_close(&k->c, now);
				sincer_done(k, now, 1);
				return;
			}
			k->c.state = C_IDLE;
			if (k->step == 1 && !k->failed && k->nres != 3)
			{
				k->failed = 1;
				strcpy(k->outcome, "err");
				strcpy(k->value, "-");
				snprintf(k->message, sizeof(k->message), "%d results", k->nres);
			}
			sincer_done(k, now, 0);
			return;
		}
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && !k->failed)
		{
			if (k->step == 1 && k->nres == 0)
				snprintf(k->upper, sizeof(k->upper), "%s", PQgetvalue(res, 0, 0));
			else if (k->step == 1 && k->nres == 1)
				snprintf(k->since, sizeof(k->since), "%s", PQgetvalue(res, 0, 0));
			else if (k->step == 1 && k->nres == 2)
				snprintf(k->positions, sizeof(k->positions), "%s", PQgetvalue(res, 0, 0));
			k->nres++;
		}
		else if (!k->failed)
		{
			const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);

			k->failed = 1;
			strcpy(k->outcome, (!code || (sev && (!strcmp(sev, "FATAL") || !strcmp(sev, "PANIC")))) ? "lost" : "err");
			snprintf(k->value, sizeof(k->value), "%s", code ? code : "-");
			flatten(k->message, sizeof(k->message), PQresultErrorMessage(res));
		}
		PQclear(res);
	}
}

/* ------------------------------------------------------------------ */
/* crashes */

static const char *pgdata,
		   *pglog;
static int	crashes = 1;
static pid_t restarter = 0;

static void
crash(int64_t now)
{
	int			i,
				start = (int) rnd_range(0, nclients - 1);

	n_crashes++;
	if (n_crashes % 2 == 1)
	{
		/* SIGKILL of a backend: the postmaster restarts every process */
		for (i = 0; i < nclients; i++)
		{
			Client	   *c = &clients[(start + i) % nclients];

			if (c->conn && (c->state == C_CALLING || c->state == C_IDLE || c->state == C_SETTING))
			{
				int			pid = PQbackendPID(c->conn);

				if (pid > 0 && kill(pid, SIGKILL) == 0)
				{
					logmsg("crash %ld: SIGKILL of backend %d (client %d)", n_crashes, pid, c->id);
					fprintf(hist, "F\tcrash\t%lld\tSIGKILL of backend %d\n", (long long) (now - t0), pid);
					return;
				}
			}
		}
	}
	/* pg_ctl stop -m immediate, then start, in a child process */
	logmsg("crash %ld: pg_ctl stop -m immediate, then start", n_crashes);
	fprintf(hist, "F\tcrash\t%lld\tpg_ctl stop -m immediate\n", (long long) (now - t0));
	fflush(hist);
	restarter = fork();
	if (restarter == 0)
	{
		char		cmd[2048];

		snprintf(cmd, sizeof(cmd),
				 "pg_ctl -D '%s' -m immediate stop >/dev/null 2>&1; sleep 0.3; "
				 "for i in 1 2 3 4 5; do pg_ctl -D '%s' -l '%s' -w -t 60 start >/dev/null 2>&1 && exit 0; sleep 1; done; exit 1",
				 pgdata, pgdata, pglog);
		execl("/bin/sh", "sh", "-c", cmd, (char *) NULL);
		_exit(127);
	}
}

/* ------------------------------------------------------------------ */
/* consumers' setup and drain: one blocking connection, no faults */

static PGconn *
connect_blocking(const char *appname)
{
	char		ci[768];
	int			i;

	snprintf(ci, sizeof(ci), "%s application_name=%s", conninfo_base, appname);
	for (i = 0; i < 120; i++)
	{
		PGconn	   *conn = PQconnectdb(ci);

		if (PQstatus(conn) == CONNECTION_OK)
		{
			PGresult   *res = PQexec(conn, "SET statement_timeout = 0");
			int			ok = PQresultStatus(res) == PGRES_COMMAND_OK;

			PQclear(res);
			if (ok)
			{
				PQsetNoticeProcessor(conn, quiet, NULL);
				return conn;
			}
		}
		PQfinish(conn);
		sleep(1);
	}
	die("cannot connect to the server for 120 s");
	return NULL;
}

/* runs sql; dies unless it returns status want (and, for rows, one row) */
static PGresult *
exec_or_die(PGconn *conn, const char *sql, int nparams, const char *const *params, ExecStatusType want)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

	if (PQresultStatus(res) != want || (want == PGRES_TUPLES_OK && PQntuples(res) != 1))
		die("%s: %s", sql, PQresultErrorMessage(res));
	return res;
}

static void
consumers_setup(void)
{
	PGconn	   *conn;
	int			i;

	if (nconsumers == 0)
		return;
	/* the first R shards get readers; at least one shard keeps none */
	nreader_shards = nconsumers - 1 > 1 ? nconsumers - 1 : 1;
	if (nreader_shards > nshards - 1)
		nreader_shards = nshards > 1 ? nshards - 1 : 1;
	conn = connect_blocking("histsetup");
	for (i = 0; i < nconsumers; i++)
	{
		Consumer   *k = &consumers[i];
		char		sql[256],
					shard[16];
		const char *params[2];
		PGresult   *res;

		k->id = i + 1;
		k->shard = i % nreader_shards + 1;
		k->c.id = 1000 + k->id;
		k->c.state = C_DOWN;
		k->c.cur_timeout_ms = -1;
		strcpy(k->c.cur_key, "?");
		snprintf(k->reader, sizeof(k->reader), "hc%d", k->id);
		snprintf(shard, sizeof(shard), "h%d", k->shard);
		snprintf(sql, sizeof(sql),
				 "DROP TABLE IF EXISTS history_consumed_%d; "
				 "CREATE TABLE history_consumed_%d (key bytea, val bytea, \"time\" bigint, diff bigint)",
				 k->id, k->id);
		res = PQexec(conn, sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("%s: %s", sql, PQresultErrorMessage(res));
		PQclear(res);
		params[0] = shard;
		params[1] = k->reader;
		res = exec_or_die(conn, "SELECT persist_sink.create_reader($1::text, $2::text)", 2, params, PGRES_TUPLES_OK);
		fprintf(hist, "R\t%d\th%d\t%s\t%s\n", k->id, k->shard, k->reader, PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	PQfinish(conn);
	logmsg("%d consumers on shards h1 to h%d (readers hc1 to hc%d, tables history_consumed_1 to _%d)",
		   nconsumers, nreader_shards, nconsumers, nconsumers);
}

/* one step of a consumer on a blocking connection, recorded; 1 if it committed */
static int
consumer_step_blocking(PGconn *conn, Consumer *k, const char *sql, int nparams,
					   const char *const *params, const char *phase)
{
	Client	   *c = &k->c;
	PGresult   *res;
	int64_t		send_us = now_us();
	int			ok;

	k->step++;
	n_c_calls++;
	c->timeout_ms = 0;
	c->cancel_ms = -1;
	c->cancelled = 0;
	k->lo[0] = k->hi[0] = 0;
	strcpy(k->n, "0");
	res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (ok && PQntuples(res) == 1 && PQnfields(res) == 4)
	{
		snprintf(k->lo, sizeof(k->lo), "%s", PQgetvalue(res, 0, 0));
		snprintf(k->hi, sizeof(k->hi), "%s", PQgetvalue(res, 0, 1));
		snprintf(k->n, sizeof(k->n), "%s", PQgetvalue(res, 0, 2));
	}
	else if (ok && PQntuples(res) == 1)
		snprintf(k->hi, sizeof(k->hi), "%s", PQgetvalue(res, 0, 0));
	if (ok)
	{
		strcpy(c->outcome, "ok");
		strcpy(c->value, "-");
		c->message[0] = 0;
	}
	else
	{
		const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		strcpy(c->outcome, code && PQstatus(conn) == CONNECTION_OK ? "err" : "lost");
		snprintf(c->value, sizeof(c->value), "%s", code ? code : "-");
		flatten(c->message, sizeof(c->message), PQresultErrorMessage(res));
	}
	PQclear(res);
	consumer_record(k, phase, send_us, now_us());
	return ok;
}

/*
 * Once the load is over: each consumer steps until read_next returns
 * nothing and its position is upper - 1; then since is moved once more on
 * each readers' shard, and the readers' final positions are recorded.
 */
static void
consumers_drain(void)
{
	PGconn	   *conn;
	int			i,
				s;
	int64_t		start = now_us();
	long		steps = 0;

	logmsg("draining %d consumers", nconsumers);
	conn = connect_blocking("histdrain");
	for (i = 0; i < nconsumers; i++)
	{
		Consumer   *k = &consumers[i];
		char		sql[1024],
					shard[16],
					pos[32],
					upper[32];
		const char *params[4];
		int			errors = 0,
					ok;

		snprintf(shard, sizeof(shard), "h%d", k->shard);
		params[0] = shard;
		params[1] = k->reader;
		for (;;)
		{
			PGresult   *res;

			if (PQstatus(conn) != CONNECTION_OK)
			{
				PQfinish(conn);
				conn = connect_blocking("histdrain");
			}
			if (errors > 30)
				die("consumer %d: %d failed steps while draining", k->id, errors);
			params[2] = "100000";
			params[3] = "0 ms";
			k->max_updates = 100000;
			k->wait_ms = 0;
			consumer_sql(k->id, 1, sql, sizeof(sql));
			steps++;
			if (!consumer_step_blocking(conn, k, sql, 4, params, "drain"))
			{
				errors++;
				sleep(1);
				continue;
			}
			if (atol(k->n) > 0)
				continue;
			/* nothing more to read: is the position upper - 1? */
			res = PQexecParams(conn,
							   "SELECT r.position, persist_sink.shard_upper(r.shard) FROM persist_sink.readers r "
							   "WHERE r.shard = $1 AND r.reader = $2", 2, NULL, params, NULL, NULL, 0);
			ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
			if (ok)
			{
				snprintf(pos, sizeof(pos), "%s", PQgetvalue(res, 0, 0));
				snprintf(upper, sizeof(upper), "%s", PQgetvalue(res, 0, 1));
			}
			PQclear(res);
			if (!ok)
			{
				errors++;
				sleep(1);
				continue;
			}
			if (atoll(pos) >= atoll(upper) - 1)
				break;

			/*
			 * No update after the position, yet it is below upper - 1 (the
			 * last batches hold nothing): advance to upper - 1, in a statement
			 * that checks that nothing lies between.
			 */
			params[2] = pos;
			steps++;
			if (!consumer_step_blocking(conn, k,
										"SELECT u - 1, persist_sink.advance_reader($1::text, $2::text, u - 1)::text "
										"FROM (SELECT persist_sink.shard_upper($1::text) AS u OFFSET 0) x "
										"WHERE NOT EXISTS (SELECT FROM persist_sink.listen($1::text, $3::bigint, u))",
										3, params, "tail"))
				errors++;
		}
	}

	/* since once more on each readers' shard, then the readers' positions */
	for (s = 1; s <= nreader_shards; s++)
	{
		char		sql[1024],
					upper[32],
					since[32];
		int64_t		send_us = now_us();
		PGresult   *res;

		sincer_sql(s, sql, sizeof(sql));
		*strchr(sql, ';') = 0;	/* the downgrade alone */
		PQclear(exec_or_die(conn, "BEGIN", 0, NULL, PGRES_COMMAND_OK));
		res = exec_or_die(conn, sql, 0, NULL, PGRES_TUPLES_OK);
		snprintf(upper, sizeof(upper), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		snprintf(sql, sizeof(sql), "SELECT persist_sink.shard_since('h%d')", s);
		res = exec_or_die(conn, sql, 0, NULL, PGRES_TUPLES_OK);
		snprintf(since, sizeof(since), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		PQclear(exec_or_die(conn, "COMMIT", 0, NULL, PGRES_COMMAND_OK));
		snprintf(sql, sizeof(sql),
				 "SELECT coalesce(string_agg(reader || '=' || position, ',' ORDER BY reader), '') "
				 "FROM persist_sink.readers WHERE shard = 'h%d'", s);
		res = exec_or_die(conn, sql, 0, NULL, PGRES_TUPLES_OK);
		fprintf(hist, "P\th%d\t%lld\t%lld\t%s\t%s\t%s\n", s, (long long) (send_us - t0),
				(long long) (now_us() - t0), upper, since,
				PQgetvalue(res, 0, 0)[0] ? PQgetvalue(res, 0, 0) : "-");
		PQclear(res);
	}
	for (i = 0; i < nconsumers; i++)
	{
		Consumer   *k = &consumers[i];
		char		shard[16];
		const char *params[2];
		PGresult   *res;

		snprintf(shard, sizeof(shard), "h%d", k->shard);
		params[0] = shard;
		params[1] = k->reader;
		res = exec_or_die(conn,
						  "SELECT r.position, persist_sink.shard_since(r.shard), persist_sink.shard_upper(r.shard) "
						  "FROM persist_sink.readers r WHERE r.shard = $1 AND r.reader = $2",
						  2, params, PGRES_TUPLES_OK);
		fprintf(hist, "D\t%d\th%d\t%s\t%s\t%s\t%s\n", k->id, k->shard, k->reader,
				PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
		logmsg("consumer %d (%s of h%d) drained: position %s, since %s, upper %s", k->id, k->reader,
			   k->shard, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
		PQclear(res);
	}
	PQfinish(conn);
	logmsg("drained in %.1f s (%ld steps)", (now_us() - start) / 1e6, steps);
}

/* ------------------------------------------------------------------ */
/*
 * Table readers: each a process of its own, forked at the start, on a
 * blocking connection; it checks the foreign tables' read shortcuts against
 * the plain forms and snapshot(), in REPEATABLE READ transactions.
 */

/* what the driver shares with its table readers (a shared mapping) */
#define SHARED_WRITES 4096

typedef struct
{
	volatile long next_wid;		/* the writes' next id: keys below it are known */
	struct
	{
		volatile long wid;
		volatile int shard;
		volatile int nrows;
	}			writes[SHARED_WRITES];	/* recent writes, wid modulo SHARED_WRITES */
} Shared;

static Shared *shared;
static pid_t table_reader_pid[MAX_TABLE_READERS];
static char table_reader_out[MAX_TABLE_READERS][1024];

/* a table reader's session and its transaction */
typedef struct
{
	int			id;
	PGconn	   *conn;
	FILE	   *out;
	int64_t		deadline;
	int64_t		send_us;		/* the transaction's start */
	char		shard[16];
	char		as_of[32];		/* of snapshot(): "NULL" (upper - 1) or a time */
	int			retracting;		/* the shard hr, whose diffs go negative */
	int			down;			/* connection attempts failed in a row */
	long		txns,
				checks,
				wrong,
				cut;
} TableReader;

typedef enum
{
	Q_ROWS,						/* a result (rows, or a command's) */
	Q_ERROR,					/* an error; the transaction goes on */
	Q_CUT						/* the transaction is lost (cancel, timeout,
								 * terminated backend, crash) */
} QOutcome;

static PGcancel *volatile tr_cancel;

/* SIGALRM in a table reader: cancels the statement under way (signal safe) */
static void
tr_alarm(int sig)
{
	char		err[64];
	PGcancel   *c = tr_cancel;

	if (c)
		PQcancel(c, err, sizeof(err));
}

/* a cancel ms from now (0: none) */
static void
tr_arm(int ms)
{
	struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000L}};

	setitimer(ITIMER_REAL, &it, NULL);
}

/* one line of the table reader's record: check shard as_of outcome detail */
static void
tr_record(TableReader *t, const char *check, const char *outcome, const char *detail)
{
	char		flat[1200];

	flatten(flat, sizeof(flat), detail);
	fprintf(t->out, "T\t%d\t%lld\t%s\t%s\t%s\t%s\t%s\n", t->id, (long long) (now_us() - t0),
			check, t->shard, t->as_of, outcome, flat[0] ? flat : "-");
}

/* true if a failed statement lost the transaction (cancel, timeout, connection) */
static int
tr_lost(PGconn *conn, PGresult *res)
{
	const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *sev = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);

	return PQstatus(conn) != CONNECTION_OK || !code || !strcmp(code, "57014") ||
		(sev && (!strcmp(sev, "FATAL") || !strcmp(sev, "PANIC")));
}

/* runs a command of the transaction's frame (BEGIN, SET, SAVEPOINT ...); 1 if it succeeded */
static int
tr_command(TableReader *t, const char *sql)
{
	PGresult   *res = PQexec(t->conn, sql);
	int			ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	PQclear(res);
	return ok;
}

/*
 * Runs sql (with one text parameter if param is not NULL) in a savepoint:
 * Q_ROWS with its result in *res (the caller clears it), Q_ERROR with its
 * SQLSTATE in code (rolled back to the savepoint), Q_CUT if the
 * transaction is lost.
 */
static QOutcome
tr_query(TableReader *t, const char *sql, const char *param, PGresult **res, char *code)
{
	PGresult   *r;
	ExecStatusType st;

	if (!tr_command(t, "SAVEPOINT q"))
		return Q_CUT;
	r = param ? PQexecParams(t->conn, sql, 1, NULL, &param, NULL, NULL, 0) : PQexec(t->conn, sql);
	st = PQresultStatus(r);
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		if (!tr_command(t, "RELEASE q"))
		{
			PQclear(r);
			return Q_CUT;
		}
		*res = r;
		return Q_ROWS;
	}
	if (tr_lost(t->conn, r))
	{
		PQclear(r);
		return Q_CUT;
	}
	snprintf(code, 8, "%s", PQresultErrorField(r, PG_DIAG_SQLSTATE));
	PQclear(r);
	return tr_command(t, "ROLLBACK TO SAVEPOINT q") ? Q_ERROR : Q_CUT;
}

/*
 * What sql returns, as text in out: each row's columns separated by '|',
 * a line each, a command's status (MOVE 12), or "error SQLSTATE".  Returns
 * the query's outcome.
 */
static QOutcome
tr_answer(TableReader *t, const char *sql, const char *param, Buf *out)
{
	PGresult   *res = NULL;
	char		code[8];
	QOutcome	q = tr_query(t, sql, param, &res, code);
	int			i,
				j;

	out->len = 0;
	buf_printf(out, "%s", "");
	if (q == Q_ERROR)
		buf_printf(out, "error %s\n", code);
	if (q != Q_ROWS)
		return q;
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
		buf_printf(out, "%s\n", PQcmdStatus(res));
	for (i = 0; i < PQntuples(res); i++)
		for (j = 0; j < PQnfields(res); j++)
			buf_printf(out, "%s%s", PQgetisnull(res, i, j) ? "NULL" : PQgetvalue(res, i, j),
					   j + 1 < PQnfields(res) ? "|" : "\n");
	PQclear(res);
	return q;
}

/* the errors a read may raise on every path alike */
static int
tr_expected_error(const char *answer)
{
	return !strcmp(answer, "error PS002\n") || !strcmp(answer, "error PS003\n") ||
		!strcmp(answer, "error PS004\n");
}

/*
 * Judges the answers of one check (answer[0] by what[0], ...): all equal,
 * rows or an error every path raises (PS002, PS003, PS004), passes; else a
 * violation.  Records it.
 */
static void
tr_judge(TableReader *t, const char *check, int n, const char *const *what, Buf *answer)
{
	Buf			d = {0};
	int			alike = 1,
				i;

	t->checks++;
	for (i = 1; i < n; i++)
		if (strcmp(answer[0].p, answer[i].p) != 0)
			alike = 0;
	if (alike && strncmp(answer[0].p, "error ", 6) != 0)
	{
		int			lines = 0;
		const char *c;

		for (c = answer[0].p; *c; c++)
			lines += *c == '\n';
		buf_printf(&d, "%d lines: %.80s", lines, answer[0].p);
		tr_record(t, check, "same", d.p);
		free(d.p);
		return;
	}
	if (alike && tr_expected_error(answer[0].p))
	{
		tr_record(t, check, "alike", answer[0].p + 6);
		return;
	}
	t->wrong++;
	for (i = 0; i < n; i++)
		buf_printf(&d, "%s%s gave [%.300s%s]", i ? " / " : "", what[i], answer[i].p,
				   answer[i].len > 300 ? "..." : "");
	tr_record(t, check, alike ? "error" : "wrong", d.p);
	free(d.p);
}

/* the snapshot() the transaction compares with, as a FROM item */
static void
tr_snapshot(TableReader *t, char *buf, size_t size)
{
	snprintf(buf, size, "persist_sink.snapshot('%s', %s)", t->shard, t->as_of);
}

/* tells the table readers of a write: its keys are "<wid>-0" and on */
static void
tr_share_write(const Write *w)
{
	if (!shared)
		return;
	shared->writes[w->wid % SHARED_WRITES].shard = w->shard;
	shared->writes[w->wid % SHARED_WRITES].nrows = w->nrows;
	shared->writes[w->wid % SHARED_WRITES].wid = w->wid;
}

/*
 * A key the model knows (mostly of a recent write to the transaction's
 * shard), or an absent one, as text
 */
static void
tr_key(TableReader *t, char *buf, size_t size)
{
	long		wid = rnd_range(1, shared->next_wid + 20);
	int			i,
				s = atoi(t->shard + 1);
	int			ring = !t->retracting && chance(0.85);

	for (i = 0; ring && i < 40; i++)
	{
		int			j = (int) rnd_range(0, SHARED_WRITES - 1);

		if (shared->writes[j].shard == s && shared->writes[j].wid > 0)
		{
			/* up to one past its last row */
			snprintf(buf, size, "%ld-%ld", shared->writes[j].wid, rnd_range(0, shared->writes[j].nrows));
			return;
		}
	}
	if (t->retracting)
		snprintf(buf, size, "r%ld", rnd_range(0, 2100));
	else if (chance(0.08))
		snprintf(buf, size, chance(0.5) ? "%ld" : "%ld-x", wid);	/* absent */
	else
		snprintf(buf, size, "%ld-%ld", wid, chance(0.9) ? rnd_range(0, 55) : rnd_range(0, 2600));
}

/*
 * count(*), sum(diff), min("time"), max("time") (a random mix) of the
 * table, pushed down, against the plain scan's and snapshot()'s; now and
 * then EXPLAIN ANALYZE tells which way the wrapper computed them
 */
static QOutcome
tr_check_aggregates(TableReader *t)
{
	static const char *agg[] = {"count(*)", "sum(diff)", "min(\"time\")", "max(\"time\")"};
	const char *what[3] = {"pushed down", "plain scan", "snapshot()"};
	int			mask = (int) rnd_range(1, 15);
	char		list[128] = "",
				snap[96],
				sql[3][512];
	Buf			a[3] = {{0}};
	QOutcome	q = Q_ROWS;
	int			i;

	/* half of them without count(*): what the state alone may answer */
	if (chance(0.5) && (mask &= ~1) == 0)
		mask = 2;
	for (i = 0; i < 4; i++)
		if (mask & (1 << i))
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", list[0] ? ", " : "", agg[i]);
	tr_snapshot(t, snap, sizeof(snap));
	snprintf(sql[0], sizeof(sql[0]), "SELECT %s FROM public.r_%s", list, t->shard);
	snprintf(sql[1], sizeof(sql[1]), "SELECT %s FROM (SELECT * FROM public.r_%s OFFSET 0) s", list, t->shard);
	snprintf(sql[2], sizeof(sql[2]), "SELECT %s FROM %s", list, snap);
	for (i = 0; i < 3 && q != Q_CUT; i++)
		q = tr_answer(t, sql[i], NULL, &a[i]);
	if (q != Q_CUT)
		tr_judge(t, "aggregates", 3, what, a);
	if (q != Q_CUT && chance(0.3))
	{
		char		explain[600];

		snprintf(explain, sizeof(explain), "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) %s", sql[0]);
		q = tr_answer(t, explain, NULL, &a[0]);
		if (q == Q_ROWS)
			tr_record(t, "explain", strstr(a[0].p, "Computed: from the state") ? "state" :
					  strstr(a[0].p, "Computed: from a merge") ? "merge" : "none", list);
	}
	for (i = 0; i < 3; i++)
		free(a[i].p);
	return q;
}

/*
 * count(*) of the table without a column diff (a row of diff n is n rows,
 * a negative diff raises PS004), pushed down, against the plain scan's and
 * the sum of snapshot()'s diffs
 */
static QOutcome
tr_check_count(TableReader *t)
{
	const char *what[3] = {"pushed down", "plain scan", "snapshot()"};
	char		snap[96],
				sql[3][512];
	Buf			a[3] = {{0}};
	QOutcome	q = Q_ROWS;
	int			i;

	tr_snapshot(t, snap, sizeof(snap));
	snprintf(sql[0], sizeof(sql[0]), "SELECT count(*) FROM public.n_%s", t->shard);
	snprintf(sql[1], sizeof(sql[1]), "SELECT count(*) FROM (SELECT * FROM public.n_%s OFFSET 0) s", t->shard);
	snprintf(sql[2], sizeof(sql[2]),
			 "SELECT CASE WHEN min(diff) < 0 THEN 'error PS004' ELSE coalesce(sum(diff), 0)::text END FROM %s", snap);
	for (i = 0; i < 3 && q != Q_CUT; i++)
		q = tr_answer(t, sql[i], NULL, &a[i]);
	/* snapshot()'s answer to a negative diff reads as the scans' error */
	if (q != Q_CUT)
		tr_judge(t, "count", 3, what, a);
	if (q != Q_CUT && chance(0.3))
	{
		char		explain[600];

		snprintf(explain, sizeof(explain), "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) %s", sql[0]);
		q = tr_answer(t, explain, NULL, &a[0]);
		if (q == Q_ROWS)
			tr_record(t, "explain", strstr(a[0].p, "Computed: from the state") ? "state" :
					  strstr(a[0].p, "Computed: from a merge") ? "merge" : "none", "count(*) without diff");
	}
	for (i = 0; i < 3; i++)
		free(a[i].p);
	return q;
}

/*
 * The first n rows of a table (LIMIT n, a scan that stops early) against
 * snapshot()'s first n by key and val; of a table without a column diff,
 * each snapshot row of diff d counts d times, and a negative one reached
 * raises PS004.  Now and then EXISTS instead.
 */
static QOutcome
tr_check_limit(TableReader *t)
{
	char		which[64];
	const char *what[2] = {which, "snapshot()"};
	long		n = chance(0.5) ? rnd_range(0, 20) : rnd_range(0, 2000);
	int			nodiff = chance(0.3);
	char		snap[96],
				sql[2][512],
				check[32];
	Buf			a[2] = {{0}};
	QOutcome	q;

	tr_snapshot(t, snap, sizeof(snap));
	snprintf(which, sizeof(which), "the table (LIMIT %ld)", n);
	if (chance(0.15))
	{
		snprintf(which, sizeof(which), "the table (EXISTS)");
		snprintf(check, sizeof(check), "exists");
		snprintf(sql[0], sizeof(sql[0]), "SELECT EXISTS (SELECT 1 FROM public.%s_%s)", nodiff ? "n" : "r", t->shard);
		snprintf(sql[1], sizeof(sql[1]), nodiff ?
				 "SELECT CASE WHEN (SELECT diff FROM %s ORDER BY key, val LIMIT 1) < 0 THEN 'error PS004' "
				 "ELSE EXISTS (SELECT 1 FROM %s)::text END" :
				 "SELECT EXISTS (SELECT 1 FROM %s)::text %.0s", snap, snap);
		q = tr_answer(t, sql[0], NULL, &a[0]);
		if (q != Q_CUT)
			q = tr_answer(t, sql[1], NULL, &a[1]);
		if (q != Q_CUT)
		{
			/* EXISTS answers t or f; the CASE's text, true or false */
			if (!strcmp(a[1].p, "true\n") || !strcmp(a[1].p, "false\n"))
			{
				a[1].p[1] = 0;
				a[1].len = 1;
				buf_printf(&a[1], "\n");
			}
			tr_judge(t, check, 2, what, a);
		}
		free(a[0].p);
		free(a[1].p);
		return q;
	}
	snprintf(check, sizeof(check), nodiff ? "limit without diff" : "limit");
	if (!nodiff)
	{
		snprintf(sql[0], sizeof(sql[0]), "SELECT key, val, diff FROM public.r_%s LIMIT %ld", t->shard, n);
		snprintf(sql[1], sizeof(sql[1]), "SELECT key, val, diff FROM %s ORDER BY key, val LIMIT %ld", snap, n);
		q = tr_answer(t, sql[0], NULL, &a[0]);
		if (q != Q_CUT)
			q = tr_answer(t, sql[1], NULL, &a[1]);
	}
	else
	{
		PGresult   *res = NULL;
		char		code[8];
		long		emitted = 0;
		int			i;

		snprintf(sql[0], sizeof(sql[0]), "SELECT key, val FROM public.n_%s LIMIT %ld", t->shard, n);
		snprintf(sql[1], sizeof(sql[1]), "SELECT key, val, diff FROM %s ORDER BY key, val LIMIT %ld", snap, n);
		q = tr_answer(t, sql[0], NULL, &a[0]);
		if (q != Q_CUT)
			q = tr_query(t, sql[1], NULL, &res, code);
		if (q == Q_ERROR)
			buf_printf(&a[1], "error %s\n", code);
		else if (q == Q_ROWS)
		{
			buf_printf(&a[1], "%s", "");
			for (i = 0; i < PQntuples(res) && emitted < n; i++)
			{
				long		d = atol(PQgetvalue(res, i, 2));

				if (d < 0)
				{
					a[1].len = 0;
					buf_printf(&a[1], "error PS004\n");
					break;
				}
				for (; d > 0 && emitted < n; d--, emitted++)
					buf_printf(&a[1], "%s|%s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
			}
			PQclear(res);
		}
	}
	if (q != Q_CUT)
		tr_judge(t, check, 2, what, a);
	free(a[0].p);
	free(a[1].p);
	return q;
}

/*
 * A cursor over the table fetched in chunks of random sizes (now and then
 * a MOVE), against a cursor over snapshot() ordered by key and val;
 * closed at a random point or at the end
 */
static QOutcome
tr_check_cursor(TableReader *t)
{
	const char *what[2] = {"the table's cursor", "snapshot()'s cursor"};
	char		snap[96],
				sql[2][512];
	Buf			a[2] = {{0}};
	QOutcome	q;
	long		rows = 0;

	tr_snapshot(t, snap, sizeof(snap));
	snprintf(sql[0], sizeof(sql[0]), "DECLARE ct NO SCROLL CURSOR FOR SELECT key, val, diff FROM public.r_%s", t->shard);
	snprintf(sql[1], sizeof(sql[1]), "DECLARE cs NO SCROLL CURSOR FOR SELECT key, val, diff FROM %s ORDER BY key, val", snap);
	q = tr_answer(t, sql[0], NULL, &a[0]);
	if (q == Q_ROWS)
		q = tr_answer(t, sql[1], NULL, &a[1]);
	if (q == Q_ERROR)
		q = Q_CUT;				/* a DECLARE reads nothing: no error is expected */
	while (q != Q_CUT)
	{
		long		k = chance(0.8) ? rnd_range(1, 200) : rnd_range(200, 3000);
		int			move = chance(0.1);

		snprintf(sql[0], sizeof(sql[0]), "%s %ld %s ct", move ? "MOVE FORWARD" : "FETCH", k, move ? "IN" : "FROM");
		snprintf(sql[1], sizeof(sql[1]), "%s %ld %s cs", move ? "MOVE FORWARD" : "FETCH", k, move ? "IN" : "FROM");
		q = tr_answer(t, sql[0], NULL, &a[0]);
		if (q != Q_CUT)
			q = tr_answer(t, sql[1], NULL, &a[1]);
		if (q == Q_CUT)
			break;
		rows += k;
		/* a difference, an error, the end (FETCH: no row; MOVE 0), or enough */
		if (strcmp(a[0].p, a[1].p) != 0 || q == Q_ERROR || a[0].len == 0 ||
			!strcmp(a[0].p, "MOVE 0\n") || chance(0.15) || rows > 20000)
			break;
	}
	if (q != Q_CUT)
	{
		tr_judge(t, "cursor", 2, what, a);
		if (tr_answer(t, "CLOSE ct", NULL, &a[0]) == Q_CUT ||
			tr_answer(t, "CLOSE cs", NULL, &a[0]) == Q_CUT)
			q = Q_CUT;
	}
	free(a[0].p);
	free(a[1].p);
	return q;
}

/*
 * A point lookup key = K (a key the model knows, or an absent one; now
 * and then as a parameter, now and then twice: the second from the block
 * cache) against snapshot() filtered alike
 */
static QOutcome
tr_check_lookup(TableReader *t)
{
	char		where[128];
	const char *what[3] = {where, "snapshot()", "the table again"};
	char		key[64],
				snap[96],
				sql[2][512];
	Buf			a[3] = {{0}};
	int			param = chance(0.25),
				n = chance(0.3) ? 3 : 2,
				i;
	QOutcome	q;

	tr_key(t, key, sizeof(key));
	snprintf(where, sizeof(where), "the table WHERE key = '%s'%s", key, param ? " (a parameter)" : "");
	tr_snapshot(t, snap, sizeof(snap));
	if (param)
		snprintf(sql[0], sizeof(sql[0]), "SELECT key, val, diff FROM public.r_%s WHERE key = $1::bytea", t->shard);
	else
		snprintf(sql[0], sizeof(sql[0]), "SELECT key, val, diff FROM public.r_%s WHERE key = '%s'::bytea", t->shard, key);
	snprintf(sql[1], sizeof(sql[1]), "SELECT key, val, diff FROM %s WHERE key = '%s'::bytea ORDER BY key, val", snap, key);
	q = tr_answer(t, sql[0], param ? key : NULL, &a[0]);
	if (q != Q_CUT)
		q = tr_answer(t, sql[1], NULL, &a[1]);
	if (q != Q_CUT && n == 3)
		q = tr_answer(t, sql[0], param ? key : NULL, &a[2]);
	if (q != Q_CUT)
		tr_judge(t, "lookup", n, what, a);
	for (i = 0; i < 3; i++)
		free(a[i].p);
	return q;
}

/*
 * A range of keys (one write's keys, or between two random keys, with
 * >, >=, <, <=, BETWEEN or no upper bound) against snapshot() filtered
 * alike: the rows' count and a digest of them in the order read
 */
static QOutcome
tr_check_range(TableReader *t)
{
	char		where[300];
	const char *what[2] = {where, "snapshot()"};
	char		lo[64],
				hi[64],
				cond[256],
				snap[96],
				sql[2][768];
	Buf			a[2] = {{0}};
	QOutcome	q;
	int			form = (int) rnd_range(0, 9);

	tr_key(t, lo, sizeof(lo));
	tr_key(t, hi, sizeof(hi));
	if (!t->retracting && form < 5)
	{
		/* one write's keys: "<wid>-" up to "<wid>." */
		if (strchr(lo, '-'))
			*strchr(lo, '-') = 0;
		snprintf(cond, sizeof(cond), "key >= '%s-'::bytea AND key < '%s.'::bytea", lo, lo);
	}
	else if (form < 8)
		snprintf(cond, sizeof(cond), "key %s '%s'::bytea AND key %s '%s'::bytea",
				 chance(0.5) ? ">=" : ">", lo, chance(0.5) ? "<" : "<=", hi);
	else if (form < 9)
		snprintf(cond, sizeof(cond), "key BETWEEN '%s'::bytea AND '%s'::bytea", lo, hi);
	else
		snprintf(cond, sizeof(cond), "key >= '%s'::bytea", lo);
	snprintf(where, sizeof(where), "the table WHERE %s", cond);
	tr_snapshot(t, snap, sizeof(snap));
	snprintf(sql[0], sizeof(sql[0]),
			 "SELECT count(*), md5(string_agg(key || '\\x00'::bytea || val || int8send(diff), ''::bytea)) "
			 "FROM (SELECT key, val, diff FROM public.r_%s WHERE %s) s", t->shard, cond);
	snprintf(sql[1], sizeof(sql[1]),
			 "SELECT count(*), md5(string_agg(key || '\\x00'::bytea || val || int8send(diff), ''::bytea)) "
			 "FROM (SELECT key, val, diff FROM %s WHERE %s ORDER BY key, val) s", snap, cond);
	q = tr_answer(t, sql[0], NULL, &a[0]);
	if (q != Q_CUT)
		q = tr_answer(t, sql[1], NULL, &a[1]);
	if (q != Q_CUT)
		tr_judge(t, "range", 2, what, a);
	free(a[0].p);
	free(a[1].p);
	return q;
}

/* an append to hr, the shard of retractions: keys r0 to r1999, diffs -2 to 3 */
static void
tr_write_retractions(TableReader *t)
{
	Buf			k = {0},
				v = {0},
				d = {0};
	int			n = chance(0.9) ? (int) rnd_range(1, 100) : (int) rnd_range(100, 3000),
				i;
	static const int diffs[] = {-2, -1, -1, 1, 1, 2, 3};
	const char *params[3];
	PGresult   *res;

	buf_printf(&k, "{");
	buf_printf(&v, "{");
	buf_printf(&d, "{");
	for (i = 0; i < n; i++)
	{
		buf_printf(&k, "%sr%ld", i ? "," : "", rnd_range(0, 1999));
		buf_printf(&v, "%sv%ld", i ? "," : "", rnd_range(0, 2));
		buf_printf(&d, "%s%d", i ? "," : "", diffs[rnd_range(0, 6)]);
	}
	buf_printf(&k, "}");
	buf_printf(&v, "}");
	buf_printf(&d, "}");
	params[0] = k.p;
	params[1] = v.p;
	params[2] = d.p;
	snprintf(t->shard, sizeof(t->shard), "hr");
	strcpy(t->as_of, "-");
	if (faults && chance(0.08))
		tr_arm((int) rnd_range(1, 100));
	/* now and then since moves: times more than 2 s old merge into one */
	res = chance(0.05) ?
		PQexec(t->conn, "SELECT persist_sink.downgrade_since('hr', greatest(persist_sink.shard_since('hr'), "
			   "persist_sink.shard_upper('hr') - 2000))::text") :
		PQexecParams(t->conn, "SELECT persist_sink.append('hr', $1::text[], $2::text[], $3::bigint[])",
					 3, NULL, params, NULL, NULL, 0);
	tr_arm(0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		tr_record(t, "write", "ok", "");
	else if (tr_lost(t->conn, res) || !strcmp(PQresultErrorField(res, PG_DIAG_SQLSTATE), "40003"))
		tr_record(t, "write", "cut", PQresultErrorMessage(res));
	else
	{
		char		m[600];

		snprintf(m, sizeof(m), "%s %s", PQresultErrorField(res, PG_DIAG_SQLSTATE), PQresultErrorMessage(res));
		tr_record(t, "write", "error", m);
	}
	PQclear(res);
	free(k.p);
	free(v.p);
	free(d.p);
}

/*
 * One REPEATABLE READ transaction on a random shard (one of the checker's,
 * or hr) and as_of (upper - 1, or a time between since and upper - 1 set
 * as persist_sink.as_of): 1 to 4 checks, all of one snapshot
 */
static void
tr_transaction(TableReader *t)
{
	int			s = (int) rnd_range(0, nshards);	/* 0: hr */
	int			cancel_ms = faults && chance(0.08) ? (int) rnd_range(1, 300) : 0;
	int			timeout_ms = faults && chance(0.08) ? (int) rnd_range(1, 50) : 30000;
	int			nchecks = (int) rnd_range(1, 4),
				i;
	char		sql[256],
				code[8];
	PGresult   *res = NULL;
	QOutcome	q;
	long long	since,
				upper;

	t->txns++;
	t->retracting = s == 0;
	if (s == 0)
		snprintf(t->shard, sizeof(t->shard), "hr");
	else
		snprintf(t->shard, sizeof(t->shard), "h%d", s);
	strcpy(t->as_of, "NULL");
	t->send_us = now_us();
	snprintf(sql, sizeof(sql), "BEGIN ISOLATION LEVEL REPEATABLE READ; SET LOCAL statement_timeout = %d", timeout_ms);
	if (cancel_ms)
		tr_arm(cancel_ms);
	if (!tr_command(t, sql))
		goto cut;
	snprintf(sql, sizeof(sql), "SELECT persist_sink.shard_since('%s'), persist_sink.shard_upper('%s')",
			 t->shard, t->shard);
	q = tr_query(t, sql, NULL, &res, code);
	if (q != Q_ROWS)
		goto cut;
	since = atoll(PQgetvalue(res, 0, 0));
	upper = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);
	if (chance(0.3) && upper - 1 > since)
	{
		long long	a = upper - 1 - rnd_range(0, 3000);

		snprintf(t->as_of, sizeof(t->as_of), "%lld", a > since ? a : since);
		snprintf(sql, sizeof(sql), "SET LOCAL persist_sink.as_of = '%s'", t->as_of);
		if (!tr_command(t, sql))
			goto cut;
	}
	for (i = 0; i < nchecks; i++)
	{
		long		kind = rnd_range(0, 99);

		q = kind < 25 ? tr_check_aggregates(t) :
			kind < 40 ? tr_check_count(t) :
			kind < 55 ? tr_check_limit(t) :
			kind < 70 ? tr_check_cursor(t) :
			kind < 85 ? tr_check_lookup(t) : tr_check_range(t);
		if (q == Q_CUT)
			goto cut;
	}
	res = PQexec(t->conn, "COMMIT");
	tr_arm(0);
	if (PQresultStatus(res) == PGRES_COMMAND_OK)
		tr_record(t, "transaction", "committed", "");
	else if (tr_lost(t->conn, res))
		tr_record(t, "transaction", "cut", PQresultErrorMessage(res));
	else
		tr_record(t, "transaction", "error", PQresultErrorMessage(res));
	PQclear(res);
	return;
cut:
	tr_arm(0);
	t->cut++;
	tr_record(t, "transaction", "cut", PQstatus(t->conn) == CONNECTION_OK ? "" : "connection lost");
	if (PQstatus(t->conn) == CONNECTION_OK)
		PQclear(PQexec(t->conn, "ROLLBACK"));
}

/* connects (again); 0 if the server does not answer (a crash's restart) */
static int
tr_connect(TableReader *t)
{
	char		ci[768];
	PGresult   *res;

	if (t->conn)
	{
		tr_cancel = NULL;
		PQfinish(t->conn);
		t->conn = NULL;
	}
	snprintf(ci, sizeof(ci), "%s application_name=histtable%d", conninfo_base, t->id);
	t->conn = PQconnectdb(ci);
	if (PQstatus(t->conn) != CONNECTION_OK)
		return 0;
	PQsetNoticeProcessor(t->conn, quiet, NULL);
	res = PQexec(t->conn, "SET statement_timeout = 30000");
	PQclear(res);
	tr_cancel = PQgetCancel(t->conn);
	return PQstatus(t->conn) == CONNECTION_OK;
}

/* a table reader's process: transactions (and writes to hr) until the deadline */
static void
table_reader_main(TableReader *t)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = tr_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	while (now_us() < t->deadline)
	{
		if (!t->conn || PQstatus(t->conn) != CONNECTION_OK)
		{
			if (!tr_connect(t))
			{
				t->down++;
				usleep(rnd_range(50, 300) * 1000L);
				continue;
			}
			t->down = 0;
		}
		if (chance(0.5))
			tr_write_retractions(t);
		else
			tr_transaction(t);
		usleep(rnd_range(0, 150) * 1000L);
	}
	if (t->conn)
		PQfinish(t->conn);
}

/* creates hr and the foreign tables the table readers read */
static void
table_readers_setup(void)
{
	PGconn	   *conn;
	PGresult   *res;
	char		sql[512];
	int			s;

	if (ntable_readers == 0)
		return;
	conn = connect_blocking("histsetup");
	res = PQexec(conn, "SELECT persist_sink.create_shard('hr') WHERE NOT EXISTS "
				 "(SELECT FROM persist_sink.shards WHERE name = 'hr')");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		die("creating hr: %s", PQresultErrorMessage(res));
	PQclear(res);
	for (s = 0; s <= nshards; s++)
	{
		char		shard[16];

		if (s == 0)
			snprintf(shard, sizeof(shard), "hr");
		else
			snprintf(shard, sizeof(shard), "h%d", s);
		snprintf(sql, sizeof(sql),
				 "CREATE FOREIGN TABLE IF NOT EXISTS public.r_%s (key bytea, val bytea, diff bigint, \"time\" bigint) "
				 "SERVER persist_sink OPTIONS (shard '%s'); "
				 "CREATE FOREIGN TABLE IF NOT EXISTS public.n_%s (key bytea, val bytea) "
				 "SERVER persist_sink OPTIONS (shard '%s')", shard, shard, shard, shard);
		res = PQexec(conn, sql);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("%s: %s", sql, PQresultErrorMessage(res));
		PQclear(res);
	}
	PQfinish(conn);
}

/* forks the table readers; each writes its record to <out>.tr<i> */
static void
table_readers_start(const char *out, uint64_t seed, int64_t deadline)
{
	int			i;

	shared = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	shared->next_wid = next_wid;
	fflush(hist);
	fflush(stderr);
	for (i = 0; i < ntable_readers; i++)
	{
		snprintf(table_reader_out[i], sizeof(table_reader_out[i]), "%s.tr%d", out, i + 1);
		table_reader_pid[i] = fork();
		if (table_reader_pid[i] < 0)
			die("fork: %s", strerror(errno));
		if (table_reader_pid[i] == 0)
		{
			TableReader t = {0};

			t.id = i + 1;
			t.deadline = deadline;
			t.out = fopen(table_reader_out[i], "w");
			if (!t.out)
				_exit(3);
			rng_state = seed ^ (0x5851F42D4C957F2DULL * (uint64_t) (i + 1));
			table_reader_main(&t);
			logmsg("table reader %d: %ld transactions (%ld cut by faults), %ld checks, %ld wrong",
				   t.id, t.txns, t.cut, t.checks, t.wrong);
			fclose(t.out);
			_exit(0);
		}
	}
	logmsg("%d table readers on h1 to h%d and hr (foreign tables r_<shard>, n_<shard>)",
		   ntable_readers, nshards);
}

/* waits for the table readers and appends their records to the history */
static void
table_readers_finish(void)
{
	int			i;

	for (i = 0; i < ntable_readers; i++)
	{
		int			status;
		FILE	   *f;
		char		line[4096];

		if (waitpid(table_reader_pid[i], &status, 0) != table_reader_pid[i] ||
			!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			die("table reader %d failed", i + 1);
		f = fopen(table_reader_out[i], "r");
		if (!f)
			die("cannot read %s", table_reader_out[i]);
		while (fgets(line, sizeof(line), f))
			fputs(line, hist);
		fclose(f);
		unlink(table_reader_out[i]);
	}
}

/* ------------------------------------------------------------------ */

int
main(int argc, char **argv)
{
	const char *out = NULL;
	long		seconds = 60;
	uint64_t	seed = (uint64_t) time(NULL);
	int64_t		deadline,
				hard_deadline,
				next_crash;
	int			i;
	struct pollfd *pfd;
	int		   *owner;

	for (i = 1; i < argc; i++)
	{
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atol(argv[++i]);
		else if (!strcmp(argv[i], "--clients") && i + 1 < argc)
			nclients = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--shards") && i + 1 < argc)
			nshards = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--pgdata") && i + 1 < argc)
			pgdata = argv[++i];
		else if (!strcmp(argv[i], "--pglog") && i + 1 < argc)
			pglog = argv[++i];
		else if (!strcmp(argv[i], "--think-ms") && i + 1 < argc)
			think_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-crash"))
			crashes = 0;
		else if (!strcmp(argv[i], "--no-faults"))
			faults = crashes = 0;
		else if (!strcmp(argv[i], "--consumers") && i + 1 < argc)
			nconsumers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--break-consumers"))
			break_consumers = 1;
		else if (!strcmp(argv[i], "--tables") && i + 1 < argc)
			table_share = atof(argv[++i]);
		else if (!strcmp(argv[i], "--table-readers") && i + 1 < argc)
			ntable_readers = atoi(argv[++i]);
		else
			die("unknown argument %s", argv[i]);
	}
	if (!out || (crashes && (!pgdata || !pglog)))
		die("usage: driver --out FILE [--seconds N] [--clients N] [--shards N] [--seed S] --pgdata DIR --pglog FILE [--think-ms N] [--no-crash] [--no-faults] [--consumers N] [--break-consumers] [--tables F] [--table-readers N]");
	if (nclients < 2 || nclients > MAX_CLIENTS)
		die("--clients takes 2 to %d", MAX_CLIENTS);
	if (nconsumers < 0 || nconsumers > MAX_CONSUMERS)
		die("--consumers takes 0 to %d", MAX_CONSUMERS);
	if (ntable_readers < 0 || ntable_readers > MAX_TABLE_READERS)
		die("--table-readers takes 0 to %d", MAX_TABLE_READERS);
	rng_state = seed;
	hist = fopen(out, "w");
	if (!hist)
		die("cannot write %s: %s", out, strerror(errno));
	setvbuf(hist, NULL, _IOFBF, 1 << 16);
	snprintf(conninfo_base, sizeof(conninfo_base), "connect_timeout=10");
	signal(SIGPIPE, SIG_IGN);

	t0 = now_us();
	deadline = t0 + seconds * 1000000L;
	hard_deadline = deadline + 120 * 1000000L;
	/* the first crash in the second quarter of the run, then every 25-60 s */
	next_crash = crashes ? t0 + seconds * 1000000L * rnd_range(20, 40) / 100 : INT64_MAX;
	fprintf(hist, "S\tseed\t%llu\n", (unsigned long long) seed);
	consumers_setup();
	table_readers_setup();
	if (ntable_readers > 0)
		table_readers_start(out, seed, deadline);

	for (i = 0; i < nclients; i++)
	{
		clients[i].id = i;
		clients[i].state = C_DOWN;
		clients[i].next_at = 0;
		clients[i].cur_timeout_ms = -1;
	}
	term.c.state = C_DOWN;
	term.c.id = -1;
	holder.c.state = C_DOWN;
	holder.c.id = -2;

	sincer.c.state = C_DOWN;
	sincer.c.id = -3;

	pfd = calloc(nclients + 3 + nconsumers, sizeof(struct pollfd));
	owner = calloc(nclients + 3 + nconsumers, sizeof(int));

	for (;;)
	{
		int64_t		now = now_us();
		int			n = 0,
					busy = 0;
		int64_t		wake = now + 50000;

		if (shared)
			shared->next_wid = next_wid;

		if (!draining && now >= deadline)
		{
			draining = 1;
			logmsg("load over: %ld calls; finishing the writes under way", n_calls);
			if (holder.c.conn && holder.step == 2)
				holder.release_at = now;
		}
		if (now >= hard_deadline)
		{
			logmsg("giving up on writes still under way (hard deadline)");
			break;
		}
		if (restarter > 0)
		{
			int			status;

			if (waitpid(restarter, &status, WNOHANG) == restarter)
			{
				restarter = 0;
				if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
					die("the server did not start again after a crash");
				logmsg("server started again");
			}
		}
		if (!draining && now >= next_crash && restarter == 0)
		{
			crash(now);
			next_crash = now + rnd_range(25, 60) * 1000000L;
			if (next_crash > deadline - 10 * 1000000L)
				next_crash = INT64_MAX;
		}

		/* clients */
		for (i = 0; i < nclients; i++)
		{
			Client	   *c = &clients[i];
			char		app[32];

			if (c->state == C_CONNECTING && now - c->send_us > 10 * 1000000L)
				conn_close(c, now);	/* a connection attempt unanswered for 10 s */
			if (c->state == C_DOWN)
			{
				if (draining && !c->w)
					continue;
				if (now >= c->next_at && restarter == 0)
				{
					snprintf(app, sizeof(app), "histclient%d", i);
					c->send_us = now;
					conn_start(c, app);
				}
			}
			if (c->state == C_IDLE)
			{
				if (c->w)
				{
					/* a retry after reconnecting */
					client_begin_attempt(c, now);
				}
				else if (!draining && now >= c->think_until)
					client_new_write(c, now);
				else if (!draining && c->think_until < wake)
					wake = c->think_until;
			}
			if (c->state == C_WAITING)
			{
				if (now >= c->next_at)
				{
					c->state = C_IDLE;
					client_begin_attempt(c, now);
				}
				else if (c->next_at < wake)
					wake = c->next_at;
			}
			if (c->state == C_CALLING && c->cancel_at && now >= c->cancel_at && !c->cancelled && !c->got_result)
			{
				char		err[256];

				c->cancelled = 1;
				n_cancels++;
				if (c->cancel)
					PQcancel(c->cancel, err, sizeof(err));
			}
			if (c->state == C_CALLING && c->got_result && !c->conn)
				continue;
			if (c->state == C_CALLING && c->cancel_at && !c->cancelled && c->cancel_at < wake)
				wake = c->cancel_at;
			if (c->state == C_DOWN && c->next_at < wake)
				wake = c->next_at;
			if (c->w || c->state == C_CONNECTING)
				busy++;
			/*
			 * A connection libpq found broken (a write to a backend that was
			 * killed while the client was idle) may have no socket left to
			 * poll: it is lost now.  A call unanswered for 60 s (the
			 * statement_timeout is 30 s at most) is given up as unknown.
			 */
			if (c->conn && (c->state == C_SETTING || c->state == C_CALLING) &&
				(PQsocket(c->conn) < 0 || PQstatus(c->conn) == CONNECTION_BAD))
			{
				client_lost(c, now);
				continue;
			}
			if (c->state == C_CALLING && c->conn && !c->got_result && now - c->send_us > 60 * 1000000L)
			{
				strcpy(c->outcome, "lost");
				strcpy(c->value, "hung");
				snprintf(c->message, sizeof(c->message), "no answer in 60 s");
				c->got_result = 1;
				n_hung++;
				client_lost(c, now);
				continue;
			}
			if (c->conn && (c->state == C_CONNECTING || c->state == C_SETTING || c->state == C_CALLING))
			{
				pfd[n].fd = PQsocket(c->conn);
				pfd[n].events = (c->state == C_CONNECTING && c->poll == PGRES_POLLING_WRITING) ? POLLOUT : POLLIN;
				pfd[n].revents = 0;
				owner[n] = i;
				n++;
			}
		}
		/* consumers: no new step once the load is over */
		for (i = 0; i < nconsumers; i++)
		{
			Consumer   *k = &consumers[i];
			Client	   *c = &k->c;
			char		app[32];

			if (c->state == C_CONNECTING && now - c->send_us > 10 * 1000000L)
				conn_close(c, now);
			if (c->state == C_DOWN && !draining && now >= c->next_at && restarter == 0)
			{
				snprintf(app, sizeof(app), "histconsumer%d", k->id);
				c->send_us = now;
				conn_start(c, app);
			}
			if (c->state == C_IDLE && !draining)
			{
				if (now >= k->pause_until)
					consumer_begin(k, now);
				else if (k->pause_until < wake)
					wake = k->pause_until;
			}
			if (c->state == C_CALLING && c->cancel_at && now >= c->cancel_at && !c->cancelled && !c->got_result)
			{
				char		err[256];

				c->cancelled = 1;
				if (c->cancel)
					PQcancel(c->cancel, err, sizeof(err));
			}
			if (c->state == C_CALLING && c->cancel_at && !c->cancelled && c->cancel_at < wake)
				wake = c->cancel_at;
			if (c->state == C_DOWN && !draining && c->next_at < wake)
				wake = c->next_at;
			if (c->state == C_SETTING || c->state == C_CALLING)
				busy++;
			if (c->conn && (c->state == C_SETTING || c->state == C_CALLING) &&
				(PQsocket(c->conn) < 0 || PQstatus(c->conn) == CONNECTION_BAD))
			{
				consumer_lost(k, now);
				continue;
			}
			if (c->state == C_CALLING && c->conn && now - c->send_us > 60 * 1000000L)
			{
				strcpy(c->outcome, "lost");
				strcpy(c->value, "hung");
				snprintf(c->message, sizeof(c->message), "no answer in 60 s");
				c->got_result = 1;
				n_c_hung++;
				consumer_lost(k, now);
				continue;
			}
			if (c->conn && (c->state == C_CONNECTING || c->state == C_SETTING || c->state == C_CALLING))
			{
				pfd[n].fd = PQsocket(c->conn);
				pfd[n].events = (c->state == C_CONNECTING && c->poll == PGRES_POLLING_WRITING) ? POLLOUT : POLLIN;
				pfd[n].revents = 0;
				owner[n] = -100 - i;
				n++;
			}
		}
		if (draining && busy == 0)
			break;

		/* the since mover (not a fault: it runs with --no-faults too) */
		if (nreader_shards > 0)
		{
			Sincer	   *k = &sincer;

			if (k->c.state == C_DOWN && now >= k->c.next_at && restarter == 0 && !draining)
				conn_start(&k->c, "histsince");
			if (k->c.state == C_IDLE)
				sincer_tick(k, now);
			if (k->c.state == C_IDLE && k->step == 0 && !draining && k->c.next_at < wake)
				wake = k->c.next_at;
			if (k->c.conn && (k->c.state == C_CONNECTING || k->c.state == C_CALLING))
			{
				pfd[n].fd = PQsocket(k->c.conn);
				pfd[n].events = (k->c.state == C_CONNECTING && k->c.poll == PGRES_POLLING_WRITING) ? POLLOUT : POLLIN;
				pfd[n].revents = 0;
				owner[n] = -3;
				n++;
			}
		}

		/* control sessions */
		if (faults)
		{
			Control    *ks[2] = {&term, &holder};
			int			j;

			for (j = 0; j < 2; j++)
			{
				Control    *k = ks[j];

				if (k->c.state == C_DOWN && now >= k->c.next_at && restarter == 0 &&
					!(draining && k->step == 0))
				{
					conn_start(&k->c, j == 0 ? "histterminator" : "histholder");
				}
				if (k->c.state == C_IDLE)
					control_tick(k, now);
				if (k->c.state == C_IDLE && k->step == 2 && k->release_at < wake)
					wake = k->release_at;
				if (k->c.state == C_IDLE && k->step == 0 && k->c.next_at < wake)
					wake = k->c.next_at;
				if (k->c.conn && (k->c.state == C_CONNECTING || k->c.state == C_CALLING))
				{
					pfd[n].fd = PQsocket(k->c.conn);
					pfd[n].events = (k->c.state == C_CONNECTING && k->c.poll == PGRES_POLLING_WRITING) ? POLLOUT : POLLIN;
					pfd[n].revents = 0;
					owner[n] = -1 - j;
					n++;
				}
			}
		}

		{
			int			ms = (int) ((wake - now) / 1000);

			if (ms < 0)
				ms = 0;
			if (ms > 50)
				ms = 50;
			if (poll(pfd, n, ms) < 0 && errno != EINTR)
				die("poll: %s", strerror(errno));
		}
		now = now_us();
		for (i = 0; i < n; i++)
		{
			Client	   *c;

			if (!pfd[i].revents)
				continue;
			if (owner[i] >= 0)
			{
				c = &clients[owner[i]];
				if (c->state == C_CONNECTING)
				{
					if (conn_poll(c))
						c->state = C_IDLE;
				}
				else
					client_input(c, now);
			}
			else if (owner[i] <= -100)
			{
				Consumer   *k = &consumers[-100 - owner[i]];

				if (k->c.state == C_CONNECTING)
				{
					if (conn_poll(&k->c))
					{
						k->c.state = C_IDLE;
						n_connects--;
					}
				}
				else
					consumer_input(k, now);
			}
			else if (owner[i] == -3)
			{
				if (sincer.c.state == C_CONNECTING)
				{
					if (conn_poll(&sincer.c))
					{
						sincer.c.state = C_IDLE;
						sincer.step = 0;
						n_connects--;
					}
				}
				else
					sincer_input(&sincer, now);
			}
			else
			{
				Control    *k = owner[i] == -1 ? &term : &holder;

				if (k->c.state == C_CONNECTING)
				{
					if (conn_poll(&k->c))
					{
						k->c.state = C_IDLE;
						k->step = 0;
						n_connects--;
					}
				}
				else
					control_drain(k, now);
			}
		}
	}

	if (restarter > 0)
		waitpid(restarter, NULL, 0);
	for (i = 0; i < nclients; i++)
		if (clients[i].conn)
			PQfinish(clients[i].conn);
	if (term.c.conn)
		PQfinish(term.c.conn);
	if (holder.c.conn)
		PQfinish(holder.c.conn);
	if (sincer.c.conn)
		PQfinish(sincer.c.conn);
	for (i = 0; i < nconsumers; i++)
	{
		Consumer   *k = &consumers[i];

		if (k->c.state == C_CALLING)
		{
			/* given up at the hard deadline */
			strcpy(k->c.outcome, "lost");
			strcpy(k->c.value, "hung");
			snprintf(k->c.message, sizeof(k->c.message), "given up at the hard deadline");
			n_c_hung++;
			consumer_lost(k, now_us());
		}
		if (k->c.conn)
			PQfinish(k->c.conn);
		k->c.conn = NULL;
	}
	table_readers_finish();
	fprintf(hist, "S\ttable_readers\t%d\nS\ttable_reader_terminates\t%ld\n", ntable_readers, n_t_terminates);
	fprintf(hist, "S\tcalls\t%ld\nS\tretries\t%ld\nS\twrites\t%ld\nS\tterminates\t%ld\n"
			"S\tcancels\t%ld\nS\tstate_row_holds\t%ld\nS\ttable_locks\t%ld\nS\traces_equal\t%ld\n"
			"S\traces_other\t%ld\nS\tcrashes\t%ld\nS\tconnects\t%ld\nS\thung\t%ld\nS\tseconds\t%.1f\n",
			n_calls, n_retries, n_writes, n_terminates, n_cancels, n_holds, n_locks,
			n_races_eq, n_races_diff, n_crashes, n_connects, n_hung, (now_us() - t0) / 1e6);
	logmsg("done: %ld calls (%ld retries) for %ld writes, %ld crashes", n_calls, n_retries, n_writes, n_crashes);
	if (nconsumers > 0)
		consumers_drain();
	fprintf(hist, "S\tconsumers\t%d\nS\tconsumer_calls\t%ld\nS\tconsumer_committed\t%ld\n"
			"S\tconsumer_updates\t%ld\nS\tconsumer_terminates\t%ld\nS\tconsumer_broken_steps\t%ld\n"
			"S\tconsumer_hung\t%ld\nS\tdowngrades\t%ld\nS\tdowngrades_held\t%ld\nS\tcompacts\t%ld\n"
			"S\tcontrol_errors\t%ld\nS\tseconds_all\t%.1f\n",
			nconsumers, n_c_calls, n_c_ok, n_c_updates, n_c_terminates, n_c_broken, n_c_hung,
			n_downgrades, n_downgrades_held, n_compacts, n_control_errors, (now_us() - t0) / 1e6);
	fclose(hist);
	return 0;
}
