/*
 * ulsock-bench: the client role of the connection tests.
 *
 * One connection per client process. Tests with several clients (multistream,
 * hotspot, fanin, fanout) fork them; each child connects, reports ready through a
 * pipe, waits for the start signal, runs, and writes what it measured into a shared
 * anonymous mapping (not a socket: the harness must not use what it measures).
 * Times come from CLOCK_MONOTONIC, which all processes share, so an aggregate rate is
 * all bytes over the span from the first start to the last end.
 */
#include "ub.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define WARMUP 10      /* exchanges not sampled */
#define MIN_SAMPLES 10 /* sampled exchanges, however long they take */

/* What one client connection measured. */
struct side {
	uint64_t sent, received, count;
	double t_start, t_end, cpu;
	struct ub_trailer srv;
	int ok, verified;
	long nsamples;
	char err[160];
};

/* A client process's work: one connection, its side, its sample slots. */
struct job {
	const struct ub_opts *o;
	enum ub_test test;
	uint64_t size;
	uint32_t session, nconn;
	struct side *side;
	double *samples;
	long max_samples;
	int ready_fd, go_fd;
};

static uint32_t session_seq;

static uint32_t new_session(void)
{
	return ((uint32_t)getpid() << 12) ^ ++session_seq;
}

static int fail(struct side *s, const char *what, int err)
{
	snprintf(s->err, sizeof(s->err), "%s: %s", what, strerror(err < 0 ? -err : err));
	s->ok = 0;
	return -1;
}

