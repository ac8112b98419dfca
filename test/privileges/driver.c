/*
 * The client side of the privileges checker: one process multiplexes many
 * libpq connections with poll(), each a session that switches between
 * roles (SET ROLE) and runs random transactions (READ COMMITTED or
 * REPEATABLE READ, or single autocommit calls) of calls a shard's
 * privileges govern: append(), INSERT into and SELECT from a shard's
 * foreign table, snapshot(), listen(), shard_upper(), create_reader(),
 * read_next() and advance_reader(); now and then a session changes a
 * shard's privileges instead, in a statement of its own: grant_shard(),
 * revoke_shard() or alter_shard_owner().
 *
 * A model of the committed access list (each shard's owner and grants,
 * the roles' fixed memberships, the gates persist_sink_writer and
 * persist_sink_reader) predicts each call's outcome.  Changes run one at a
 * time (a session starts one only when no other is running), so they have
 * one order, and each change's outcome is predicted exactly.  A call in a
 * transaction whose first statement was sent after a change's commit was
 * answered must see the change; a change answered after the transaction
 * began, or still running when the call ended, may count or not, so the
 * call may have the outcome of any state between (README, Privileges: a
 * grant or revoke counts from the first transaction that starts after it
 * commits).  An outcome no such state gives is wrong.
 *
 * At the end, every shard is read as a superuser: each acknowledged
 * append (key a<id>, or f<id> through the foreign table) must be there
 * exactly once, each refused one not at all.
 *
 * Usage: driver --seconds N --sessions N --seed S
 * The server is found with the usual PG* environment variables; the roles
 * and shards are those test/privileges/run creates.  Prints the counts,
 * "wrong N" with the first violations, and "N passed, N failed"; exits 1
 * on any violation.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

/* Roles: the actors a session may SET ROLE to, then groups and gates */
enum
{
	R_U1, R_U2, R_U3, R_U4, R_U5, R_U6, R_U7, R_U8, R_PUBLIC_ROLE,
	R_G1, R_G2, R_WRITER, R_READER, NROLES
};
#define NACTORS (R_PUBLIC_ROLE + 1)
#define NGRANTEES (R_G2 + 1)	/* roles a grant may name */
#define PUBLIC_ID NROLES		/* the grantee PUBLIC in an acl */

static const char *role_sql[NROLES] = {
	"pc_u1", "pc_u2", "pc_u3", "pc_u4", "pc_u5", "pc_u6", "pc_u7", "pc_u8",
	"\"Public\"", "pc_g1", "pc_g2", "persist_sink_writer", "persist_sink_reader"
};
static const char *role_name[NROLES] = {
	"pc_u1", "pc_u2", "pc_u3", "pc_u4", "pc_u5", "pc_u6", "pc_u7", "pc_u8",
	"Public", "pc_g1", "pc_g2", "persist_sink_writer", "persist_sink_reader"
};

/*
 * Direct memberships (member -> role); test/privileges/run creates the
 * same with GRANT.  pc_u3 only writes, pc_u4 only reads, pc_u6 gets both
 * gates through pc_g2, pc_u7 is a member of pc_u1, pc_u8 has no gate.
 */
static const int member_of[][2] = {
	{R_U1, R_WRITER}, {R_U1, R_READER}, {R_U2, R_WRITER}, {R_U2, R_READER},
	{R_U3, R_WRITER}, {R_U4, R_READER}, {R_U5, R_WRITER}, {R_U5, R_READER},
	{R_U5, R_G1}, {R_U6, R_G1}, {R_U6, R_G2}, {R_U7, R_U1}, {R_U7, R_WRITER},
	{R_U7, R_READER}, {R_U8, R_G1}, {R_PUBLIC_ROLE, R_WRITER},
	{R_PUBLIC_ROLE, R_READER}, {R_G2, R_WRITER}, {R_G2, R_READER},
};

#define NSHARDS 4
static const int initial_owner[NSHARDS] = {R_U1, R_U2, R_U5, R_PUBLIC_ROLE};

#define P_APPEND 1
#define P_READ 2

/* privs_of[x][y]: x has the privileges of y (inherited memberships) */
static int	privs_of[NROLES][NROLES];

/* What the model knows of one shard */
typedef struct Access
{
	int			owner;
	int			grant[NROLES + 1];	/* P_ bits granted to each role, PUBLIC */
} Access;

/* The model's state: every shard's access list */
typedef struct State
{
	Access		shard[NSHARDS];
} State;

/* A committed change, and the state after it */
typedef struct Change
{
	long		send_tick;
	long		done_tick;
	State		after;
} Change;

