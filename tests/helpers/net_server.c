/*
 * net_server - the server half of the net_* tests.  Prints "READY port=P pid=PID" once it
 * listens (--port 0 picks a free port), then one "CONN ..." line per finished connection,
 * and with --max-conns N exits after N connections: 0 if all of them went well, 1 if not.
 *
 * Modes (what each connection gets):
 *   echo    every byte received is sent back; EOF ends the connection.
 *   sink    everything is read to EOF, then "SINK <count> <fnv64 hex>\n" is sent back.
 *   source  --bytes of stream --seed are sent, then SHUT_WR, then it waits for EOF.
 *   duplex  a header (see net_util.h) names two streams; both flow at once, both verified.
 * --record DIR writes what echo and sink connections received to DIR/conn-IDX.bin, so a
 * test can compare byte for byte what a plain server saw.
 *
 * Concurrency models (who calls accept()):
 *   default        one thread accepts; one new thread per connection.
 *   --fork         one process accepts; one forked child per connection.
 *   --threads N    N threads share the listening socket, each accepts and serves in turn.
 *   --prefork N    the parent listens and forks N workers that all accept (nginx style).
 *   --nonblock     a poll() event loop on a non-blocking listener serves every connection;
 *                  with --threads/--prefork each worker runs its own loop.
 * --io block|nonblock|mix picks blocking or poll()-driven I/O per connection in the
 * threaded models (mix alternates; a duplex client may also choose per connection).
 */
#include "net_util.h"

#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

enum mode { M_ECHO, M_SINK, M_SOURCE, M_DUPLEX };
enum model { MODEL_THREAD, MODEL_FORK, MODEL_THREADS, MODEL_PREFORK };
enum io { IO_BLOCK, IO_NONBLOCK, IO_MIX };

struct opts {
	const char *addr;
	unsigned port;
	enum mode mode;
	enum model model;
	enum io io;
	int event_loop;
	long workers;
	long max_conns;
	int v6only;
	const char *record_dir;
	uint64_t seed;
	uint64_t bytes;
	size_t min_io, max_io;
	int backlog;
	int quiet;
	unsigned timeout;
};

static struct opts o = {
    .addr = "127.0.0.1",
    .mode = M_ECHO,
    .model = MODEL_THREAD,
    .io = IO_BLOCK,
    .workers = 1,
    .v6only = -1,
    .seed = 1,
    .bytes = 65536,
    .min_io = 1,
    .max_io = 65536,
    .backlog = 4096,
    .timeout = NET_DEFAULT_TIMEOUT_S,
};

/* Counters shared by every worker, thread or process (a MAP_SHARED anonymous page). */
struct shared {
	atomic_long accepted;
	atomic_long done;
	atomic_long errors;
};

static struct shared *sh;
static int lfd = -1;

/* The result of one connection, for its CONN line. */
struct result {
	uint64_t rx, tx;
	char err[200];
};

static void usage(void)
{
	fprintf(
	    stderr,
	    "usage: net_server [--port P] [--addr A] [--mode echo|sink|source|duplex]\n"
	    "  [--nonblock] [--fork | --threads N | --prefork N] [--max-conns N]\n"
	    "  [--io block|nonblock|mix] [--v6only 0|1] [--record DIR] [--seed S]\n"
	    "  [--bytes N] [--min-io N] [--max-io N] [--backlog N] [--quiet] [--timeout SEC]\n");
	exit(2);
}

static int parse_flag(const char *a)
{
	if (!strcmp(a, "--nonblock"))
		o.event_loop = 1;
	else if (!strcmp(a, "--fork"))
		o.model = MODEL_FORK;
	else if (!strcmp(a, "--quiet"))
		o.quiet = 1;
	else
		return 0;
	return 1;
}

static void parse_enum(const char *a, const char *v)
{
	static const char *const modes[] = {"echo", "sink", "source", "duplex", NULL};
	static const char *const ios[] = {"block", "nonblock", "mix", NULL};
	const char *const *names = !strcmp(a, "--mode") ? modes : ios;
	int i = 0;

	while (names[i] && strcmp(names[i], v))
		i++;
	if (!names[i])
		usage();
	if (names == modes)
		o.mode = (enum mode)i;
	else
		o.io = (enum io)i;
}