static int open_conn(const struct job *j, uint64_t fetch, uint32_t flags)
{
	struct ub_hello h = {.magic = UB_HELLO_MAGIC, .version = UB_VERSION,
			     .test = (uint16_t)j->test, .session = j->session, .nconn = j->nconn,
			     .msg_size = j->size, .window = j->o->window, .flags = flags,
			     .fetch = fetch,
			     .duration_us = (uint64_t)(j->o->seconds * 1e6)};
	int fd = ub_connect(j->o), r;

	if (fd < 0)
		return fd;
	ub_sock_setup(fd, j->o, 0);
	r = ub_write_all(fd, &h, sizeof(h), 0, j->o->timeout);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* Waits for the parent's start signal: the go pipe's writer closes it. */
static void wait_go(const struct job *j)
{
	char b = 'r';

	if (j->ready_fd < 0)
		return;
	if (write(j->ready_fd, &b, 1) != 1)
		_exit(1);
	while (read(j->go_fd, &b, 1) < 0 && errno == EINTR)
		;
}

/*
 * Ends a connection: shut our direction, read what the server still sends and check
 * its trailer against what we counted; received counts payload before the trailer.
 * When the client knows how many bytes are left (expect > 0, trailer included) it reads
 * exactly those and does not wait for the end of file; otherwise it reads to it.
 */
static int finish(const struct job *j, int fd, int spin, int shut, uint64_t expect)
{
	struct side *s = j->side;
	unsigned char tail[UB_TAIL], buf[4096];
	size_t tail_len = 0;
	uint64_t more = 0;
	int r = 0;

	if (shut && shutdown(fd, SHUT_WR) < 0)
		return fail(s, "shutdown", errno);
	if (!expect)
		r = ub_drain_to_eof(fd, spin, j->o->timeout, &more, tail, &tail_len);
	while (more < expect && r >= 0) {
		size_t n = expect - more < sizeof(buf) ? (size_t)(expect - more) : sizeof(buf);

		r = ub_read_all(fd, buf, n, spin, j->o->timeout);
		if (r >= 0) {
			ub_tail_push(tail, &tail_len, buf, n);
			more += n;
		}
	}
	if (r < 0)
		return fail(s, "reading the server's trailer", r);
	if (ub_tail_trailer(tail, tail_len, &s->srv) < 0)
		return fail(s, "server ended without a trailer", EPROTO);
	s->received += more - UB_TAIL;
	s->verified = s->srv.received == s->sent && s->srv.sent == s->received;
	s->ok = 1;
	return 0;
}

static void begin(const struct job *j, struct side *s)
{
	wait_go(j);
	s->cpu = ub_cpu_self();
	s->t_start = ub_now();
}

static void end(struct side *s)
{
	s->t_end = ub_now();
	s->cpu = ub_cpu_self() - s->cpu;
}

/* Ping-pong: the half round trip of each exchange after the warm-up, in microseconds. */
static int client_pingpong(const struct job *j, int spin)
{
	struct side *s = j->side;
	char *buf = malloc(j->size);
	double deadline, t, now;
	int fd, r = 0;

	if (!buf)
		return fail(s, "malloc", ENOMEM);
	fd = open_conn(j, 0, spin ? UB_F_SPIN : 0);
	if (fd < 0) {
		free(buf);
		return fail(s, "connect", fd);
	}
	ub_sock_setup(fd, j->o, spin);
	memset(buf, 'p', j->size);
	begin(j, s);
	deadline = s->t_start + j->o->seconds;
	for (now = s->t_start; s->nsamples < j->max_samples &&
			       (now < deadline || s->nsamples < MIN_SAMPLES);) {
		t = now;
		r = ub_write_all(fd, buf, j->size, spin, j->o->timeout);
		if (r >= 0)
			r = ub_read_all(fd, buf, j->size, spin, j->o->timeout);
		if (r < 0)
			break;
		now = ub_now();
		s->sent += j->size;
		s->received += j->size;
		if (++s->count > WARMUP)
			j->samples[s->nsamples++] = (now - t) / 2 * 1e6;
	}
	end(s);
	free(buf);
	if (r < 0) {
		close(fd);
		return fail(s, "ping-pong", r);
	}
	r = finish(j, fd, spin, 1, UB_TAIL);
	close(fd);
	return r;
}

/* One direction: messages of j->size, an ack awaited after every window of them. */
static int client_stream(const struct job *j)
{
	struct side *s = j->side;
	char *buf = malloc(j->size), ack;
	unsigned check = j->size >= 1024 ? 1 : 16, inflight = 0;
	uint64_t acks = 0;
	struct ub_trailer t;
	int fd, r = 0;

	if (!buf)
		return fail(s, "malloc", ENOMEM);
	fd = open_conn(j, 0, 0);
	if (fd < 0) {
		free(buf);
		return fail(s, "connect", fd);
	}
	memset(buf, 's', j->size);
	begin(j, s);
	for (double deadline = s->t_start + j->o->seconds;
	     s->count % check || ub_now() < deadline;) {
		r = ub_write_all(fd, buf, j->size, 0, j->o->timeout);
		if (r < 0)
			break;
		s->sent += j->size;
		s->count++;
		if (j->o->window && ++inflight == j->o->window) {
			r = ub_read_all(fd, &ack, 1, 0, j->o->timeout);
			if (r < 0)
				break;
			s->received++;
			inflight = 0;
		}
	}
	free(buf);
	if (r >= 0) {
		ub_trailer_fill(&t, s->sent, s->received, s->t_start);
		r = ub_write_all(fd, &t, sizeof(t), 0, j->o->timeout);
	}
	if (r < 0) {
		close(fd);
		return fail(s, "stream", r);
	}
	/* The server acks every window of messages it has counted, our trailer included. */
	if (r >= 0 && j->o->window)
		acks = (s->sent + UB_TAIL) / ((uint64_t)j->o->window * j->size) - s->received;
	r = finish(j, fd, 0, 1, acks + UB_TAIL);
	end(s); /* the trailer's arrival says the server has counted every byte */
	close(fd);
	return r;
}

/* Fan-out's receiving end: everything the server sends until its end of file. */
static int client_receive(const struct job *j)
{
	struct side *s = j->side;
	char b;
	int fd, r;

	fd = open_conn(j, 0, 0);
	if (fd < 0)
		return fail(s, "connect", fd);
	begin(j, s);
	if (shutdown(fd, SHUT_WR) < 0) {
		close(fd);
		return fail(s, "shutdown", errno);
	}
	/* The server starts when the last client connects: time from the first byte. */
	while ((r = (int)recv(fd, &b, 1, MSG_PEEK)) < 0 && errno == EINTR)
		;
	s->t_start = ub_now();
	r = r < 0 ? fail(s, "receive", errno) : finish(j, fd, 0, 0, 0);
	end(s);
	close(fd);
	return r;
}

/* Both directions at once through the poll engine. */
static int client_bibw(const struct job *j)
{
	struct side *s = j->side;
	struct ub_engine_conn c = {0};
	int fd, r;

	fd = open_conn(j, 0, 0);
	if (fd < 0)
		return fail(s, "connect", fd);
	ub_sock_setup(fd, j->o, 1);
	c.fd = fd;
	c.roles = UB_R_SOURCE | UB_R_SINK | UB_R_CLIENT | UB_R_PEER_TRAILER;
	c.msg = j->size;
	begin(j, s);
	r = ub_engine_run(&c, 1, s->t_start + j->o->seconds, 0, j->o->timeout, s->t_start);
	end(s);
	close(fd);
	if (r < 0)
		return fail(s, "bibw", r);
	if (ub_tail_trailer(c.tail, c.tail_len, &s->srv) < 0)
		return fail(s, "server ended without a trailer", EPROTO);
	s->sent = c.sent;
	s->received = c.raw_received - UB_TAIL;
	s->verified = s->srv.received == s->sent && s->srv.sent == s->received;
	s->ok = 1;
	return 0;
}

static int run_job(const struct job *j)
{
	switch (j->test) {
	case UB_LATENCY:
	case UB_HOTSPOT:
		return client_pingpong(j, j->o->spin);
	case UB_BIBW:
		return client_bibw(j);
	case UB_FANOUT:
		return client_receive(j);
	default:
		return client_stream(j);
	}
}

/* Shared memory for n clients: their sides, then their sample slots. */
static struct side *map_sides(int n, long samples_each, double **samples, size_t *len)
{
	void *p;

	*len = n * sizeof(struct side) + (size_t)n * samples_each * sizeof(double);
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*samples = (double *)((struct side *)p + n);
	return p;
}

static double o_budget(const struct ub_opts *o)
{
	return o->seconds * 2 + o->timeout * 3 + 10;
}

/* Forks n clients of one job, starts them together, waits for all. */
static int run_clients(struct job *base, int n, int own_sessions)
{
	int ready[2], go[2], rc = 0;
	pid_t pids[UB_MAX_CLIENTS];
	char b;

	if (pipe(ready) < 0 || pipe(go) < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			struct job j = *base;

			close(ready[0]);
			close(go[1]);
			j.ready_fd = ready[1];
			j.go_fd = go[0];
			ub_watchdog(o_budget(base->o));
			j.side += i;
			j.samples += (size_t)i * base->max_samples;
			if (own_sessions)
				j.session += (uint32_t)i;
			_exit(run_job(&j) < 0);
		}
		if (pids[i] < 0)
			rc = -errno;
	}
	close(ready[1]);
	close(go[0]);
	for (int i = 0; i < n && !rc; i++) {
		struct pollfd p = {.fd = ready[0], .events = POLLIN};

		if (poll(&p, 1, (int)(base->o->timeout * 1000)) <= 0 || read(ready[0], &b, 1) != 1)
			rc = -ETIMEDOUT;
	}
	close(go[1]); /* start: every child's read of the go pipe returns */
	close(ready[0]);
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			waitpid(pids[i], NULL, 0);
	return rc;
}

