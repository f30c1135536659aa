/*
 * net_client - opens TCP connections to net_server (or any server speaking the same simple
 * modes) and verifies every byte.  Exit 0 only if every connection verified; 1 if any
 * failed; 2 on usage or setup errors.  A plain program: the tests run it with and without
 * the ulsock preload.
 *
 * Modes (per connection, connection K of N):
 *   echo    send --bytes of stream key(seed,K), expect the same bytes back, then
 *           shutdown(SHUT_WR) and expect EOF with not one extra byte.
 *   sink    send the stream, shutdown(SHUT_WR), expect "SINK <count> <fnv64>\n" then EOF.
 *   source  send nothing, expect --bytes of stream --seed (the server's), then EOF.
 *   duplex  send a header naming both streams, then send and receive --bytes each way at
 *           once, both verified, then EOF both ways.
 *   none    connect and close without a byte.
 *
 * Connections run --concurrency at a time.  --hold connects all of them first, runs the
 * exchanges on the open sockets, prints "HELD conns=N" (and with --pause-held waits for a
 * line on stdin), and only then shuts each down and closes it; --settle MS first waits MS
 * ms in one poll() on all of them, asking for no event.  --pause-at K prints
 * "PAUSE done=K" after K connections and waits for a line on stdin (connections then run
 * one at a time), so a test can inspect both processes at a quiet moment.
 * --io mix alternates blocking and poll()-driven sockets (and, in duplex mode, asks the
 * server for both styles too); --nb-connect connects the non-blocking way.
 * Last line: "OK|FAIL conns=N failed=F tx=B rx=B einprogress=E immediate=I ms=T".
 */
#include "net_util.h"

#include <stdatomic.h>
#include <sys/stat.h>

enum mode { M_ECHO, M_SINK, M_SOURCE, M_DUPLEX, M_NONE };
enum io { IO_BLOCK, IO_NONBLOCK, IO_MIX };

struct opts {
	const char *addr;
	unsigned port;
	enum mode mode;
	enum io io;
	long conns;
	long concurrency;
	uint64_t bytes;
	uint64_t seed;
	size_t min_io, max_io;
	int nb_connect;
	int hold;
	long settle_ms;
	int pause_held;
	long pause_at[8];
	int n_pause;
	int expect_refused;
	const char *dump_dir;
	unsigned timeout;
	int quiet;
};

static struct opts o = {
    .addr = "127.0.0.1",
    .mode = M_ECHO,
    .io = IO_BLOCK,
    .conns = 1,
    .concurrency = 1,
    .bytes = 65536,
    .seed = 1,
    .min_io = 1,
    .max_io = 65536,
    .timeout = NET_DEFAULT_TIMEOUT_S,
};

static atomic_long next_conn;
static atomic_long n_failed;
static atomic_long n_einprogress;
static atomic_long n_immediate;
static atomic_ullong total_tx;
static atomic_ullong total_rx;
static int *held_fds;

static void usage(void)
{
	fprintf(stderr,
		"usage: net_client --port P [--addr A] [--mode echo|sink|source|duplex|none]\n"
		"  [--conns N] [--concurrency C] [--hold [--settle MS]] [--bytes N] [--seed S]\n"
		"  [--io block|nonblock|mix] [--nb-connect] [--min-io N] [--max-io N]\n"
		"  [--dump-dir D] [--pause-at K]... [--pause-held]\n"
		"  [--expect-refused] [--timeout SEC] [--quiet]\n");
	exit(2);
}