enum Kind
{
	K_APPEND, K_TABLE_INSERT, K_SNAPSHOT, K_LISTEN, K_TABLE_SELECT, K_UPPER,
	K_CREATE_READER, K_READ_NEXT, K_ADVANCE, K_GRANT, K_REVOKE, K_ALTER_OWNER,
	K_OTHER, NKINDS
};
static const char *kind_name[NKINDS] = {
	"append", "table insert", "snapshot", "listen", "table select",
	"shard_upper", "create_reader", "read_next", "advance_reader",
	"grant_shard", "revoke_shard", "alter_shard_owner", "other"
};

/* Outcomes: ok, refused (42501), another SQLSTATE */
#define O_OK 0
#define O_DENIED 1
#define O_NO_READER 2			/* 42704 */
#define O_READER_EXISTS 3		/* 42710 */
#define O_OTHER 4
static const char *outcome_name[] = {"ok", "refused", "no reader", "reader exists", "other error"};

/* One call as it ran */
typedef struct Call
{
	int			kind;
	int			session;
	int			role;
	int			shard;
	int			repeatable;		/* in a REPEATABLE READ transaction */
	long		xact_tick;		/* its transaction's first statement sent */
	long		send_tick;
	long		done_tick;
	int			outcome;
	char		sqlstate[6];
	int			reader_state;	/* reader exists (1) or not (0) when sent */
	long		id;				/* an append's key number */
	char		message[160];
} Call;

/* One step of a session's plan */
typedef struct Step
{
	int			kind;			/* K_OTHER for SET ROLE, BEGIN, COMMIT */
	int			shard;
	int			target;			/* grantee, new owner */
	int			privs;
	int			public_name;	/* grantee given as 'public' */
	int			xact_end;		/* COMMIT or ROLLBACK */
	char		sql[512];
} Step;

#define MAX_STEPS 16

typedef struct Session
{
	PGconn	   *conn;
	int			busy;
	Step		plan[MAX_STEPS];
	int			nsteps;
	int			next;
	Step		running;
	long		send_tick;
	int			role;
	int			in_xact;
	int			repeatable;
	long		xact_tick;
	int			xact_failed;
	int			favorite;		/* the shard it uses most */
	int			wait_base;		/* waits for a change after this many, */
	double		wait_until;		/* or until then (wait_base -1: no wait) */
	int			reader[NACTORS][NSHARDS];	/* committed */
	int			reader_new[NACTORS][NSHARDS];	/* created in this xact */
	char		error[6];
	char		value[64];
	char		message[160];
	int			failed;
} Session;

static long tick = 0;
static Change *changes;
static int	nchanges = 0;
static int	changes_cap = 0;
static State current;
static int	change_running = 0;
static State initial_state;
static Call *calls;				/* calls not checked yet */
static long ncalls = 0;
static long calls_cap = 0;
static long total_calls = 0;
static long next_key = 1;
static unsigned long long rng_state;

/* What the content check needs of an append */
typedef struct Write
{
	long		id;
	int			kind;
	int			outcome;
	char		sqlstate[6];
	int			shard;
	int			role;
} Write;

static Write *writes;
static long nwrites = 0;
static long writes_cap = 0;

/* The checks' figures */
static long counts[NKINDS][O_OTHER + 1][2];
static long revoked_refusals = 0;
static long bad_calls = 0;
static long wrong_allowed = 0;	/* passed the check the model refuses */
static long wrong_refused = 0;	/* refused where the model allows */
static char other_code[16][6];
static long other_count[16];
static int	nother_codes = 0;

/* xorshift64*: a random number from the run's seed */
static unsigned long long
rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

/* A random integer in [0, n). */
static int
rnd_int(int n)
{
	return (int) (rnd() % (unsigned long long) n);
}

/* Seconds on the monotonic clock. */
static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Computes privs_of from member_of: each role, and what it inherits. */
static void
compute_memberships(void)
{
	int			changed = 1;

	for (int r = 0; r < NROLES; r++)
		privs_of[r][r] = 1;
	for (size_t i = 0; i < sizeof(member_of) / sizeof(member_of[0]); i++)
		privs_of[member_of[i][0]][member_of[i][1]] = 1;
	while (changed)
	{
		changed = 0;
		for (int a = 0; a < NROLES; a++)
			for (int b = 0; b < NROLES; b++)
				if (privs_of[a][b])
					for (int c = 0; c < NROLES; c++)
						if (privs_of[b][c] && !privs_of[a][c])
							privs_of[a][c] = changed = 1;
	}
}