/* Folds the clients' sides into one row. */
static void aggregate(struct ub_row *row, const struct side *sd, int n, int shared_server)
{
	double t0 = INFINITY, t1 = 0, srv_cpu = 0;

	row->verified = 1;
	row->cpu_client_s = 0;
	for (int i = 0; i < n; i++) {
		const struct side *s = &sd[i];
		double c = s->srv.cpu_us / 1e6;

		t0 = fmin(t0, s->t_start);
		t1 = fmax(t1, s->t_end);
		row->sent += s->sent;
		row->received += s->received;
		row->srv_sent += s->srv.sent;
		row->srv_received += s->srv.received;
		row->count += s->count;
		row->cpu_client_s += s->cpu;
		srv_cpu = shared_server ? fmax(srv_cpu, c) : srv_cpu + c;
		row->verified &= s->verified;
	}
	row->cpu_server_s = srv_cpu;
	row->elapsed_s = t1 - t0;
}

static int stream_row(struct ub_row *row, enum ub_test t)
{
	uint64_t bytes = t == UB_FANOUT ? row->received : t == UB_BIBW ? row->sent + row->received
								       : row->sent;

	if (row->elapsed_s <= 0)
		return -1;
	row->mb_s = bytes / 1e6 / row->elapsed_s;
	if (!row->count) /* receivers count messages by bytes */
		row->count = bytes / row->size;
	if (row->size)
		row->msg_s = bytes / (double)row->size / row->elapsed_s;
	ub_row_cpu(row, bytes);
	return 0;
}

