/*-------------------------------------------------------------------------
 *
 * copy_client.c
 *		COPY clients for the benchmark (test/bench/run): N processes, each
 *		with its own libpq connection, stream prebuilt binary COPY files
 *		into a table with COPY ... FROM STDIN (FORMAT binary), one file per
 *		transaction (autocommit), like pgbench runs one batch per
 *		transaction.
 *
 *	copy_client --clients N --table T --log PREFIX
 *		[--prefix NB [--keys prefixed|spread]]
 *		(--seconds S --dir D --batches NB | --files F1,F2,...)
 *
 * --seconds: each client copies random files D/b<1..NB>.bin until S seconds
 * have passed (the file in flight then completes).  --files: the files are
 * dealt round robin to the clients, each copying its share in turn.
 *
 * --prefix NB: before sending a file, overwrite the first NB bytes of every
 * row's first column (the key) with random bytes, so that keys never repeat
 * across calls (the sustained workload; its files hold NB placeholder bytes
 * there).  --keys prefixed (the default): one random NB-byte value for the
 * whole file, so the keys of a call share a prefix; --keys spread: random
 * NB bytes for every row, so the keys of a call spread over the key space.
 * The random bytes come from a splitmix64 generator per client, seeded from
 * the kernel's random source.
 *
 * Every file is read into memory before the clients connect, so that the
 * timed loop does nothing but copy a file (with --prefix, into the client's
 * own buffer, whose keys it then overwrites) and send it with
 * PQputCopyData, in chunks of up to 1 MB.
 *
 * Connects with the PG* environment (PGHOST, PGPORT, PGDATABASE).  Clients
 * connect first and start together.  Writes per-file latencies to
 * PREFIX.<client> in pgbench's --log format (client, number, latency in us,
 * script, epoch, us) and prints "files=<n> seconds=<wall> cpu_s=<client
 * processes' user + system CPU seconds>" on stdout.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#define CHUNK_BYTES (1 << 20)
#define MAX_PREFIX 64

/* a binary COPY file in memory, and where each row's first field starts */
typedef struct CopyFile
{
	const char *path;
	char	   *data;
	size_t		len;
	uint32_t   *keys;			/* offsets of the rows' first fields */
	size_t		nkeys;
} CopyFile;

static int	nclients = 1;
static const char *table;
static const char *logprefix;
static double seconds;
static const char *dir;
static int	nbatches;
static int	prefix;
static bool spread;

static CopyFile *files;
static int	nfiles;
static bool round_robin;		/* --files: each client copies its share */

static void
die(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	exit(1);
}

static void *
xmalloc(size_t n)
{
	void	   *p = malloc(n ? n : 1);

	if (p == NULL)
		die("out of memory\n");
	return p;
}