static void parse(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (parse_flag(a))
			continue;
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--port"))
			o.port = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--addr"))
			o.addr = v;
		else if (!strcmp(a, "--mode") || !strcmp(a, "--io"))
			parse_enum(a, v);
		else if (!strcmp(a, "--threads"))
			o.model = MODEL_THREADS, o.workers = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--prefork"))
			o.model = MODEL_PREFORK, o.workers = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--max-conns"))
			o.max_conns = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--v6only"))
			o.v6only = (int)net_parse_num(a, v);
		else if (!strcmp(a, "--record"))
			o.record_dir = v;
		else if (!strcmp(a, "--seed"))
			o.seed = net_parse_num(a, v);
		else if (!strcmp(a, "--bytes"))
			o.bytes = net_parse_num(a, v);
		else if (!strcmp(a, "--min-io"))
			o.min_io = (size_t)net_parse_num(a, v);
		else if (!strcmp(a, "--max-io"))
			o.max_io = (size_t)net_parse_num(a, v);
		else if (!strcmp(a, "--backlog"))
			o.backlog = (int)net_parse_num(a, v);
		else if (!strcmp(a, "--timeout"))
			o.timeout = (unsigned)net_parse_num(a, v);
		else
			usage();
	}
	if (o.workers < 1 || o.min_io < 1 || o.max_io < o.min_io || o.max_io > (1u << 24))
		usage();
	if (o.event_loop && o.model == MODEL_FORK)
		net_die("--nonblock and --fork do not combine");
}

/* ---- bookkeeping ---- */

static int final_status(void) { return atomic_load(&sh->errors) ? 1 : 0; }

static void report(long idx, long worker, const struct result *r)
{
	if (r->err[0])
		atomic_fetch_add(&sh->errors, 1);
	if (!o.quiet || r->err[0])
		printf("CONN idx=%ld pid=%d worker=%ld rx=%" PRIu64 " tx=%" PRIu64 " result=%s\n",
		       idx, (int)getpid(), worker, r->rx, r->tx, r->err[0] ? r->err : "ok");
}

/* Counts a finished connection; the one that completes --max-conns ends the process. */
static void conn_done(void)
{
	long d = atomic_fetch_add(&sh->done, 1) + 1;

	/* Thread- and fork-per-connection servers count in their accept loop instead. */
	int counts_elsewhere = o.model == MODEL_FORK || (o.model == MODEL_THREAD && !o.event_loop);

	if (o.max_conns > 0 && d >= o.max_conns && !counts_elsewhere) {
		printf("DONE conns=%ld errors=%ld\n", d, atomic_load(&sh->errors));
		exit(final_status());
	}
}

static FILE *open_record(long idx)
{
	char path[4096];
	FILE *f;

	if (!o.record_dir)
		return NULL;
	snprintf(path, sizeof(path), "%s/conn-%ld.bin", o.record_dir, idx);
	f = fopen(path, "wb");
	if (!f)
		net_die("%s: %s", path, strerror(errno));
	return f;
}

static void close_record(FILE *f, struct result *r)
{
	if (f && fclose(f) != 0 && !r->err[0])
		snprintf(r->err, sizeof(r->err), "writing the record failed");
}

static int conn_nonblock(long idx) { return o.io == IO_NONBLOCK || (o.io == IO_MIX && (idx & 1)); }

/* ---- one connection, blocking style (a thread or process of its own) ---- */

static void serve_echo(int fd, long idx, int nb, unsigned char *buf, struct result *r)
{
	struct net_rng rng = {net_key(o.seed, (uint64_t)idx, 'e')};
	FILE *rec = open_record(idx);

	for (;;) {
		size_t want = net_rng_size(&rng, o.min_io, o.max_io);
		ssize_t n = net_read_some(fd, buf, want, nb, net_rng_next(&rng));
		int rc;

		if (n <= 0) {
			if (n < 0)
				snprintf(r->err, sizeof(r->err), "recv: %s", strerror((int)-n));
			break;
		}
		r->rx += (uint64_t)n;
		if (rec)
			fwrite(buf, 1, (size_t)n, rec);
		rc = net_write_all(fd, buf, (size_t)n, nb, net_rng_next(&rng));
		if (rc < 0) {
			snprintf(r->err, sizeof(r->err), "send: %s", strerror(-rc));
			break;
		}
		r->tx += (uint64_t)n;
	}
	close_record(rec, r);
}

