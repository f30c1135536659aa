/*
 * ulsock-bench: the seeds' micro-benchmark suite over the standard sockets API.
 *
 * It never links against ulsock, so it measures whatever it runs on: kernel TCP when
 * run plain, ulsock under `ulsock run`, Unix domain sockets with --unix. Tests:
 *   latency      ping-pong, half round trip (median, p99, p99.9), blocking and spinning
 *   bw, bibw     one direction / both at once, a window of messages per ack
 *   multistream  N independent connection pairs, aggregate bandwidth
 *   hotspot      N clients ping-ponging with one server process
 *   fanin/fanout one server process receiving from / sending to N clients
 *   connect      connections set up and torn down per second
 *   ganglia      connect, fetch 2 to 10 KB, close (seed 001's Ganglia pattern)
 *   overhead     per-call cost of file, pipe and UDP calls (no peer)
 * Every row also reports the CPU seconds of both sides and MB per CPU-second. Every
 * blocking call has a timeout and every process a watchdog, so a dead peer ends a run
 * with an error instead of a hang.
 */
#include "ub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROWS 256

static const uint64_t full_sizes[] = {1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144,
				      1048576};
static const uint64_t quick_sizes[] = {1, 64, 16384, 1048576};
static const int full_clients[] = {1, 2, 4, 8, 16};
static const int quick_clients[] = {1, 2, 4};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ulsock-bench [TEST...] [OPTIONS]\n"
		"tests: latency bw bibw multistream hotspot fanin fanout connect ganglia overhead\n"
		"       all (the default)\n"
		"roles: (default) fork a server on loopback and run the client against it\n"
		"  --server ADDR:PORT    serve until killed (PORT 0: the kernel picks, printed)\n"
		"  --client HOST:PORT    run the tests against a --server elsewhere\n"
		"  --inline              the server runs each session itself, one after another,\n"
		"                        instead of in a forked child (a transport that keeps a\n"
		"                        connection with the process that set it up keeps it)\n"
		"  --unix PATH           Unix domain stream sockets at PATH instead of TCP\n"
		"options:\n"
		"  --quick               short rows, fewer sizes and client counts (smoke runs)\n"
		"  --sizes LIST          message sizes, e.g. 1,64,4K,1M (latency, bw, bibw)\n"
		"  --clients LIST        client counts, e.g. 1,2,4,8 (multistream..fanout)\n"
		"  --stream-size N       message size of multistream, fanin, fanout (64K)\n"
		"  --hot-size N          message size of hotspot (64)\n"
		"  --time SEC            length of each row (1, quick 0.1)\n"
		"  --mode block|spin|both  latency receive mode (both)\n"
		"  --window N            bw: messages per ack, 0 for none (64)\n"
		"  --iters N             latency samples kept per row (1000000)\n"
		"  --fetch MIN-MAX       ganglia: bytes fetched per connection (2048-10240)\n"
		"  --timeout SEC         limit of every blocking call (10)\n"
		"  --label NAME          substrate name written into the JSON (kernel)\n"
		"  --json FILE           write every row as JSON to FILE\n"
		"  --json-lines          one JSON object per row on stdout, no table\n");
}

static void bad(const char *fmt, const char *arg)
{
	fprintf(stderr, "ulsock-bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, " (see --help)\n");
	exit(2);
}

/* A byte count with an optional K, M or G suffix; 0 on error. */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return 0;
	if (*end == 'K' || *end == 'k')
		v <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		v <<= 20, end++;
	else if (*end == 'G' || *end == 'g')
		v <<= 30, end++;
	return *end ? 0 : v;
}

static int parse_list(const char *arg, uint64_t *out, uint64_t max_value)
{
	char buf[512], *save, *tok;
	int n = 0;

	if (strlen(arg) >= sizeof(buf))
		bad("list too long: %s", arg);
	strcpy(buf, arg);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v = parse_size(tok);

		if (!v || v > max_value || n == UB_MAX_SIZES)
			bad("bad list entry '%s'", tok);
		out[n++] = v;
	}
	if (!n)
		bad("empty list '%s'", arg);
	return n;
}

static double parse_seconds(const char *arg)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || !(v > 0) || v > 3600)
		bad("bad number of seconds '%s'", arg);
	return v;
}