/* The P_ bits role has on a shard in state st (the owner has all). */
static int
rights(const State *st, int shard, int role)
{
	const Access *a = &st->shard[shard];
	int			bits = a->grant[PUBLIC_ID];

	if (privs_of[role][a->owner])
		return P_APPEND | P_READ;
	for (int g = 0; g < NROLES; g++)
		if (a->grant[g] != 0 && privs_of[role][g])
			bits |= a->grant[g];
	return bits;
}

/* The outcome the model predicts for a call in state st. */
static int
predict(const State *st, const Call *c)
{
	int			writer = privs_of[c->role][R_WRITER];
	int			reader = privs_of[c->role][R_READER];
	int			bits = rights(st, c->shard, c->role);

	switch (c->kind)
	{
		case K_APPEND:
		case K_TABLE_INSERT:
			return writer && (bits & P_APPEND) ? O_OK : O_DENIED;
		case K_SNAPSHOT:
		case K_LISTEN:
		case K_TABLE_SELECT:
			return reader && (bits & P_READ) ? O_OK : O_DENIED;
		case K_UPPER:
			return (writer || reader) && bits != 0 ? O_OK : O_DENIED;
		case K_CREATE_READER:
			if (!reader || !(bits & P_READ))
				return O_DENIED;
			return c->reader_state ? O_READER_EXISTS : O_OK;
		case K_READ_NEXT:
		case K_ADVANCE:
			if (!reader || !(bits & P_READ))
				return O_DENIED;
			return c->reader_state ? O_OK : O_NO_READER;
	}
	return O_OTHER;
}

/* The outcome of a change in state st (exact: changes run one at a time). */
static int
predict_change(const State *st, const Step *s, int role)
{
	int			owner = st->shard[s->shard].owner;

	if (!privs_of[role][R_WRITER] && !privs_of[role][R_READER])
		return O_DENIED;
	if (!privs_of[role][owner])
		return O_DENIED;
	if (s->kind == K_ALTER_OWNER && !privs_of[role][s->target])
		return O_DENIED;
	return O_OK;
}

/* Applies a change that succeeded to the model's state. */
static void
apply_change(State *st, const Step *s)
{
	Access	   *a = &st->shard[s->shard];
	int			g = s->public_name ? PUBLIC_ID : s->target;

	if (s->kind == K_GRANT)
		a->grant[g] |= s->privs;
	else if (s->kind == K_REVOKE)
		a->grant[g] &= ~s->privs;
	else
	{
		/* as aclnewowner: grants to the old owner go to the new one */
		a->grant[s->target] |= a->grant[a->owner];
		if (a->owner != s->target)
			a->grant[a->owner] = 0;
		a->owner = s->target;
	}
}

/* Adds a step to a session's plan. */
static Step *
add_step(Session *s, int kind, int shard, const char *fmt, ...)
{
	Step	   *st = &s->plan[s->nsteps++];
	va_list		ap;

	memset(st, 0, sizeof(*st));
	st->kind = kind;
	st->shard = shard;
	va_start(ap, fmt);
	vsnprintf(st->sql, sizeof(st->sql), fmt, ap);
	va_end(ap);
	return st;
}

/* The name of a session's reader for a role and shard. */
static void
reader_name(char *buf, size_t len, int session, int role, int shard)
{
	snprintf(buf, len, "pr_%d_%d_%d", session, role, shard + 1);
}

/* Adds one random call on a random shard (mostly the favorite). */
static void
plan_call(Session *s, int id, int role)
{
	int			shard = rnd_int(3) ? s->favorite : rnd_int(NSHARDS);
	int			p = rnd_int(100);
	char		rn[64];

	reader_name(rn, sizeof(rn), id, role, shard);
	if (p < 24)
		add_step(s, K_APPEND, shard,
				 "SELECT persist_sink.append('s%d', ARRAY['a%ld'], ARRAY['v'], ARRAY[1]::bigint[]) > 0",
				 shard + 1, next_key++);
	else if (p < 32)
		add_step(s, K_TABLE_INSERT, shard,
				 "INSERT INTO public.ft_s%d (key, val) VALUES ('f%ld', 'v')", shard + 1, next_key++);
	else if (p < 46)
		add_step(s, K_SNAPSHOT, shard, "SELECT count(*) FROM persist_sink.snapshot('s%d')", shard + 1);
	else if (p < 54)
		add_step(s, K_LISTEN, shard, "SELECT count(*) FROM persist_sink.listen('s%d', -1)", shard + 1);
	else if (p < 61)
		add_step(s, K_TABLE_SELECT, shard, "SELECT count(*) FROM public.ft_s%d", shard + 1);
	else if (p < 66)
		add_step(s, K_UPPER, shard, "SELECT persist_sink.shard_upper('s%d')", shard + 1);
	else if (p < 78)
		add_step(s, K_CREATE_READER, shard, "SELECT persist_sink.create_reader('s%d', '%s')", shard + 1, rn);
	else
		add_step(s, K_READ_NEXT, shard,
				 "SELECT max(\"time\") FROM persist_sink.read_next('s%d', '%s', 1000)", shard + 1, rn);
}