static void serve_sink(int fd, long idx, int nb, unsigned char *buf, struct result *r)
{
	struct net_rng rng = {net_key(o.seed, (uint64_t)idx, 'k')};
	FILE *rec = open_record(idx);
	uint64_t hash = NET_FNV_INIT;
	char reply[64];
	ssize_t n;
	int rc, len;

	while ((n = net_read_some(fd, buf, net_rng_size(&rng, o.min_io, o.max_io), nb,
				  net_rng_next(&rng))) > 0) {
		r->rx += (uint64_t)n;
		hash = net_fnv(hash, buf, (size_t)n);
		if (rec)
			fwrite(buf, 1, (size_t)n, rec);
	}
	close_record(rec, r);
	if (n < 0) {
		snprintf(r->err, sizeof(r->err), "recv: %s", strerror((int)-n));
		return;
	}
	len = snprintf(reply, sizeof(reply), "SINK %" PRIu64 " %016" PRIx64 "\n", r->rx, hash);
	rc = net_write_all(fd, reply, (size_t)len, nb, 0);
	if (rc < 0)
		snprintf(r->err, sizeof(r->err), "sending the sink reply: %s", strerror(-rc));
	else
		r->tx = (uint64_t)len;
}

static int read_header(int fd, int nb, struct net_duplex *h, struct result *r)
{
	unsigned char hdr[NET_DUPLEX_LEN];
	size_t got = 0;

	while (got < sizeof(hdr)) {
		ssize_t n = net_read_some(fd, hdr + got, sizeof(hdr) - got, nb, 0);

		if (n <= 0) {
			snprintf(r->err, sizeof(r->err), "duplex header: %s",
				 n < 0 ? strerror((int)-n) : "EOF");
			return -1;
		}
		got += (size_t)n;
	}
	r->rx = got;
	if (net_duplex_decode(hdr, h) < 0) {
		snprintf(r->err, sizeof(r->err), "bad duplex header");
		return -1;
	}
	return 0;
}

/* The streams of source and duplex connections, seen from the server. */
static void setup_xfer(struct net_xfer *x, int fd, long idx, const struct net_duplex *h,
		       unsigned char *bufs)
{
	net_xfer_init(x, fd, net_key(o.seed, (uint64_t)idx, 'x'));
	x->min_io = o.min_io;
	x->max_io = o.max_io;
	x->tx_buf = bufs;
	x->rx_buf = bufs + o.max_io;
	x->shut_wr = 1;
	x->expect_eof = 1;
	if (h) {
		x->tx_key = h->key_s2c;
		x->tx_len = h->len_s2c;
		x->rx_key = h->key_c2s;
		x->rx_len = h->len_c2s;
		if (h->max_io < x->max_io)
			x->max_io = (size_t)h->max_io;
	} else {
		x->tx_key = o.seed;
		x->tx_len = o.bytes;
	}
}

static void serve_xfer(int fd, long idx, int nb, unsigned char *bufs, struct result *r)
{
	struct net_duplex h;
	struct net_xfer x;

	if (o.mode == M_DUPLEX) {
		if (read_header(fd, nb, &h, r) < 0)
			return;
		if (h.io == 1 || h.io == 2) {
			nb = h.io == 2;
			net_set_nonblock(fd, nb);
		}
	}
	setup_xfer(&x, fd, idx, o.mode == M_DUPLEX ? &h : NULL, bufs);
	x.nonblock = nb;
	if (net_xfer_run(&x) < 0)
		snprintf(r->err, sizeof(r->err), "%s (sent %" PRIu64 ", verified %" PRIu64 ")",
			 net_xfer_error(&x), x.tx_done, x.rx_done);
	r->rx += x.rx_done;
	r->tx += x.tx_done;
}

static void handle_conn(int fd, long idx, long worker)
{
	struct result r = {0};
	unsigned char *bufs = malloc(2 * o.max_io);
	int nb = conn_nonblock(idx);

	if (!bufs)
		net_die("out of memory");
	net_set_nonblock(fd, nb);
	if (o.mode == M_ECHO)
		serve_echo(fd, idx, nb, bufs, &r);
	else if (o.mode == M_SINK)
		serve_sink(fd, idx, nb, bufs, &r);
	else
		serve_xfer(fd, idx, nb, bufs, &r);
	free(bufs);
	close(fd);
	report(idx, worker, &r);
}

/* ---- the event loop ---- */

struct econn {
	int fd;
	long idx;
	int phase; /* 0: duplex header, 1: running, 2: sink reply, 3: done */
	unsigned char hdr[NET_DUPLEX_LEN];
	size_t hdr_got;
	unsigned char *buf; /* echo data or the sink reply waiting to go out */
	size_t off, len;
	int eof;
	uint64_t hash;
	FILE *rec;
	struct net_rng rng;
	struct net_xfer x;
	struct result r;
};