static void parse(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int used = 1;

		if (!strcmp(a, "--hold"))
			o.hold = 1, used = 0;
		else if (!strcmp(a, "--nb-connect"))
			o.nb_connect = 1, used = 0;
		else if (!strcmp(a, "--pause-held"))
			o.pause_held = 1, used = 0;
		else if (!strcmp(a, "--expect-refused"))
			o.expect_refused = 1, used = 0;
		else if (!strcmp(a, "--quiet"))
			o.quiet = 1, used = 0;
		else if (!v)
			usage();
		else if (!strcmp(a, "--port"))
			o.port = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--addr"))
			o.addr = v;
		else if (!strcmp(a, "--conns"))
			o.conns = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--concurrency"))
			o.concurrency = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--bytes"))
			o.bytes = net_parse_num(a, v);
		else if (!strcmp(a, "--seed"))
			o.seed = net_parse_num(a, v);
		else if (!strcmp(a, "--min-io"))
			o.min_io = (size_t)net_parse_num(a, v);
		else if (!strcmp(a, "--max-io"))
			o.max_io = (size_t)net_parse_num(a, v);
		else if (!strcmp(a, "--dump-dir"))
			o.dump_dir = v;
		else if (!strcmp(a, "--timeout"))
			o.timeout = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--settle"))
			o.settle_ms = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--pause-at") && o.n_pause < 8)
			o.pause_at[o.n_pause++] = (long)net_parse_num(a, v);
		else if (!strcmp(a, "--mode")) {
			if (!strcmp(v, "echo"))
				o.mode = M_ECHO;
			else if (!strcmp(v, "sink"))
				o.mode = M_SINK;
			else if (!strcmp(v, "source"))
				o.mode = M_SOURCE;
			else if (!strcmp(v, "duplex"))
				o.mode = M_DUPLEX;
			else if (!strcmp(v, "none"))
				o.mode = M_NONE;
			else
				usage();
		} else if (!strcmp(a, "--io")) {
			if (!strcmp(v, "block"))
				o.io = IO_BLOCK;
			else if (!strcmp(v, "nonblock"))
				o.io = IO_NONBLOCK;
			else if (!strcmp(v, "mix"))
				o.io = IO_MIX;
			else
				usage();
		} else
			usage();
		i += used;
	}
	if (o.port == 0 || o.conns < 1 || o.concurrency < 1 || o.min_io < 1 ||
	    o.max_io < o.min_io || o.max_io > (1u << 24))
		usage();
	if (o.n_pause > 0)
		o.concurrency = 1;
}

__attribute__((format(printf, 2, 3))) static void conn_fail(long k, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	printf("ERR conn=%ld: %s\n", k, msg);
	atomic_fetch_add(&n_failed, 1);
}

static int conn_nonblock(long k) { return o.io == IO_NONBLOCK || (o.io == IO_MIX && (k & 1)); }

/*
 * Non-blocking connect the way event-driven programs do it: EINPROGRESS, wait for
 * writability, then SO_ERROR says how it ended.  Returns 0 or a positive errno.
 */
static int finish_nb_connect(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);
	int ev = net_poll1(fd, POLLOUT);

	if (ev < 0)
		return -ev;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return errno;
	if (err == 0 && !(ev & POLLOUT))
		return EPROTO;
	return err;
}

/* Returns a connected socket, or -errno (the failure already reported for conn K). */
static int open_conn(long k, const struct net_addr *a, int report)
{
	int fd =
	    socket(a->family, SOCK_STREAM | SOCK_CLOEXEC | (o.nb_connect ? SOCK_NONBLOCK : 0), 0);
	int err = 0;

	if (fd < 0) {
		err = errno;
		if (report)
			conn_fail(k, "socket: %s", strerror(err));
		return -err;
	}
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0) {
		if (o.nb_connect)
			atomic_fetch_add(&n_immediate, 1);
	} else if (o.nb_connect && errno == EINPROGRESS) {
		atomic_fetch_add(&n_einprogress, 1);
		err = finish_nb_connect(fd);
	} else {
		err = errno;
	}
	if (err == 0)
		err = -net_set_nonblock(fd, conn_nonblock(k));
	if (err != 0) {
		if (report)
			conn_fail(k, "connect: %s", strerror(err));
		close(fd);
		return -err;
	}
	return fd;
}

static void dump_stream(long k, uint64_t key, uint64_t len)
{
	char path[4096];
	unsigned char buf[65536];
	FILE *f;

	snprintf(path, sizeof(path), "%s/tx-%ld.bin", o.dump_dir, k);
	f = fopen(path, "wb");
	if (!f)
		net_die("%s: %s", path, strerror(errno));
	for (uint64_t off = 0; off < len; off += sizeof(buf)) {
		size_t n = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);

		net_stream_fill(key, off, buf, n);
		fwrite(buf, 1, n, f);
	}
	if (fclose(f) != 0)
		net_die("%s: write failed", path);
}

/* Reads the sink's "SINK <count> <hash>" reply up to EOF and compares it. */
static int check_sink_reply(long k, int fd, int nonblock, uint64_t key)
{
	char reply[128];
	size_t got = 0;
	unsigned long long count, hash;

	for (;;) {
		ssize_t n = net_read_some(fd, reply + got, sizeof(reply) - 1 - got, nonblock, 0);

		if (n < 0) {
			conn_fail(k, "sink reply: %s", strerror((int)-n));
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got == sizeof(reply) - 1) {
			conn_fail(k, "sink reply too long");
			return -1;
		}
	}
	reply[got] = '\0';
	if (sscanf(reply, "SINK %llu %llx\n", &count, &hash) != 2) {
		conn_fail(k, "bad sink reply '%s'", reply);
		return -1;
	}
	if (count != o.bytes || hash != net_stream_hash(key, o.bytes)) {
		conn_fail(k, "sink saw %llu bytes hash %016llx, sent %" PRIu64 " hash %016" PRIx64,
			  count, hash, o.bytes, net_stream_hash(key, o.bytes));
		return -1;
	}
	return 0;
}