static double
clock_seconds(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
splitmix64(uint64_t *state)
{
	uint64_t	z = (*state += UINT64_C(0x9E3779B97F4A7C15));

	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

/* Fills n bytes with random bytes. */
static void
fill_random(char *p, int n, uint64_t *rng)
{
	for (int i = 0; i < n; i += 8)
	{
		uint64_t	v = splitmix64(rng);

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static uint32_t
read_be32(const char *p)
{
	const unsigned char *u = (const unsigned char *) p;

	return ((uint32_t) u[0] << 24) | ((uint32_t) u[1] << 16) |
		((uint32_t) u[2] << 8) | (uint32_t) u[3];
}

/*
 * Finds the offsets of every row's first field of a binary COPY file.  Dies
 * unless every row's first field is at least --prefix bytes long.
 */
static void
parse_keys(CopyFile *f)
{
	static const char signature[11] = "PGCOPY\n\377\r\n\0";
	size_t		pos;
	size_t		cap = 1024;

	if (f->len < 19 || memcmp(f->data, signature, 11) != 0)
		die("%s: not a binary COPY file\n", f->path);
	pos = 15 + 4 + read_be32(f->data + 15);
	f->keys = xmalloc(cap * sizeof(uint32_t));
	f->nkeys = 0;
	for (;;)
	{
		int16_t		nfields;

		if (pos + 2 > f->len)
			die("%s: truncated\n", f->path);
		nfields = (int16_t) (((unsigned char) f->data[pos] << 8) |
							 (unsigned char) f->data[pos + 1]);
		pos += 2;
		if (nfields == -1)
			break;				/* trailer */
		for (int i = 0; i < nfields; i++)
		{
			int32_t		flen;

			if (pos + 4 > f->len)
				die("%s: truncated\n", f->path);
			flen = (int32_t) read_be32(f->data + pos);
			pos += 4;
			if (i == 0)
			{
				if (flen < prefix)
					die("%s: a key is shorter than %d bytes\n", f->path, prefix);
				if (f->nkeys == cap)
				{
					cap *= 2;
					f->keys = realloc(f->keys, cap * sizeof(uint32_t));
					if (f->keys == NULL)
						die("out of memory\n");
				}
				f->keys[f->nkeys++] = (uint32_t) pos;
			}
			if (flen > 0)
				pos += flen;
			if (pos > f->len)
				die("%s: truncated\n", f->path);
		}
	}
}

static void
load_file(CopyFile *f, const char *path)
{
	int			fd;
	struct stat st;
	size_t		done = 0;

	f->path = path;
	if ((fd = open(path, O_RDONLY)) < 0 || fstat(fd, &st) < 0)
		die("%s: %s\n", path, strerror(errno));
	f->len = st.st_size;
	f->data = xmalloc(f->len);
	while (done < f->len)
	{
		ssize_t		n = read(fd, f->data + done, f->len - done);

		if (n <= 0)
			die("%s: %s\n", path, n < 0 ? strerror(errno) : "short read");
		done += n;
	}
	close(fd);
	if (prefix > 0)
		parse_keys(f);
}

/* Sends one file with COPY; returns false (having said why) on an error. */
static bool
copy_file(PGconn *conn, int c, const CopyFile *f, char *buf, uint64_t *rng)
{
	char		sql[1024];
	const char *data = f->data;
	PGresult   *res;
	bool		ok = true;

	if (prefix > 0)
	{
		char		bytes[MAX_PREFIX];

		memcpy(buf, f->data, f->len);
		fill_random(bytes, prefix, rng);
		for (size_t i = 0; i < f->nkeys; i++)
		{
			if (spread)
				fill_random(buf + f->keys[i], prefix, rng);
			else
				memcpy(buf + f->keys[i], bytes, prefix);
		}
		data = buf;
	}
	snprintf(sql, sizeof(sql), "COPY %s FROM STDIN (FORMAT binary)", table);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COPY_IN)
	{
		fprintf(stderr, "copy client %d: %s", c, PQerrorMessage(conn));
		PQclear(res);
		return false;
	}
	PQclear(res);
	for (size_t off = 0; off < f->len; off += CHUNK_BYTES)
	{
		size_t		n = f->len - off < CHUNK_BYTES ? f->len - off : CHUNK_BYTES;

		if (PQputCopyData(conn, data + off, (int) n) != 1)
		{
			fprintf(stderr, "copy client %d: %s", c, PQerrorMessage(conn));
			return false;
		}
	}
	if (PQputCopyEnd(conn, NULL) != 1)
	{
		fprintf(stderr, "copy client %d: %s", c, PQerrorMessage(conn));
		return false;
	}
	while ((res = PQgetResult(conn)) != NULL)
	{
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			fprintf(stderr, "copy client %d: %s: %s", c, f->path, PQresultErrorMessage(res));
			ok = false;
		}
		PQclear(res);
	}
	return ok;
}

/* One client: connects, waits for the start, copies; exits. */
static void
client(int c, int ready_w, int go_r, int count_w)
{
	PGconn	   *conn;
	FILE	   *out;
	char		path[4096];
	char	   *buf = NULL;
	uint64_t	rng;
	double		start;
	int			done = 0;
	char		go;

	conn = PQconnectdb("");
	if (PQstatus(conn) != CONNECTION_OK)
		die("copy client %d: %s", c, PQerrorMessage(conn));
	snprintf(path, sizeof(path), "%s.%d", logprefix, c);
	if ((out = fopen(path, "w")) == NULL)
		die("%s: %s\n", path, strerror(errno));
	if (getrandom(&rng, sizeof(rng), 0) != sizeof(rng))
		die("getrandom: %s\n", strerror(errno));
	if (prefix > 0)
	{
		size_t		max = 0;

		for (int i = 0; i < nfiles; i++)
			if (files[i].len > max)
				max = files[i].len;
		buf = xmalloc(max);
	}
	if (write(ready_w, "1", 1) != 1)
		die("copy client %d: write: %s\n", c, strerror(errno));
	close(ready_w);
	while (read(go_r, &go, 1) > 0)
		;						/* EOF: go */
	close(go_r);

	start = clock_seconds(CLOCK_MONOTONIC);
	for (;;)
	{
		const CopyFile *f;
		double		t,
					end;

		if (round_robin)
		{
			int			i = c + done * nclients;

			if (i >= nfiles)
				break;
			f = &files[i];
		}
		else
		{
			if (clock_seconds(CLOCK_MONOTONIC) - start >= seconds)
				break;
			f = &files[splitmix64(&rng) % nfiles];
		}
		t = clock_seconds(CLOCK_MONOTONIC);
		if (!copy_file(conn, c, f, buf, &rng))
			exit(1);
		end = clock_seconds(CLOCK_REALTIME);
		fprintf(out, "%d %d %ld 0 %ld %ld\n", c, done,
				(long) ((clock_seconds(CLOCK_MONOTONIC) - t) * 1e6),
				(long) end, (long) ((end - (long) end) * 1e6));
		done++;
	}
	if (fclose(out) != 0)
		die("%s: %s\n", path, strerror(errno));
	PQfinish(conn);
	if (write(count_w, &done, sizeof(done)) != sizeof(done))
		die("copy client %d: write: %s\n", c, strerror(errno));
	exit(0);
}

static void
usage(void)
{
	die("usage: copy_client --clients N --table T --log PREFIX [--prefix NB [--keys prefixed|spread]]\n"
		"       (--seconds S --dir D --batches NB | --files F1,F2,...)\n");
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{"clients", required_argument, NULL, 'c'},
		{"table", required_argument, NULL, 't'},
		{"log", required_argument, NULL, 'l'},
		{"seconds", required_argument, NULL, 's'},
		{"dir", required_argument, NULL, 'd'},
		{"batches", required_argument, NULL, 'b'},
		{"files", required_argument, NULL, 'f'},
		{"prefix", required_argument, NULL, 'p'},
		{"keys", required_argument, NULL, 'k'},
		{NULL, 0, NULL, 0}
	};
	char	   *filelist = NULL;
	int			opt;
	int			ready[2],
				go[2],
				count[2];
	pid_t	   *pids;
	int			failed = 0;
	long		n = 0;
	int			got;
	double		t0,
				elapsed;
	char		byte;
	struct rusage self,
				children;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1)
	{
		switch (opt)
		{
			case 'c':
				nclients = atoi(optarg);
				break;
			case 't':
				table = optarg;
				break;
			case 'l':
				logprefix = optarg;
				break;
			case 's':
				seconds = atof(optarg);
				break;
			case 'd':
				dir = optarg;
				break;
			case 'b':
				nbatches = atoi(optarg);
				break;
			case 'f':
				filelist = optarg;
				break;
			case 'p':
				prefix = atoi(optarg);
				break;
			case 'k':
				if (strcmp(optarg, "spread") == 0)
					spread = true;
				else if (strcmp(optarg, "prefixed") != 0)
					usage();
				break;
			default:
				usage();
		}
	}
	if (optind < argc || nclients < 1 || prefix < 0 || prefix > MAX_PREFIX ||
		!table || !logprefix)
		usage();
	if (!((seconds > 0 && dir && nbatches > 0) || filelist))
		usage();

	/* every file in memory before the clients start */
	if (filelist)
	{
		char	   *tok;

		round_robin = true;
		files = xmalloc((strlen(filelist) / 2 + 1) * sizeof(CopyFile));
		for (tok = strtok(filelist, ","); tok; tok = strtok(NULL, ","))
			load_file(&files[nfiles++], tok);
	}
	else
	{
		files = xmalloc(nbatches * sizeof(CopyFile));
		for (int i = 0; i < nbatches; i++)
		{
			char		path[4096];

			snprintf(path, sizeof(path), "%s/b%d.bin", dir, i + 1);
			load_file(&files[nfiles++], strdup(path));
		}
	}
	if (nfiles == 0)
		die("no files\n");

	if (pipe(ready) < 0 || pipe(go) < 0 || pipe(count) < 0)
		die("pipe: %s\n", strerror(errno));
	fflush(NULL);
	pids = xmalloc(nclients * sizeof(pid_t));
	for (int c = 0; c < nclients; c++)
	{
		pid_t		pid = fork();

		if (pid < 0)
			die("fork: %s\n", strerror(errno));
		if (pid == 0)
		{
			close(ready[0]);
			close(go[1]);
			close(count[0]);
			client(c, ready[1], go[0], count[1]);
		}
		pids[c] = pid;
	}
	close(ready[1]);
	close(go[0]);
	close(count[1]);

	/* wait until every client is connected, then start them together */
	for (int c = 0; c < nclients; c++)
		if (read(ready[0], &byte, 1) != 1)
			break;
	t0 = clock_seconds(CLOCK_MONOTONIC);
	close(go[1]);
	for (int c = 0; c < nclients; c++)
	{
		int			status;

		if (waitpid(pids[c], &status, 0) < 0 ||
			!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	elapsed = clock_seconds(CLOCK_MONOTONIC) - t0;
	while (read(count[0], &got, sizeof(got)) == sizeof(got))
		n += got;
	if (failed)
		die("%d copy client(s) failed\n", failed);
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &children);
	printf("files=%ld seconds=%.3f cpu_s=%.3f\n", n, elapsed,
		   self.ru_utime.tv_sec + self.ru_utime.tv_usec / 1e6 +
		   self.ru_stime.tv_sec + self.ru_stime.tv_usec / 1e6 +
		   children.ru_utime.tv_sec + children.ru_utime.tv_usec / 1e6 +
		   children.ru_stime.tv_sec + children.ru_stime.tv_usec / 1e6);
	return 0;
}