struct eloop {
	long worker;
	struct econn **conns;
	size_t n, cap;
	unsigned char *bufs; /* shared by every xfer: each op regenerates what it sends */
};

static short ec_events(const struct econn *c)
{
	if (o.mode == M_SOURCE || (o.mode == M_DUPLEX && c->phase == 1))
		return net_xfer_events(&c->x);
	if (c->len > c->off)
		return POLLOUT;
	return POLLIN;
}

static void ec_fail(struct econn *c, const char *what, int err)
{
	snprintf(c->r.err, sizeof(c->r.err), "%s: %s", what, strerror(err));
	c->phase = 3;
}

/* Reads into the connection's buffer; returns bytes read, 0 at EOF, -1 would-block/error. */
static ssize_t ec_read(struct econn *c, size_t cap)
{
	size_t want = net_rng_size(&c->rng, o.min_io, cap);
	ssize_t n = net_read_op(c->fd, c->buf, want, net_rng_next(&c->rng));

	if (n < 0 && !net_is_again(errno))
		ec_fail(c, "recv", errno);
	return n;
}

static void ec_flush(struct econn *c)
{
	while (c->off < c->len) {
		ssize_t n =
		    net_write_op(c->fd, c->buf + c->off, c->len - c->off, net_rng_next(&c->rng));

		if (n < 0) {
			if (!net_is_again(errno))
				ec_fail(c, "send", errno);
			return;
		}
		c->off += (size_t)n;
		c->r.tx += (uint64_t)n;
	}
	c->off = c->len = 0;
	if (c->phase == 2 || (c->eof && o.mode == M_ECHO))
		c->phase = 3;
}

static void ec_got(struct econn *c, ssize_t n)
{
	c->r.rx += (uint64_t)n;
	if (c->rec)
		fwrite(c->buf, 1, (size_t)n, c->rec);
	if (o.mode == M_ECHO) {
		c->off = 0;
		c->len = (size_t)n;
		ec_flush(c);
	} else {
		c->hash = net_fnv(c->hash, c->buf, (size_t)n);
	}
}

static void ec_eof(struct econn *c)
{
	c->eof = 1;
	close_record(c->rec, &c->r);
	c->rec = NULL;
	if (o.mode == M_ECHO) {
		c->phase = 3;
		return;
	}
	c->off = 0;
	c->len = (size_t)snprintf((char *)c->buf, 64, "SINK %" PRIu64 " %016" PRIx64 "\n", c->r.rx,
				  c->hash);
	c->phase = 2;
	ec_flush(c);
}

/* Echo and sink: read while nothing is pending, write what is. */
static void ec_step_stream(struct econn *c, short ev)
{
	if (c->len > c->off) {
		ec_flush(c);
		return;
	}
	for (int i = 0; i < 64 && c->phase == 1 && (ev & (POLLIN | POLLERR | POLLHUP)); i++) {
		ssize_t n = ec_read(c, o.max_io);

		if (n < 0)
			return;
		if (n == 0) {
			ec_eof(c);
			return;
		}
		ec_got(c, n);
		if (c->len > c->off)
			return;
	}
}

static void ec_step_header(struct econn *c)
{
	struct net_duplex h;
	ssize_t n = read(c->fd, c->hdr + c->hdr_got, sizeof(c->hdr) - c->hdr_got);

	if (n < 0 && net_is_again(errno))
		return;
	if (n <= 0) {
		ec_fail(c, "duplex header", n < 0 ? errno : EPIPE);
		return;
	}
	c->hdr_got += (size_t)n;
	c->r.rx += (uint64_t)n;
	if (c->hdr_got < sizeof(c->hdr))
		return;
	if (net_duplex_decode(c->hdr, &h) < 0) {
		snprintf(c->r.err, sizeof(c->r.err), "bad duplex header");
		c->phase = 3;
		return;
	}
	setup_xfer(&c->x, c->fd, c->idx, &h, c->x.tx_buf);
	c->x.nonblock = 1;
	c->phase = 1;
}