static int pingpong_row(struct ub_row *row, double *samples, const struct side *sd, int n,
			long each)
{
	long k = 0;

	for (int i = 0; i < n; i++)
		for (long m = 0; m < sd[i].nsamples; m++)
			samples[k++] = samples[(size_t)i * each + m];
	if (ub_sort_percentiles(samples, (size_t)k, &row->lat_med_us, &row->lat_p99_us,
				&row->lat_p999_us) < 0)
		return -1;
	row->msg_s = row->elapsed_s > 0 ? row->count / row->elapsed_s : NAN;
	ub_row_cpu(row, row->sent + row->received);
	return 0;
}

/* Runs one row: n clients of test t at message size size. Returns 0 or -1. */
static int run_row(struct ub_opts *o, enum ub_test t, uint64_t size, int n, struct ub_row *row)
{
	int pp = t == UB_LATENCY || t == UB_HOTSPOT;

	long each = pp ? (t == UB_HOTSPOT ? o->max_iters / n + 1 : o->max_iters) : 0;
	struct job j = {.o = o, .test = t, .size = size, .session = new_session(),
			.nconn = (t == UB_MULTISTREAM || t == UB_LATENCY) ? 1 : (uint32_t)n,
			.max_samples = each, .ready_fd = -1, .go_fd = -1};
	size_t len;
	int rc;

	j.side = map_sides(n, each, &j.samples, &len);
	if (!j.side)
		ub_die("mmap: %s", strerror(errno));
	session_seq += (uint32_t)n;
	rc = run_clients(&j, n, t == UB_MULTISTREAM);
	ub_row_init(row, ub_test_name(t));
	row->spin = o->spin;
	row->size = size;
	row->clients = n;
	for (int i = 0; i < n; i++)
		if (!j.side[i].ok) {
			ub_warn("%s size %llu client %d: %s", row->test, (unsigned long long)size, i,
				j.side[i].err[0] ? j.side[i].err : "client died");
			rc = -1;
		}
	if (!rc) {
		aggregate(row, j.side, n, t != UB_MULTISTREAM);
		rc = pp ? pingpong_row(row, j.samples, j.side, n, each) : stream_row(row, t);
		if (rc < 0)
			ub_warn("%s size %llu: nothing measured", row->test, (unsigned long long)size);
	}
	munmap(j.side, len);
	return rc < 0 ? -1 : 0;
}