static unsigned parse_test(const char *name)
{
	if (!strcmp(name, "all"))
		return ~0u;
	for (int t = 1; t < UB_NTESTS; t++)
		if (!strcmp(name, ub_test_name(t)))
			return 1u << t;
	bad("unknown test '%s'", name);
	return 0;
}

static void apply_defaults(struct ub_opts *o, int have_sizes, int have_clients, int have_time)
{
	if (!have_sizes) {
		const uint64_t *s = o->quick ? quick_sizes : full_sizes;

		o->nsizes = o->quick ? 4 : 11;
		memcpy(o->sizes, s, o->nsizes * sizeof(*s));
	}
	if (!have_clients) {
		const int *c = o->quick ? quick_clients : full_clients;

		o->nclients = o->quick ? 3 : 5;
		memcpy(o->clients, c, o->nclients * sizeof(*c));
	}
	if (!have_time)
		o->seconds = o->quick ? 0.1 : 1.0;
	if (!o->tests)
		o->tests = ~0u;
	if (!o->server_only && !o->client_only && !o->unix_path)
		ub_parse_addr("127.0.0.1:0", o);
}

enum { O_SERVER = 256, O_CLIENT, O_UNIX, O_QUICK, O_SIZES, O_CLIENTS, O_STREAM, O_HOT,
       O_TIME, O_MODE, O_WINDOW, O_ITERS, O_FETCH, O_TIMEOUT, O_LABEL, O_JSON, O_LINES,
       O_INLINE };

static const struct option longopts[] = {
	{"server", 1, 0, O_SERVER},   {"client", 1, 0, O_CLIENT},   {"unix", 1, 0, O_UNIX},
	{"quick", 0, 0, O_QUICK},     {"sizes", 1, 0, O_SIZES},     {"clients", 1, 0, O_CLIENTS},
	{"stream-size", 1, 0, O_STREAM}, {"hot-size", 1, 0, O_HOT}, {"time", 1, 0, O_TIME},
	{"mode", 1, 0, O_MODE},	      {"window", 1, 0, O_WINDOW},   {"iters", 1, 0, O_ITERS},
	{"fetch", 1, 0, O_FETCH},     {"timeout", 1, 0, O_TIMEOUT}, {"label", 1, 0, O_LABEL},
	{"json", 1, 0, O_JSON},	      {"json-lines", 0, 0, O_LINES}, {"help", 0, 0, 'h'},
	{"inline", 0, 0, O_INLINE},
	{0, 0, 0, 0}};

static void parse_clients(struct ub_opts *o, const char *arg)
{
	uint64_t v[UB_MAX_SIZES];

	o->nclients = parse_list(arg, v, UB_MAX_CLIENTS);
	for (int i = 0; i < o->nclients; i++)
		o->clients[i] = (int)v[i];
}

static void parse_option(struct ub_opts *o, int c, const char *arg, int *have)
{
	uint64_t v;

	switch (c) {
	case O_SERVER:
	case O_CLIENT:
		*(c == O_SERVER ? &o->server_only : &o->client_only) = 1;
		if (ub_parse_addr(arg, o) < 0)
			bad("bad address '%s' (want HOST:PORT)", arg);
		break;
	case O_UNIX:
		o->unix_path = arg;
		break;
	case O_INLINE:
		o->inline_sessions = 1;
		break;
	case O_QUICK:
		o->quick = 1;
		break;
	case O_SIZES:
		o->nsizes = parse_list(arg, o->sizes, 64u << 20);
		have[0] = 1;
		break;
	case O_CLIENTS:
		parse_clients(o, arg);
		have[1] = 1;
		break;
	case O_STREAM:
	case O_HOT:
		v = parse_size(arg);
		if (!v || v > (64u << 20))
			bad("bad message size '%s'", arg);
		*(c == O_STREAM ? &o->mt_size : &o->hot_size) = v;
		break;
	case O_TIME:
		o->seconds = parse_seconds(arg);
		have[2] = 1;
		break;
	case O_MODE:
		o->modes = !strcmp(arg, "block") ? 1 : !strcmp(arg, "spin") ? 2
						   : !strcmp(arg, "both") ? 3 : 0;
		if (!o->modes)
			bad("bad mode '%s' (block, spin or both)", arg);
		break;
	case O_WINDOW:
		o->window = (unsigned)strtoul(arg, NULL, 10);
		break;
	case O_ITERS:
		o->max_iters = strtol(arg, NULL, 10);
		if (o->max_iters < 1 || o->max_iters > 100000000)
			bad("bad --iters '%s'", arg);
		break;
	case O_FETCH:
		if (sscanf(arg, "%d-%d", &o->fetch_min, &o->fetch_max) != 2 || o->fetch_min < 1 ||
		    o->fetch_max < o->fetch_min || o->fetch_max > (1 << 20))
			bad("bad --fetch '%s' (want MIN-MAX bytes)", arg);
		break;
	case O_TIMEOUT:
		o->timeout = parse_seconds(arg);
		break;
	case O_LABEL:
		o->label = arg;
		break;
	case O_JSON:
		o->json_file = arg;
		break;
	case O_LINES:
		o->json_lines = 1;
		break;
	case 'h':
		usage(stdout);
		exit(0);
	default:
		usage(stderr);
		exit(2);
	}
}