static void ec_step(struct econn *c, short ev)
{
	if (o.mode == M_DUPLEX && c->phase == 0) {
		ec_step_header(c);
		return;
	}
	if (o.mode == M_SOURCE || o.mode == M_DUPLEX) {
		if (net_xfer_step(&c->x, ev) < 0)
			snprintf(c->r.err, sizeof(c->r.err), "%s (sent %" PRIu64 ")",
				 net_xfer_error(&c->x), c->x.tx_done);
		if (c->r.err[0] || net_xfer_done(&c->x)) {
			c->r.rx += c->x.rx_done;
			c->r.tx += c->x.tx_done;
			c->phase = 3;
		}
		return;
	}
	ec_step_stream(c, ev);
}

static void ec_add(struct eloop *l, int fd)
{
	struct econn *c = calloc(1, sizeof(*c));

	if (!c || !(c->buf = malloc(o.max_io > 64 ? o.max_io : 64)))
		net_die("out of memory");
	c->fd = fd;
	c->idx = atomic_fetch_add(&sh->accepted, 1);
	c->phase = o.mode == M_DUPLEX ? 0 : 1;
	c->hash = NET_FNV_INIT;
	c->rng.s = net_key(o.seed, (uint64_t)c->idx, 'e');
	c->rec = open_record(c->idx);
	c->x.tx_buf = l->bufs;
	if (o.mode == M_SOURCE) {
		setup_xfer(&c->x, fd, c->idx, NULL, l->bufs);
		c->x.nonblock = 1;
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->conns = realloc(l->conns, l->cap * sizeof(*l->conns));
		if (!l->conns)
			net_die("out of memory");
	}
	l->conns[l->n++] = c;
}

static void ec_close(struct eloop *l, size_t i)
{
	struct econn *c = l->conns[i];

	close_record(c->rec, &c->r);
	close(c->fd);
	report(c->idx, l->worker, &c->r);
	free(c->buf);
	free(c);
	l->conns[i] = l->conns[--l->n];
	conn_done();
}

static void el_accept(struct eloop *l)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			ec_add(l, fd);
			continue;
		}
		/* EAGAIN is normal: another worker took the connection first. */
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
		    errno == ECONNABORTED)
			return;
		net_die("accept: %s", strerror(errno));
	}
}

static void event_loop(long worker)
{
	struct eloop l = {.worker = worker};
	struct pollfd *pfds = NULL;
	size_t pcap = 0;

	l.bufs = malloc(2 * o.max_io);
	if (!l.bufs)
		net_die("out of memory");
	for (;;) {
		if (pcap < l.n + 1) {
			pcap = 2 * (l.n + 1);
			pfds = realloc(pfds, pcap * sizeof(*pfds));
			if (!pfds)
				net_die("out of memory");
		}
		pfds[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
		for (size_t i = 0; i < l.n; i++)
			pfds[i + 1] =
			    (struct pollfd){.fd = l.conns[i]->fd, .events = ec_events(l.conns[i])};
		size_t n = l.n;
		if (poll(pfds, n + 1, 1000) < 0 && errno != EINTR)
			net_die("poll: %s", strerror(errno));
		/* Walk backwards: ec_close() moves the last connection into the freed slot. */
		for (size_t i = n; i-- > 0;) {
			if (pfds[i + 1].revents)
				ec_step(l.conns[i], pfds[i + 1].revents);
			if (l.conns[i]->phase == 3)
				ec_close(&l, i);
		}
		if (pfds[0].revents & POLLIN)
			el_accept(&l);
	}
}

/* ---- concurrency models ---- */

static int accept_blocking(void)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd >= 0)
			return fd;
		if (errno != EINTR && errno != ECONNABORTED)
			net_die("accept: %s", strerror(errno));
	}
}

static void serial_worker(long worker)
{
	if (o.event_loop)
		event_loop(worker);
	for (;;) {
		int fd = accept_blocking();

		handle_conn(fd, atomic_fetch_add(&sh->accepted, 1), worker);
		conn_done();
	}
}

static void *worker_thread(void *arg)
{
	serial_worker((long)(intptr_t)arg);
	return NULL;
}

struct conn_arg {
	int fd;
	long idx;
};

static void *conn_thread(void *arg)
{
	struct conn_arg a = *(struct conn_arg *)arg;

	free(arg);
	handle_conn(a.fd, a.idx, -1);
	conn_done();
	return NULL;
}