/* Asks the server for its own CPU seconds so far (a stats fetch). */
static double server_cpu(const struct ub_opts *o)
{
	struct job j = {.o = o, .test = UB_CONNECT, .size = 1, .nconn = 1};
	unsigned char tail[UB_TAIL];
	size_t tail_len = 0;
	struct ub_trailer t;
	uint64_t n = 0;
	int fd = open_conn(&j, UB_TAIL, UB_F_STATS);

	if (fd < 0)
		return NAN;
	if (ub_drain_to_eof(fd, 0, o->timeout, &n, tail, &tail_len) < 0 ||
	    ub_tail_trailer(tail, tail_len, &t) < 0)
		t.cpu_us = 0, n = 0;
	close(fd);
	return n ? t.cpu_us / 1e6 : NAN;
}

/* Connection set-up and tear-down; with fetch_max, seed 001's Ganglia pattern. */
static int connect_row(struct ub_opts *o, enum ub_test t, struct ub_row *row)
{
	struct job j = {.o = o, .test = t, .size = 1, .nconn = 1};
	unsigned seed = 12345, range = (unsigned)(o->fetch_max - o->fetch_min + 1);
	double cpu0 = ub_cpu_self(), srv0 = server_cpu(o), t0 = ub_now();
	char buf[16 << 10];

	ub_row_init(row, ub_test_name(t));
	row->verified = 1;
	row->clients = 1;
	row->size = t == UB_GANGLIA ? (uint64_t)o->fetch_max : 1;
	while (ub_now() - t0 < o->seconds || row->count < 10) {
		uint64_t want = t == UB_GANGLIA ? (uint64_t)o->fetch_min + rand_r(&seed) % range : 1;
		int fd = open_conn(&j, want, 0), r;
		uint64_t got = 0;

		if (fd < 0) {
			ub_warn("%s: connect: %s", row->test, strerror(-fd));
			return -1;
		}
		while ((r = ub_read_some(fd, buf, sizeof(buf), 0, o->timeout)) > 0)
			got += (uint64_t)r;
		close(fd);
		if (r < 0) {
			ub_warn("%s: read: %s", row->test, strerror(-r));
			return -1;
		}
		row->verified &= got == want;
		row->received += got;
		row->sent += sizeof(struct ub_hello);
		row->count++;
	}
	row->elapsed_s = ub_now() - t0;
	row->cpu_client_s = ub_cpu_self() - cpu0;
	row->cpu_server_s = server_cpu(o) - srv0;
	row->srv_sent = row->received;
	row->srv_received = row->sent;
	row->conn_s = row->count / row->elapsed_s;
	if (t == UB_GANGLIA)
		row->mb_s = row->received / 1e6 / row->elapsed_s;
	ub_row_cpu(row, row->received);
	return 0;
}

static int sweep_sizes(struct ub_opts *o, enum ub_test t, struct ub_row *rows, int max)
{
	int n = 0;

	for (int m = 1; m <= 2; m++) {
		if (t != UB_LATENCY && m == 2)
			break;
		if (t == UB_LATENCY && !(o->modes & m))
			continue;
		o->spin = m == 2;
		for (int i = 0; i < o->nsizes && n < max; i++)
			if (run_row(o, t, o->sizes[i], 1, &rows[n]) == 0)
				n++;
			else
				return -1;
	}
	o->spin = 0;
	return n;
}

int ub_run_test(enum ub_test t, struct ub_opts *o, struct ub_row *rows, int max)
{
	int n = 0;

	switch (t) {
	case UB_LATENCY:
	case UB_BW:
	case UB_BIBW:
		return sweep_sizes(o, t, rows, max);
	case UB_CONNECT:
	case UB_GANGLIA:
		return connect_row(o, t, rows) < 0 ? -1 : 1;
	case UB_OVERHEAD:
		return ub_overhead(o, rows, max);
	default:
		for (int i = 0; i < o->nclients && n < max; i++, n++)
			if (run_row(o, t, t == UB_HOTSPOT ? o->hot_size : o->mt_size, o->clients[i],
				    &rows[n]) < 0)
				return -1;
		return n;
	}
}
