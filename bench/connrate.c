/*
 * uls-connrate: how many TCP connections per second one client can set up, use once
 * and tear down against one server.
 *
 * Each connection does what a short request does: the client connects and writes one
 * byte, the server accepts, reads it, answers one byte and closes, the client reads the
 * answer and closes. The byte makes sure the connection is fully usable (and, under
 * ulsock, that its path was decided) before it counts.
 *
 *   uls-connrate [-n COUNT] [-t SECONDS]              fork a server, run the client
 *   uls-connrate -s [-a ADDR] [-p PORT]               server only, until killed
 *   uls-connrate -c [-a ADDR] -p PORT [-n N] [-t S]   client only
 *
 * Two references, for what a substrate can reach (docs/PERFORMANCE.md):
 *   -e  empty connections: the client connects and closes, the server accepts and closes,
 *       no byte either way. On kernel TCP this is the floor of any layer that keeps a
 *       kernel TCP connection per connection, as ulsock does.
 *   -u  Unix domain stream sockets (abstract name "uls-connrate.PORT") instead of TCP;
 *       with -s, -c or neither, as for TCP (-a is ignored).
 *
 * The client stops after COUNT connections or SECONDS, whichever comes first, and
 * prints one line: "connrate: connections=N seconds=S conn_per_sec=R".
 * Plain C11 and POSIX; it never links against ulsock, so it measures any substrate.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct options {
	const char *addr;
	int port;
	long count;
	double seconds;
	int server_only;
	int client_only;
	int empty;    /* -e: no byte exchanged */
	int unix_dom; /* -u: AF_UNIX instead of TCP */
};

/* The address either way: TCP's, or the abstract Unix name (sun_path[0] is NUL). */
struct addr {
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_un un;
	} u;
	socklen_t len;
};

