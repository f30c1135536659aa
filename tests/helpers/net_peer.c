/*
 * net_peer - one end of a single connection for the peer-death tests.
 *
 *   net_peer --listen [--addr A] [--port P] --act ACT     (prints "READY port=P pid=PID")
 *   net_peer --connect --addr A --port P --act ACT
 *
 * Victims (the test kills them with SIGKILL):
 *   stall   send --prime bytes, print "STALLED", then never read or write again.
 *   flood   print "FLOODING" and send the stream as fast as the peer takes it.
 * Survivors (they must notice the death, never hang):
 *   recv    read and verify the stream; print "BLOCKING" once --prime bytes arrived and
 *           "PROGRESS rx=N" after each MiB.  Passes on EOF or ECONNRESET.
 *   send    print "SENDING", then send until an error, printing "SENT total=N" after every
 *           call.  Passes on EPIPE or ECONNRESET.
 * --sigbus-signal installs, with signal(), a SIGBUS handler that exits 3 (--sigbus-sigset:
 * with System V's sigset()): a segment file truncated under the process must still break
 * only the connection (the guard keeps the program's handler for other faults).
 * A survivor ends with "RESULT op=... outcome=... bytes=N last_call_ms=T": T is how long
 * its final, blocking call took to return.  Exit 0 pass, 1 fail, 2 setup error.
 */
#include "net_util.h"

#define PEER_KEY 7
#define CHUNK 65536

enum act { ACT_STALL, ACT_FLOOD, ACT_RECV, ACT_SEND };

static const char *addr = "127.0.0.1";
static unsigned port;
static int listening = -1;
static enum act act = ACT_RECV;
static uint64_t prime;
static unsigned timeout_s = 120;
static unsigned char buf[CHUNK];

static void sigbus_exit(int sig)
{
	(void)sig;
	_exit(3);
}

static void usage(void)
{
	fprintf(stderr, "usage: net_peer --listen|--connect [--addr A] [--port P]\n"
			"  --act stall|flood|recv|send [--prime N] [--timeout SEC] [--sigbus-signal|--sigbus-sigset]\n");
	exit(2);
}