/* The half-close both directions agree on: we send FIN, the peer must answer with EOF and
 * not one more byte. */
static int finish_conn(long k, int fd)
{
	unsigned char extra[256];
	ssize_t n;

	if (shutdown(fd, SHUT_WR) < 0) {
		conn_fail(k, "shutdown: %s", strerror(errno));
		return -1;
	}
	n = net_read_some(fd, extra, sizeof(extra), conn_nonblock(k), 0);
	if (n > 0)
		conn_fail(k, "%zd unexpected bytes where EOF was due", n);
	else if (n < 0)
		conn_fail(k, "waiting for EOF: %s", strerror((int)-n));
	return n == 0 ? 0 : -1;
}

static void setup_xfer(struct net_xfer *x, long k, int fd, unsigned char *bufs)
{
	net_xfer_init(x, fd, net_key(o.seed, (uint64_t)k, 'i'));
	x->nonblock = conn_nonblock(k);
	x->min_io = o.min_io;
	x->max_io = o.max_io;
	x->tx_buf = bufs;
	x->rx_buf = bufs + o.max_io;
}

/* Runs mode's exchange on connected FD.  With FINISH, also the closing handshake. */
static int exchange(long k, int fd, int finish, unsigned char *bufs)
{
	struct net_xfer x;
	uint64_t key = net_key(o.seed, (uint64_t)k, 'c');
	int rc;

	setup_xfer(&x, k, fd, bufs);
	switch (o.mode) {
	case M_NONE:
		return 0;
	case M_ECHO:
		x.tx_key = x.rx_key = key;
		x.tx_len = x.rx_len = o.bytes;
		break;
	case M_SINK:
		x.tx_key = key;
		x.tx_len = o.bytes;
		x.shut_wr = 1;
		x.rx_fin = 1;
		break;
	case M_SOURCE:
		x.rx_key = o.seed;
		x.rx_len = o.bytes;
		x.expect_eof = finish;
		x.tx_fin = 1;
		break;
	case M_DUPLEX: {
		struct net_duplex h = {
		    .magic = NET_DUPLEX_MAGIC,
		    .key_c2s = key,
		    .key_s2c = net_key(o.seed, (uint64_t)k, 's'),
		    .len_c2s = o.bytes,
		    .len_s2c = o.bytes,
		    .io = o.io == IO_MIX ? 1 + ((uint64_t)k >> 1 & 1) : 0,
		    .max_io = o.max_io,
		};
		unsigned char hdr[NET_DUPLEX_LEN];

		net_duplex_encode(&h, hdr);
		rc = net_write_all(fd, hdr, sizeof(hdr), x.nonblock, 0);
		if (rc < 0) {
			conn_fail(k, "sending header: %s", strerror(-rc));
			return -1;
		}
		x.tx_key = h.key_c2s;
		x.rx_key = h.key_s2c;
		x.tx_len = x.rx_len = o.bytes;
		x.shut_wr = x.expect_eof = finish;
		break;
	}
	}
	rc = net_xfer_run(&x);
	atomic_fetch_add(&total_tx, x.tx_done);
	atomic_fetch_add(&total_rx, x.rx_done);
	if (rc < 0) {
		conn_fail(k, "%s (sent %" PRIu64 ", verified %" PRIu64 ")", net_xfer_error(&x),
			  x.tx_done, x.rx_done);
		return -1;
	}
	if (o.mode == M_SINK)
		rc = check_sink_reply(k, fd, x.nonblock, key);
	else if (o.mode == M_ECHO && finish)
		rc = finish_conn(k, fd);
	if (rc == 0 && o.dump_dir)
		dump_stream(k, x.tx_key, x.tx_len);
	return rc;
}

static void maybe_pause(long done)
{
	char line[64];
	int hit = 0;

	for (int i = 0; i < o.n_pause; i++)
		hit |= o.pause_at[i] == done;
	if (!hit)
		return;
	printf("PAUSE done=%ld\n", done);
	if (!fgets(line, sizeof(line), stdin))
		net_die("stdin closed while paused");
}