static void die(const char *what)
{
	fprintf(stderr, "uls-connrate: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void make_addr(const struct options *o, struct addr *a)
{
	memset(a, 0, sizeof(*a));
	if (o->unix_dom) {
		int n;

		a->u.un.sun_family = AF_UNIX;
		n = snprintf(a->u.un.sun_path + 1, sizeof(a->u.un.sun_path) - 1,
			     "uls-connrate.%d", o->port);
		a->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		return;
	}
	a->u.in.sin_family = AF_INET;
	a->u.in.sin_port = htons((unsigned short)o->port);
	a->len = sizeof(a->u.in);
	if (inet_pton(AF_INET, o->addr, &a->u.in.sin_addr) != 1) {
		fprintf(stderr, "uls-connrate: bad IPv4 address '%s'\n", o->addr);
		exit(2);
	}
}

/*
 * Returns a listening socket on o->addr:o->port and stores the bound port in o->port. A
 * Unix name needs a number of its own when none was given: the process id.
 */
static int listen_on(struct options *o)
{
	struct addr a;
	int one = 1;
	int fd;

	if (o->unix_dom && !o->port)
		o->port = (int)getpid();
	make_addr(o, &a);
	fd = socket(a.u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	if (!o->unix_dom && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		die("setsockopt(SO_REUSEADDR)");
	if (bind(fd, &a.u.sa, a.len) < 0)
		die("bind");
	if (listen(fd, 1024) < 0)
		die("listen");
	if (!o->unix_dom) {
		a.len = sizeof(a.u.in);
		if (getsockname(fd, &a.u.sa, &a.len) < 0)
			die("getsockname");
		o->port = ntohs(a.u.in.sin_port);
	}
	return fd;
}

/* Serves one connection: read the client's byte, answer it, close first (-e: only close). */
static void serve_one(int lfd, int empty)
{
	char b;
	ssize_t n;
	int fd;

	fd = accept(lfd, NULL, NULL);
	if (fd < 0) {
		if (errno == EINTR || errno == ECONNABORTED)
			return;
		die("accept");
	}
	if (empty) {
		close(fd);
		return;
	}
	do
		n = read(fd, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n == 1 && write(fd, &b, 1) != 1)
		fprintf(stderr, "uls-connrate: server write: %s\n", strerror(errno));
	close(fd);
}

static void serve_forever(int lfd, int empty)
{
	for (;;)
		serve_one(lfd, empty);
}

/* One full client connection; returns 0 on success, -1 after printing why not. */
static int client_once(const struct addr *a, int empty)
{
	char b = 'x';
	int one = 1;
	int fd;

	fd = socket(a->u.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	if (a->u.sa.sa_family == AF_INET)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, &a->u.sa, a->len) < 0) {
		fprintf(stderr, "uls-connrate: connect: %s\n", strerror(errno));
		goto err_close;
	}
	if (empty) {
		/* Wait for the server's close: a client that ran ahead would fill its backlog. */
		if (read(fd, &b, 1) != 0) {
			fprintf(stderr, "uls-connrate: no end from the server\n");
			goto err_close;
		}
		close(fd);
		return 0;
	}
	if (write(fd, &b, 1) != 1) {
		fprintf(stderr, "uls-connrate: write: %s\n", strerror(errno));
		goto err_close;
	}
	if (read(fd, &b, 1) != 1 || b != 'x') {
		fprintf(stderr, "uls-connrate: no answer from the server\n");
		goto err_close;
	}
	close(fd);
	return 0;

err_close:
	close(fd);
	return -1;
}

static int run_client(const struct options *o)
{
	struct addr a;
	double start, elapsed;
	long done = 0;

	make_addr(o, &a);
	start = now_sec();
	elapsed = 0;
	while (done < o->count && elapsed < o->seconds) {
		if (client_once(&a, o->empty) < 0)
			return 1;
		done++;
		/* Reading the clock every 64 connections keeps it out of the measurement. */
		if ((done & 63) == 0)
			elapsed = now_sec() - start;
	}
	elapsed = now_sec() - start;
	printf("connrate: connections=%ld seconds=%.3f conn_per_sec=%.0f\n", done, elapsed,
	       elapsed > 0 ? done / elapsed : 0.0);
	return 0;
}

/* Forks a server child on an ephemeral port, runs the client against it, reaps it. */
static int run_both(struct options *o)
{
	int lfd = listen_on(o);
	pid_t child;
	int rc;

	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0)
		serve_forever(lfd, o->empty);
	close(lfd);
	rc = run_client(o);
	kill(child, SIGTERM);
	waitpid(child, NULL, 0);
	return rc;
}

static void usage(void)
{
	fprintf(stderr, "usage: uls-connrate [-s|-c] [-e] [-u] [-a ADDR] [-p PORT] [-n COUNT] "
			"[-t SECONDS]\n");
	exit(2);
}

static void parse_options(int argc, char **argv, struct options *o)
{
	int c;

	*o = (struct options){.addr = "127.0.0.1", .count = 10000, .seconds = 1e9};
	while ((c = getopt(argc, argv, "sceua:p:n:t:h")) != -1) {
		switch (c) {
		case 's':
			o->server_only = 1;
			break;
		case 'c':
			o->client_only = 1;
			break;
		case 'e':
			o->empty = 1;
			break;
		case 'u':
			o->unix_dom = 1;
			break;
		case 'a':
			o->addr = optarg;
			break;
		case 'p':
			o->port = atoi(optarg);
			break;
		case 'n':
			o->count = atol(optarg);
			break;
		case 't':
			o->seconds = atof(optarg);
			break;
		default:
			usage();
		}
	}
	if (optind != argc || (o->server_only && o->client_only) || o->count <= 0 ||
	    o->seconds <= 0 || o->port < 0 || o->port > 65535 || (o->client_only && !o->port))
		usage();
}

int main(int argc, char **argv)
{
	struct options o;

	parse_options(argc, argv, &o);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (o.server_only) {
		int lfd = listen_on(&o);

		if (o.unix_dom)
			printf("connrate: listening on @uls-connrate.%d\n", o.port);
		else
			printf("connrate: listening on %s:%d\n", o.addr, o.port);
		serve_forever(lfd, o.empty);
	}
	if (o.client_only)
		return run_client(&o);
	return run_both(&o);
}