static void parse(int argc, char **argv)
{
	static const char *const acts[] = {"stall", "flood", "recv", "send", NULL};

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--listen") || !strcmp(a, "--connect")) {
			listening = !strcmp(a, "--listen");
			continue;
		}
		if (!strcmp(a, "--sigbus-signal")) {
			if (signal(SIGBUS, sigbus_exit) == SIG_ERR)
				usage();
			continue;
		}
		if (!strcmp(a, "--sigbus-sigset")) {
			/* Deprecated, but programs still call it: the point of the option. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
			if (sigset(SIGBUS, sigbus_exit) == SIG_ERR)
				usage();
#pragma GCC diagnostic pop
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--addr"))
			addr = v;
		else if (!strcmp(a, "--port"))
			port = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--prime"))
			prime = net_parse_num(a, v);
		else if (!strcmp(a, "--timeout"))
			timeout_s = (unsigned)net_parse_num(a, v);
		else if (!strcmp(a, "--act")) {
			int k = 0;

			while (acts[k] && strcmp(acts[k], v))
				k++;
			if (!acts[k])
				usage();
			act = (enum act)k;
		} else
			usage();
	}
	if (listening < 0 || (!listening && port == 0))
		usage();
}

static int open_conn(void)
{
	struct net_addr a;
	int fd, one = 1;

	net_addr_parse(addr, port, &a);
	fd = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		net_die("socket: %s", strerror(errno));
	if (!listening) {
		if (connect(fd, (struct sockaddr *)&a.ss, a.len) < 0)
			net_die("connect: %s", strerror(errno));
		return fd;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 4) < 0)
		net_die("bind/listen: %s", strerror(errno));
	printf("READY port=%u pid=%d\n", net_sock_port(fd), (int)getpid());
	int c = accept(fd, NULL, NULL);
	if (c < 0)
		net_die("accept: %s", strerror(errno));
	close(fd);
	return c;
}

static const char *outcome_name(ssize_t rc, int err)
{
	if (rc == 0)
		return "eof";
	if (err == ECONNRESET)
		return "ECONNRESET";
	if (err == EPIPE)
		return "EPIPE";
	return strerror(err);
}

/* Victim: sends PRIME bytes and goes quiet until it is killed. */
static int do_stall(int fd)
{
	for (uint64_t off = 0; off < prime; off += CHUNK) {
		size_t n = prime - off < CHUNK ? (size_t)(prime - off) : CHUNK;

		net_stream_fill(PEER_KEY, off, buf, n);
		if (net_write_all(fd, buf, n, 0, 0) < 0)
			net_die("priming failed");
	}
	printf("STALLED\n");
	for (;;)
		pause();
}

static int do_flood(int fd)
{
	uint64_t off = 0;

	printf("FLOODING\n");
	for (;;) {
		ssize_t n;

		net_stream_fill(PEER_KEY, off, buf, CHUNK);
		n = send(fd, buf, CHUNK, MSG_NOSIGNAL);
		if (n <= 0) {
			printf("RESULT op=flood outcome=%s bytes=%" PRIu64 "\n",
			       outcome_name(n, errno), off);
			return 0;
		}
		off += (uint64_t)n;
	}
}

static int do_recv(int fd)
{
	uint64_t got = 0, next_progress = 1 << 20;
	int said_blocking = 0;

	for (;;) {
		double t0;
		ssize_t n;
		int err;
		unsigned char want;

		if (!said_blocking && got >= prime) {
			printf("BLOCKING\n");
			said_blocking = 1;
		}
		t0 = net_now_ms();
		n = recv(fd, buf, sizeof(buf), 0);
		err = errno;
		if (n < 0 && err == EINTR)
			continue;
		if (n <= 0) {
			int ok = n == 0 || err == ECONNRESET;

			printf("RESULT op=recv outcome=%s bytes=%" PRIu64 " last_call_ms=%.1f\n",
			       outcome_name(n, err), got, net_now_ms() - t0);
			return ok ? 0 : 1;
		}
		size_t bad = net_stream_check(PEER_KEY, got, buf, (size_t)n, &want);
		if (bad < (size_t)n) {
			printf("RESULT op=recv outcome=corrupt byte %" PRIu64 "\n", got + bad);
			return 1;
		}
		got += (uint64_t)n;
		if (got >= next_progress) {
			printf("PROGRESS rx=%" PRIu64 "\n", got);
			next_progress += 1 << 20;
		}
	}
}

static int do_send(int fd)
{
	uint64_t off = 0;

	printf("SENDING\n");
	for (;;) {
		double t0 = net_now_ms();
		ssize_t n;
		int err;

		net_stream_fill(PEER_KEY, off, buf, CHUNK);
		n = send(fd, buf, CHUNK, MSG_NOSIGNAL);
		err = errno;
		if (n < 0 && err == EINTR)
			continue;
		if (n <= 0) {
			int ok = n < 0 && (err == EPIPE || err == ECONNRESET);

			printf("RESULT op=send outcome=%s bytes=%" PRIu64 " last_call_ms=%.1f\n",
			       n == 0 ? "zero" : outcome_name(n, err), off, net_now_ms() - t0);
			return ok ? 0 : 1;
		}
		off += (uint64_t)n;
		printf("SENT total=%" PRIu64 "\n", off);
	}
}

int main(int argc, char **argv)
{
	int fd, rc;

	parse(argc, argv);
	net_common_setup(timeout_s);
	fd = open_conn();
	printf("CONNECTED\n");
	switch (act) {
	case ACT_STALL:
		return do_stall(fd);
	case ACT_FLOOD:
		rc = do_flood(fd);
		break;
	case ACT_SEND:
		rc = do_send(fd);
		break;
	default:
		rc = do_recv(fd);
		break;
	}
	/* Close explicitly, as a well-behaved program would, rather than leave it to exit. */
	if (close(fd) < 0) {
		printf("close: %s\n", strerror(errno));
		rc = 1;
	}
	return rc;
}