/* Plans a change of a shard's privileges, by its owner most of the time. */
static void
plan_change(Session *s)
{
	int			shard = rnd_int(NSHARDS);
	int			owner = current.shard[shard].owner;
	int			actor = rnd_int(NACTORS);
	int			p = rnd_int(100);
	Step	   *st;
	static const char *priv_name[] = {"", "append", "read", "all"};

	if (rnd_int(100) < 85)
	{
		int			candidates[NACTORS];
		int			n = 0;

		for (int r = 0; r < NACTORS; r++)
			if (privs_of[r][owner] && (privs_of[r][R_WRITER] || privs_of[r][R_READER]))
				candidates[n++] = r;
		if (n > 0)
			actor = candidates[rnd_int(n)];
	}
	s->nsteps = s->next = 0;
	add_step(s, K_OTHER, -1, "SET ROLE %s", role_sql[actor]);
	s->role = actor;
	if (p < 8)
	{
		int			to = rnd_int(NGRANTEES);

		st = add_step(s, K_ALTER_OWNER, shard, "SELECT persist_sink.alter_shard_owner('s%d', '%s')",
					  shard + 1, role_name[to]);
		st->target = to;
	}
	else
	{
		int			kind = p < 52 ? K_GRANT : K_REVOKE;
		int			privs = 1 + rnd_int(3);
		int			to;
		int			q = rnd_int(100);

		/* mostly the roles sessions act as, sometimes PUBLIC */
		to = q < 8 ? PUBLIC_ID : q < 20 ? R_G1 + rnd_int(2) : rnd_int(NACTORS);
		st = add_step(s, kind, shard, "SELECT persist_sink.%s('s%d', '%s', '%s')",
					  kind == K_GRANT ? "grant_shard" : "revoke_shard", shard + 1,
					  to == PUBLIC_ID ? "public" : role_name[to], priv_name[privs]);
		st->target = to;
		st->public_name = to == PUBLIC_ID;
		st->privs = privs;
	}
	change_running = 1;
}

/* Plans a transaction, or one autocommit call, as some role. */
static void
plan_xact(Session *s, int id)
{
	int			ncalls_ = 1 + rnd_int(4);
	int			mode = rnd_int(100);
	Step	   *st;

	s->nsteps = s->next = 0;
	if (rnd_int(100) < 30)
		s->role = rnd_int(NACTORS);
	add_step(s, K_OTHER, -1, "SET ROLE %s", role_sql[s->role]);
	if (mode < 25)
	{
		plan_call(s, id, s->role);
		return;
	}
	if (mode < 65)
	{
		add_step(s, K_OTHER, -1, "BEGIN ISOLATION LEVEL REPEATABLE READ");
		/* the snapshot first, so that changes come between it and the calls */
		if (rnd_int(2))
			add_step(s, K_OTHER, -1, "SELECT 1");
	}
	else
		add_step(s, K_OTHER, -1, "BEGIN ISOLATION LEVEL READ COMMITTED");
	for (int i = 0; i < ncalls_; i++)
		plan_call(s, id, s->role);
	st = add_step(s, K_OTHER, -1, rnd_int(10) ? "COMMIT" : "ROLLBACK");
	st->xact_end = 1;
}

/* Records a call's outcome. */
static void
record_call(Session *s, int id, const Step *st)
{
	Call	   *c;

	if (ncalls == calls_cap)
	{
		calls_cap = calls_cap ? calls_cap * 2 : 4096;
		calls = realloc(calls, calls_cap * sizeof(Call));
		if (calls == NULL)
		{
			perror("realloc");
			exit(2);
		}
	}
	c = &calls[ncalls++];
	memset(c, 0, sizeof(*c));
	c->kind = st->kind;
	c->session = id;
	c->role = s->role;
	c->shard = st->shard;
	c->repeatable = s->in_xact && s->repeatable;
	c->xact_tick = s->in_xact ? s->xact_tick : s->send_tick;
	c->send_tick = s->send_tick;
	c->done_tick = tick;
	c->reader_state = s->reader[s->role][st->shard] || s->reader_new[s->role][st->shard];
	if (st->kind == K_APPEND || st->kind == K_TABLE_INSERT)
		sscanf(strstr(st->sql, st->kind == K_APPEND ? "'a" : "'f") + 2, "%ld", &c->id);
	memcpy(c->sqlstate, s->error, sizeof(c->sqlstate));
	snprintf(c->message, sizeof(c->message), "%s", s->message);
	if (s->error[0] == '\0')
		c->outcome = O_OK;
	else if (strcmp(s->error, "42501") == 0)
		c->outcome = O_DENIED;
	else if (strcmp(s->error, "42704") == 0)
		c->outcome = O_NO_READER;
	else if (strcmp(s->error, "42710") == 0)
		c->outcome = O_READER_EXISTS;
	else
		c->outcome = O_OTHER;
}