static int thread_per_conn(void)
{
	for (long k = 0; o.max_conns == 0 || k < o.max_conns; k++) {
		struct conn_arg *a = malloc(sizeof(*a));
		pthread_t t;

		if (!a)
			net_die("out of memory");
		a->fd = accept_blocking();
		a->idx = atomic_fetch_add(&sh->accepted, 1);
		if (net_thread_start(&t, conn_thread, a, 1) < 0)
			net_die("pthread_create failed");
	}
	while (atomic_load(&sh->done) < o.max_conns)
		usleep(2000);
	printf("DONE conns=%ld errors=%ld\n", o.max_conns, atomic_load(&sh->errors));
	return final_status();
}

static void child_setup(void)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(1);
	alarm(o.timeout);
}

static int fork_per_conn(void)
{
	long children = 0;

	for (long k = 0; o.max_conns == 0 || k < o.max_conns; k++) {
		int fd = accept_blocking();
		long idx = atomic_fetch_add(&sh->accepted, 1);
		pid_t pid;

		fflush(stdout);
		pid = fork();
		if (pid < 0)
			net_die("fork: %s", strerror(errno));
		if (pid == 0) {
			child_setup();
			close(lfd);
			handle_conn(fd, idx, -1);
			conn_done();
			exit(0);
		}
		children++;
		close(fd);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			children--;
	}
	while (children > 0 && waitpid(-1, NULL, 0) > 0)
		children--;
	printf("DONE conns=%ld errors=%ld\n", atomic_load(&sh->done), atomic_load(&sh->errors));
	return final_status();
}

static int threads_model(void)
{
	pthread_t *t = calloc((size_t)o.workers, sizeof(*t));

	if (!t)
		net_die("out of memory");
	for (long i = 0; i < o.workers; i++)
		if (net_thread_start(&t[i], worker_thread, (void *)(intptr_t)i, 0) < 0)
			net_die("pthread_create failed");
	/* The worker that completes --max-conns exits the process. */
	for (long i = 0; i < o.workers; i++)
		pthread_join(t[i], NULL);
	return 1;
}

/* Parent of --prefork: waits until --max-conns are done (a worker exits), then stops the
 * idle workers that are still blocked in accept(). */
static int prefork_model(void)
{
	pid_t *pids = calloc((size_t)o.workers, sizeof(*pids));
	int status, bad = 0;
	pid_t pid;

	if (!pids)
		net_die("out of memory");
	fflush(stdout);
	for (long i = 0; i < o.workers; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			net_die("fork: %s", strerror(errno));
		if (pids[i] == 0) {
			child_setup();
			serial_worker(i);
		}
	}
	printf("WORKERS");
	for (long i = 0; i < o.workers; i++)
		printf(" %d", (int)pids[i]);
	printf("\n");
	while ((pid = waitpid(-1, &status, 0)) > 0) {
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bad = 1;
		for (long i = 0; i < o.workers; i++)
			if (pids[i] == pid)
				pids[i] = 0;
		if (bad || (o.max_conns > 0 && atomic_load(&sh->done) >= o.max_conns))
			break;
	}
	for (long i = 0; i < o.workers; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGTERM);
	while (waitpid(-1, NULL, 0) > 0)
		;
	printf("DONE conns=%ld errors=%ld\n", atomic_load(&sh->done), atomic_load(&sh->errors));
	return bad ? 1 : final_status();
}

static void open_listener(void)
{
	struct net_addr a;
	int one = 1;

	net_addr_parse(o.addr, o.port, &a);
	lfd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		net_die("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (a.family == AF_INET6 && o.v6only >= 0 &&
	    setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &o.v6only, sizeof(o.v6only)) < 0)
		net_die("IPV6_V6ONLY: %s", strerror(errno));
	if (bind(lfd, (struct sockaddr *)&a.ss, a.len) < 0)
		net_die("bind %s port %u: %s", o.addr, o.port, strerror(errno));
	if (listen(lfd, o.backlog) < 0)
		net_die("listen: %s", strerror(errno));
	if (o.event_loop && net_set_nonblock(lfd, 1) < 0)
		net_die("O_NONBLOCK on the listener failed");
}

int main(int argc, char **argv)
{
	parse(argc, argv);
	net_common_setup(o.timeout);
	net_raise_nofile(65536);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		net_die("mmap: %s", strerror(errno));
	open_listener();
	printf("READY port=%u pid=%d\n", net_sock_port(lfd), (int)getpid());

	if (o.model == MODEL_PREFORK)
		return prefork_model();
	if (o.model == MODEL_THREADS)
		return threads_model();
	if (o.model == MODEL_FORK)
		return fork_per_conn();
	if (o.event_loop)
		serial_worker(0);
	return thread_per_conn();
}