static void parse_options(int argc, char **argv, struct ub_opts *o)
{
	int have[3] = {0}, c;

	*o = (struct ub_opts){.mt_size = 64 << 10, .hot_size = 64, .timeout = 10,
			      .max_iters = 1000000, .window = 64, .modes = 3, .fetch_min = 2048,
			      .fetch_max = 10240, .label = "kernel"};
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
		parse_option(o, c, optarg, have);
	for (int i = optind; i < argc; i++)
		o->tests |= parse_test(argv[i]);
	if (o->server_only && o->client_only)
		bad("%s", "--server and --client exclude each other");
	if (o->inline_sessions && o->client_only)
		bad("%s", "--inline is the server's (with --server, or without a role)");
	if (o->unix_path && strlen(o->unix_path) >= 100)
		bad("unix socket path too long: %s", o->unix_path);
	apply_defaults(o, have[0], have[1], have[2]);
}

static int run_tests(struct ub_opts *o)
{
	static struct ub_row rows[MAX_ROWS];
	int failed = 0;

	ub_output_begin(o);
	for (int t = 1; t < UB_NTESTS; t++) {
		if (!(o->tests & (1u << t)))
			continue;
		int n;

		/* Each row is bounded by its call timeouts; this bounds the whole test. */
		ub_watchdog((o->nsizes * 2 + o->nclients + 1) * (o->seconds * 2 + o->timeout * 3 + 10));
		n = ub_run_test((enum ub_test)t, o, rows, MAX_ROWS);

		if (n < 0) {
			ub_warn("test %s failed", ub_test_name(t));
			failed = 1;
			continue;
		}
		ub_output_rows(o, rows, n);
	}
	ub_watchdog(0);
	if (ub_output_end(o) < 0)
		ub_die("cannot write %s", o->json_file);
	return failed;
}

static int listen_here(struct ub_opts *o)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int lfd = ub_listen(o, &ss, &len);

	if (lfd < 0)
		ub_die("listen on %s: %s", o->unix_path ? o->unix_path : o->addr_text,
		       strerror(-lfd));
	memcpy(&o->addr, &ss, len);
	o->addrlen = len;
	return lfd;
}

/* Tells whoever started the server where it listens (port 0 lets the kernel pick). */
static void print_listening(const struct ub_opts *o)
{
	int port = 0;

	if (o->unix_path) {
		printf("ulsock-bench: listening on %s\n", o->unix_path);
		return;
	}
	if (o->addr.ss_family == AF_INET)
		port = ntohs(((const struct sockaddr_in *)&o->addr)->sin_port);
	else if (o->addr.ss_family == AF_INET6)
		port = ntohs(((const struct sockaddr_in6 *)&o->addr)->sin6_port);
	printf("ulsock-bench: listening on port %d\n", port);
}

/* Forks the server on loopback (or o->unix_path) and runs the client against it. */
static int run_both(struct ub_opts *o)
{
	int lfd = listen_here(o), rc;
	pid_t server = fork();

	if (server < 0)
		ub_die("fork: %s", strerror(errno));
	if (server == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		o->json_file = NULL;
		ub_server_run(lfd, o);
		_exit(0);
	}
	close(lfd);
	rc = run_tests(o);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	if (o->unix_path)
		unlink(o->unix_path);
	return rc;
}

int main(int argc, char **argv)
{
	struct ub_opts o;

	parse_options(argc, argv, &o);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (o.server_only) {
		int lfd = listen_here(&o);

		print_listening(&o);
		return ub_server_run(lfd, &o);
	}
	if (o.client_only)
		return run_tests(&o);
	return run_both(&o);
}