static long change_counts[NKINDS][2];
static long change_wrong = 0;
static char first_wrong[8][400];
static int	nfirst_wrong = 0;

/* Notes a violation, keeping the first few in detail. */
static void
wrong(const char *fmt, ...)
{
	va_list		ap;

	if (nfirst_wrong < 8)
	{
		va_start(ap, fmt);
		vsnprintf(first_wrong[nfirst_wrong++], sizeof(first_wrong[0]), fmt, ap);
		va_end(ap);
	}
}

/* Checks a change's outcome and applies it to the model. */
static void
finish_change(Session *s, const Step *st)
{
	int			expected = predict_change(&current, st, s->role);
	int			got = s->error[0] == '\0' ? O_OK :
		strcmp(s->error, "42501") == 0 ? O_DENIED : O_OTHER;

	change_counts[st->kind][got == O_OK ? 0 : 1]++;
	if (got != expected)
	{
		change_wrong++;
		wrong("%s by %s: %s, the model says %s (%s %s)", kind_name[st->kind],
			  role_name[s->role], got == O_OTHER ? s->error : outcome_name[got],
			  outcome_name[expected], st->sql, s->message);
	}
	if (got == O_OK)
	{
		if (nchanges == changes_cap)
		{
			changes_cap = changes_cap ? changes_cap * 2 : 256;
			changes = realloc(changes, changes_cap * sizeof(Change));
			if (changes == NULL)
			{
				perror("realloc");
				exit(2);
			}
		}
		apply_change(&current, st);
		changes[nchanges].send_tick = s->send_tick;
		changes[nchanges].done_tick = tick;
		changes[nchanges].after = current;
		nchanges++;
	}
	change_running = 0;
}

/* Handles the end of a session's statement. */
static void
finish_step(Session *s, int id)
{
	Step	   *st = &s->running;

	tick++;
	if (st->kind == K_GRANT || st->kind == K_REVOKE || st->kind == K_ALTER_OWNER)
	{
		finish_change(s, st);
		return;
	}
	if (strncmp(st->sql, "BEGIN", 5) == 0 && s->error[0] == '\0')
	{
		s->in_xact = 1;
		s->xact_failed = 0;
		s->repeatable = strstr(st->sql, "REPEATABLE") != NULL;
		s->xact_tick = s->send_tick;
		memset(s->reader_new, 0, sizeof(s->reader_new));
		return;
	}
	if (st->xact_end)
	{
		if (strcmp(st->sql, "COMMIT") == 0 && !s->xact_failed && s->error[0] == '\0')
			for (int r = 0; r < NACTORS; r++)
				for (int h = 0; h < NSHARDS; h++)
					s->reader[r][h] |= s->reader_new[r][h];
		memset(s->reader_new, 0, sizeof(s->reader_new));
		s->in_xact = 0;
		return;
	}
	if (st->kind == K_OTHER)
	{
		/* a snapshot taken: let a change come before the calls */
		if (strcmp(st->sql, "SELECT 1") == 0)
		{
			s->wait_base = nchanges;
			s->wait_until = now_s() + 0.01 * (1 + rnd_int(8));
		}
		if (s->error[0] != '\0')
		{
			fprintf(stderr, "session %d: %s: %s %s\n", id, st->sql, s->error, s->message);
			s->failed = 1;
		}
		return;
	}
	record_call(s, id, st);
	if (s->error[0] == '\0')
	{
		if (st->kind == K_CREATE_READER)
		{
			if (s->in_xact)
				s->reader_new[s->role][st->shard] = 1;
			else
				s->reader[s->role][st->shard] = 1;
		}
		/* a read_next that read something moves its reader on */
		if (st->kind == K_READ_NEXT && s->value[0] != '\0' && s->nsteps < MAX_STEPS)
		{
			char		rn[64];
			Step		tail[MAX_STEPS];
			int			ntail = s->nsteps - s->next;

			memcpy(tail, &s->plan[s->next], ntail * sizeof(Step));
			s->nsteps = s->next;
			reader_name(rn, sizeof(rn), id, s->role, st->shard);
			add_step(s, K_ADVANCE, st->shard, "SELECT persist_sink.advance_reader('s%d', '%s', %s)",
					 st->shard + 1, rn, s->value);
			memcpy(&s->plan[s->nsteps], tail, ntail * sizeof(Step));
			s->nsteps += ntail;
		}
	}
	else if (s->in_xact)
	{
		/* the transaction is aborted: only its end is left */
		s->xact_failed = 1;
		s->plan[s->next] = s->plan[s->nsteps - 1];
		snprintf(s->plan[s->next].sql, sizeof(s->plan[0].sql), "ROLLBACK");
		s->nsteps = s->next + 1;
	}
}