struct worker {
	const struct net_addr *a;
	unsigned char *bufs;
};

static void *run_sequential(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		long k = atomic_fetch_add(&next_conn, 1);
		int fd;

		if (k >= o.conns)
			break;
		fd = open_conn(k, w->a, 1);
		if (fd >= 0) {
			exchange(k, fd, 1, w->bufs);
			close(fd);
		}
		maybe_pause(k + 1);
	}
	return NULL;
}

static void *run_held(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		long k = atomic_fetch_add(&next_conn, 1);

		if (k >= o.conns)
			break;
		if (held_fds[k] >= 0 && exchange(k, held_fds[k], 0, w->bufs) < 0) {
			close(held_fds[k]);
			held_fds[k] = -1;
		}
	}
	return NULL;
}

static void run_workers(void *(*fn)(void *), const struct net_addr *a)
{
	long n = o.concurrency < o.conns ? o.concurrency : o.conns;
	pthread_t *tids = calloc((size_t)n, sizeof(*tids));
	struct worker *ws = calloc((size_t)n, sizeof(*ws));

	if (!tids || !ws)
		net_die("out of memory");
	atomic_store(&next_conn, 0);
	for (long i = 0; i < n; i++) {
		ws[i].a = a;
		ws[i].bufs = malloc(2 * o.max_io);
		if (!ws[i].bufs)
			net_die("out of memory");
	}
	if (n == 1) {
		fn(&ws[0]);
	} else {
		for (long i = 0; i < n; i++)
			if (net_thread_start(&tids[i], fn, &ws[i], 0) < 0)
				net_die("pthread_create failed");
		for (long i = 0; i < n; i++)
			pthread_join(tids[i], NULL);
	}
	for (long i = 0; i < n; i++)
		free(ws[i].bufs);
	free(ws);
	free(tids);
}

static void hold_all(const struct net_addr *a)
{
	char line[64];

	held_fds = malloc(sizeof(*held_fds) * (size_t)o.conns);
	if (!held_fds)
		net_die("out of memory");
	for (long k = 0; k < o.conns; k++)
		held_fds[k] = open_conn(k, a, 1);
	if (o.settle_ms > 0) {
		/* A program that waits in poll() a while, asking for nothing, before it talks. */
		struct pollfd *p = calloc((size_t)o.conns, sizeof(*p));
		if (!p)
			net_die("out of memory");
		for (long k = 0; k < o.conns; k++)
			p[k].fd = held_fds[k];
		poll(p, (nfds_t)o.conns, (int)o.settle_ms);
		free(p);
	}
	run_workers(run_held, a);
	printf("HELD conns=%ld\n", o.conns);
	if (o.pause_held && !fgets(line, sizeof(line), stdin))
		net_die("stdin closed while paused");
	for (long k = 0; k < o.conns; k++) {
		if (held_fds[k] < 0)
			continue;
		if (o.mode != M_SINK && o.mode != M_NONE)
			finish_conn(k, held_fds[k]);
		close(held_fds[k]);
	}
	free(held_fds);
}

static int expect_refused(const struct net_addr *a)
{
	int fd = open_conn(0, a, 0);

	if (fd >= 0) {
		printf("FAIL connect succeeded, expected ECONNREFUSED\n");
		close(fd);
		return 1;
	}
	printf("%s connect: %s einprogress=%ld\n", fd == -ECONNREFUSED ? "OK" : "FAIL",
	       strerror(-fd), atomic_load(&n_einprogress));
	return fd == -ECONNREFUSED ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct net_addr a;
	double t0;

	parse(argc, argv);
	net_common_setup(o.timeout);
	net_raise_nofile((rlim_t)(o.hold ? o.conns : o.concurrency) + 64);
	net_addr_parse(o.addr, o.port, &a);
	if (o.dump_dir)
		mkdir(o.dump_dir, 0755);
	if (o.expect_refused)
		return expect_refused(&a);

	t0 = net_now_ms();
	if (o.hold)
		hold_all(&a);
	else
		run_workers(run_sequential, &a);
	printf("%s conns=%ld failed=%ld tx=%llu rx=%llu einprogress=%ld immediate=%ld ms=%.1f\n",
	       atomic_load(&n_failed) ? "FAIL" : "OK", o.conns, atomic_load(&n_failed),
	       atomic_load(&total_tx), atomic_load(&total_rx), atomic_load(&n_einprogress),
	       atomic_load(&n_immediate), net_now_ms() - t0);
	return atomic_load(&n_failed) ? 1 : 0;
}