/* Sends a session's next step. */
static void
send_step(Session *s)
{
	s->running = s->plan[s->next++];
	s->error[0] = s->value[0] = s->message[0] = '\0';
	tick++;
	s->send_tick = tick;
	if (!PQsendQuery(s->conn, s->running.sql))
	{
		fprintf(stderr, "send failed: %s", PQerrorMessage(s->conn));
		exit(2);
	}
	s->busy = 1;
}

/* Reads what arrived for a session; true once its statement is done. */
static int
collect(Session *s)
{
	if (!PQconsumeInput(s->conn))
	{
		fprintf(stderr, "connection lost: %s", PQerrorMessage(s->conn));
		exit(2);
	}
	while (!PQisBusy(s->conn))
	{
		PGresult   *res = PQgetResult(s->conn);

		if (res == NULL)
		{
			s->busy = 0;
			return 1;
		}
		if (PQresultStatus(res) == PGRES_FATAL_ERROR)
		{
			const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
			const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

			snprintf(s->error, sizeof(s->error), "%s", code ? code : "?????");
			snprintf(s->message, sizeof(s->message), "%s", msg ? msg : "");
		}
		else if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0 &&
				 !PQgetisnull(res, 0, 0))
			snprintf(s->value, sizeof(s->value), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	return 0;
}

/* The number of changes answered before tick (changes run one at a time). */
static int
changes_done_before(long t)
{
	int			lo = 0;
	int			hi = nchanges;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (changes[mid].done_tick < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The number of changes sent before tick. */
static int
changes_sent_before(long t)
{
	int			lo = 0;
	int			hi = nchanges;

	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (changes[mid].send_tick < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The model's state after k changes. */
static const State *
state_after(int k)
{
	return k == 0 ? &initial_state : &changes[k - 1].after;
}

/* Tallies a call's other error by SQLSTATE. */
static void
count_other_error(const char *sqlstate)
{
	int			j;

	for (j = 0; j < nother_codes; j++)
		if (strcmp(other_code[j], sqlstate) == 0)
			break;
	if (j == nother_codes && nother_codes < 16)
		memcpy(other_code[nother_codes++], sqlstate, 6);
	if (j < nother_codes)
		other_count[j]++;
}

/*
 * Checks a call against the states it may have seen: those after every
 * change answered before its transaction began and any of the changes
 * sent before it ended.  Every change sent before it ended must be over.
 */
static void
evaluate_call(const Call *c)
{
	int			possible[O_OTHER + 1] = {0};
	int			npossible = 0;
	int			first = changes_done_before(c->xact_tick);
	int			last = changes_sent_before(c->done_tick);
	char		exp[80] = "";

	for (int k = first; k <= last; k++)
	{
		int			o = predict(state_after(k), c);

		if (!possible[o])
			npossible++;
		possible[o] = 1;
	}
	counts[c->kind][c->outcome][npossible > 1]++;
	if (c->outcome == O_OTHER)
		count_other_error(c->sqlstate);
	if (possible[c->outcome])
	{
		/* refused as it must be, where a recent older state allowed it */
		if (npossible == 1 && c->outcome == O_DENIED)
			for (int k = first - 1; k >= 0 && k >= first - 20; k--)
				if (predict(state_after(k), c) == O_OK)
				{
					revoked_refusals++;
					break;
				}
		return;
	}
	/* a deadlock or serialization failure is no answer about privileges */
	if (c->outcome == O_OTHER &&
		(strcmp(c->sqlstate, "40P01") == 0 || strcmp(c->sqlstate, "40001") == 0))
		return;
	bad_calls++;
	if (c->outcome != O_DENIED && !possible[O_OTHER] && !possible[O_NO_READER] &&
		!possible[O_READER_EXISTS] && !possible[O_OK])
		wrong_allowed++;
	else if (c->outcome == O_DENIED)
		wrong_refused++;
	for (int o = 0; o <= O_OTHER; o++)
		if (possible[o])
			snprintf(exp + strlen(exp), sizeof(exp) - strlen(exp), "%s%s",
					 exp[0] ? " or " : "", outcome_name[o]);
	wrong("%s on s%d by %s (session %d, %s, transaction began at tick %ld, call %ld-%ld): "
		  "%s%s%s%s%s%s, the model says %s (states after changes %d..%d of %d)",
		  kind_name[c->kind], c->shard + 1, role_name[c->role], c->session,
		  c->repeatable ? "repeatable read" : "read committed",
		  c->xact_tick, c->send_tick, c->done_tick, outcome_name[c->outcome],
		  c->outcome == O_OK ? "" : " ", c->sqlstate,
		  c->message[0] ? " (" : "", c->message, c->message[0] ? ")" : "",
		  exp, first, last, nchanges);
}

/*
 * Checks the calls recorded so far, once no change is running, and keeps
 * what the content check needs of the writes among them.
 */
static void
flush_calls(void)
{
	if (change_running)
		return;
	for (long i = 0; i < ncalls; i++)
	{
		Call	   *c = &calls[i];
		Write	   *w;

		evaluate_call(c);
		if (c->kind != K_APPEND && c->kind != K_TABLE_INSERT)
			continue;
		if (nwrites == writes_cap)
		{
			writes_cap = writes_cap ? writes_cap * 2 : 65536;
			writes = realloc(writes, writes_cap * sizeof(Write));
			if (writes == NULL)
			{
				perror("realloc");
				exit(2);
			}
		}
		w = &writes[nwrites++];
		w->id = c->id;
		w->kind = c->kind;
		w->outcome = c->outcome;
		memcpy(w->sqlstate, c->sqlstate, sizeof(w->sqlstate));
		w->shard = c->shard;
		w->role = c->role;
	}
	total_calls += ncalls;
	ncalls = 0;
}

/* Reads every shard as a superuser: each key's count, by number. */
static long
check_content(PGconn *conn, long *present, long *absent)
{
	long		bad = 0;
	unsigned char *seen_a = calloc(next_key + 1, 1);
	unsigned char *seen_f = calloc(next_key + 1, 1);

	if (PQstatus(conn) != CONNECTION_OK || seen_a == NULL || seen_f == NULL)
		exit(2);
	for (int h = 0; h < NSHARDS; h++)
	{
		char		sql[200];
		PGresult   *res;

		snprintf(sql, sizeof(sql),
				 "SELECT convert_from(key, 'UTF8'), diff FROM persist_sink.snapshot('s%d')", h + 1);
		res = PQexec(conn, sql);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "reading s%d: %s", h + 1, PQerrorMessage(conn));
			exit(2);
		}
		for (int r = 0; r < PQntuples(res); r++)
		{
			const char *k = PQgetvalue(res, r, 0);
			long		n = atol(k + 1);
			long		d = atol(PQgetvalue(res, r, 1));
			unsigned char *seen = k[0] == 'a' ? seen_a : seen_f;

			if (n <= 0 || n >= next_key)
				continue;
			seen[n] = (unsigned char) (d > 200 ? 200 : d < 0 ? 201 : d);
		}
		PQclear(res);
	}
	for (long i = 0; i < nwrites; i++)
	{
		Write	   *c = &writes[i];
		int			n;

		n = (c->kind == K_APPEND ? seen_a : seen_f)[c->id];
		if (c->outcome == O_OK)
		{
			if (n == 1)
				(*present)++;
			else
			{
				bad++;
				wrong("%s %c%ld to s%d by %s was acknowledged, but the shard holds it %d times",
					  kind_name[c->kind], c->kind == K_APPEND ? 'a' : 'f', c->id,
					  c->shard + 1, role_name[c->role], n);
			}
		}
		else if (strcmp(c->sqlstate, "40003") != 0)
		{
			if (n == 0)
				(*absent)++;
			else
			{
				bad++;
				wrong("%s %c%ld to s%d by %s got %s, but the shard holds it (%d)",
					  kind_name[c->kind], c->kind == K_APPEND ? 'a' : 'f', c->id,
					  c->shard + 1, role_name[c->role], c->sqlstate, n);
			}
		}
	}
	free(seen_a);
	free(seen_f);
	return bad;
}

/* Prints the calls' other errors, by SQLSTATE. */
static void
print_other_errors(void)
{
	printf("other errors (deadlocks and serialization failures are no answer about privileges):");
	for (int j = 0; j < nother_codes; j++)
		printf(" %s %ld", other_code[j], other_count[j]);
	printf(nother_codes ? "\n" : " none\n");
}

int
main(int argc, char **argv)
{
	int			seconds = 50;
	int			nsessions = 8;
	unsigned long long seed = 1;
	Session    *sessions;
	struct pollfd *pfd;
	double		end;
	long		present = 0;
	long		absent = 0;
	long		bad_content;
	int			failed = 0;
	int			passed = 0;
	int			setup_failed = 0;
	PGconn	   *check;

	for (int i = 1; i < argc; i++)
	{
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--sessions") == 0 && i + 1 < argc)
			nsessions = atoi(argv[++i]);
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else
		{
			fprintf(stderr, "usage: driver --seconds N --sessions N --seed S\n");
			return 2;
		}
	}
	rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
	compute_memberships();
	for (int h = 0; h < NSHARDS; h++)
		current.shard[h].owner = initial_owner[h];
	initial_state = current;
	sessions = calloc(nsessions, sizeof(Session));
	pfd = calloc(nsessions, sizeof(struct pollfd));
	for (int i = 0; i < nsessions; i++)
	{
		sessions[i].conn = PQconnectdb("");
		if (PQstatus(sessions[i].conn) != CONNECTION_OK)
		{
			fprintf(stderr, "connection failed: %s", PQerrorMessage(sessions[i].conn));
			return 2;
		}
		sessions[i].favorite = i % NSHARDS;
		sessions[i].wait_base = -1;
		sessions[i].role = rnd_int(NACTORS);
	}

	end = now_s() + seconds;
	for (;;)
	{
		int			running = 0;
		int			waiting = 0;
		int			idle[256];
		int			nidle = 0;
		int			past = now_s() >= end;

		for (int i = 0; i < nsessions; i++)
		{
			Session    *s = &sessions[i];

			if (s->busy && collect(s))
				finish_step(s, i);
			if (s->failed)
				setup_failed = 1;
			if (s->busy)
			{
				pfd[running].fd = PQsocket(s->conn);
				pfd[running].events = POLLIN;
				running++;
			}
			else if (s->wait_base >= 0 && s->wait_base == nchanges && now_s() < s->wait_until)
				waiting++;
			else if (s->next < s->nsteps || !past)
			{
				s->wait_base = -1;
				idle[nidle++] = i;
			}
		}
		if (setup_failed)
			break;
		flush_calls();
		if (past && running == 0 && nidle == 0 && waiting == 0)
			break;
		if (nidle > 0)
		{
			int			i = idle[rnd_int(nidle)];
			Session    *s = &sessions[i];

			if (s->next >= s->nsteps)
			{
				/* changes are likelier while snapshots wait for one */
				if (!change_running && rnd_int(100) < (waiting > 0 ? 25 : 6))
					plan_change(s);
				else
					plan_xact(s, i);
			}
			send_step(s);
			running++;
			pfd[running - 1].fd = PQsocket(s->conn);
			pfd[running - 1].events = POLLIN;
		}
		/* let the statements run a little before the next one starts */
		if (poll(pfd, running, rnd_int(3)) < 0 && errno != EINTR)
		{
			perror("poll");
			return 2;
		}
	}
	for (int i = 0; i < nsessions; i++)
		PQfinish(sessions[i].conn);
	if (setup_failed)
	{
		fprintf(stderr, "a session's own statement failed (see above)\n");
		return 2;
	}

	flush_calls();
	check = PQconnectdb("");
	bad_content = check_content(check, &present, &absent);
	PQfinish(check);

	printf("%ld calls, %d changes of privileges committed, %ld ticks\n", total_calls, nchanges, tick);
	for (int k = K_GRANT; k <= K_ALTER_OWNER; k++)
		printf("  %-18s ok %ld, refused %ld\n", kind_name[k], change_counts[k][0], change_counts[k][1]);
	for (int k = 0; k < K_GRANT; k++)
	{
		printf("  %-18s", kind_name[k]);
		for (int o = 0; o <= O_OTHER; o++)
			if (counts[k][o][0] + counts[k][o][1] > 0)
				printf(" %s %ld (%ld either way)", outcome_name[o],
					   counts[k][o][0] + counts[k][o][1], counts[k][o][1]);
		printf("\n");
	}
	print_other_errors();
	printf("refused as the model requires where an earlier state allowed: %ld\n", revoked_refusals);
	printf("appends acknowledged and present once: %ld; refused and absent: %ld\n", present, absent);

	if (change_wrong == 0)
		passed++;
	else
		failed++;
	if (bad_calls == 0)
		passed++;
	else
		failed++;
	if (bad_content == 0)
		passed++;
	else
		failed++;
	printf("wrong %ld\n", change_wrong + bad_calls + bad_content);
	if (bad_calls > 0)
		printf("  calls: %ld passed the privilege check where the model refuses, %ld refused where it allows, %ld other\n",
			   wrong_allowed, wrong_refused, bad_calls - wrong_allowed - wrong_refused);
	for (int i = 0; i < nfirst_wrong; i++)
		printf("  %s\n", first_wrong[i]);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
