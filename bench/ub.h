/*
 * ulsock-bench: shared declarations of the micro-benchmark suite (bench/ub_*.c).
 *
 * The program uses only the standard sockets API and never links against ulsock, so
 * it measures whatever substrate it runs on. See bench/ulsock_bench.c for the tests and
 * docs/PERFORMANCE.md for how the driver (tools/ubench.py) uses it.
 */
#ifndef ULS_BENCH_UB_H
#define ULS_BENCH_UB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define UB_MAX_SIZES 32
#define UB_MAX_CLIENTS 256
#define UB_TAIL 40 /* sizeof(struct ub_trailer) */

enum ub_test {
	UB_LATENCY = 1,
	UB_BW,
	UB_BIBW,
	UB_MULTISTREAM,
	UB_HOTSPOT,
	UB_FANIN,
	UB_FANOUT,
	UB_CONNECT,
	UB_GANGLIA,
	UB_OVERHEAD,
	UB_NTESTS
};

/* Options of one invocation; filled by main() and read everywhere else. */
struct ub_opts {
	unsigned tests;			/* bit (1 << enum ub_test) per selected test */
	uint64_t sizes[UB_MAX_SIZES];	/* message sizes, bytes */
	int nsizes;
	int clients[UB_MAX_SIZES];	/* client counts for the N-sweeps */
	int nclients;
	uint64_t mt_size;		/* message size of multistream, fanin, fanout */
	uint64_t hot_size;		/* message size of hotspot */
	double seconds;			/* length of each row */
	double timeout;			/* per blocking call, seconds */
	long max_iters;			/* latency samples kept per row */
	unsigned window;		/* bw: messages between acks, 0 = none */
	int modes;			/* latency: 1 = blocking, 2 = spin, 3 = both */
	int spin;			/* the mode of the row being run */
	int fetch_min, fetch_max;	/* Ganglia pattern: bytes fetched per connection */
	int quick;
	const char *label;		/* substrate name written into the JSON */
	const char *json_file;
	int json_lines;			/* JSON lines on stdout instead of the table */
	/* Where the server is: sockaddr of the client side, or the one to listen on. */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	char addr_text[128];
	const char *unix_path;
	int server_only;
	int client_only;
	int inline_sessions;		/* --inline: the server serves in its own process */
};

/*
 * The first bytes on every connection, client to server: which test the connection
 * belongs to. Host byte order: both ends run the same build. Connections of one session
 * (the N clients of hotspot, fan-in, fan-out) are served by one server process.
 */
struct ub_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t test;
	uint32_t session;
	uint32_t nconn;
	uint64_t msg_size;
	uint64_t duration_us;
	uint32_t window;
	uint32_t flags;
	uint64_t fetch;
	uint8_t pad[16];
};
_Static_assert(sizeof(struct ub_hello) == 64, "hello is 64 bytes on the wire");

#define UB_HELLO_MAGIC 0x31484255u /* "UBH1" */
#define UB_VERSION 1
#define UB_F_SPIN 1u  /* ping-pong: the server spins too */
#define UB_F_STATS 2u /* connect: answer with a trailer holding the server's CPU */

/*
 * The last bytes a side sends before it shuts its direction down: what it sent and
 * received (payload bytes, trailers excluded) and the CPU it used. The receiver finds
 * it as the final UB_TAIL bytes before end of file.
 */
struct ub_trailer {
	uint64_t magic;
	uint64_t sent;
	uint64_t received;
	uint64_t cpu_us;
	uint64_t wall_us;
};
_Static_assert(sizeof(struct ub_trailer) == UB_TAIL, "trailer size is UB_TAIL");

#define UB_TRAILER_MAGIC 0x3152544c52544255ull /* "UBTRLTR1" */

/* One row of results: one test at one size or client count. NaN means "not measured". */
struct ub_row {
	const char *test;
	const char *param;		/* op name of overhead rows */
	int spin;
	uint64_t size;
	int clients;
	uint64_t count;			/* ping-pongs, messages, connections or calls */
	double elapsed_s;
	double lat_med_us, lat_p99_us, lat_p999_us;
	double mb_s, msg_s, conn_s, ns_call;
	uint64_t sent, received;	/* client side, payload bytes */
	uint64_t srv_sent, srv_received;
	int verified;
	double cpu_client_s, cpu_server_s, mb_per_cpu_s;
};

/* ub_util.c: time, CPU, errors, the watchdog. */
double ub_now(void);
double ub_cpu_self(void);
/* What a trailer's CPU counts from: 0, or the start of a session served inline. */
extern double ub_cpu_base;
void ub_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void ub_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ub_watchdog(double seconds);
void ub_row_init(struct ub_row *r, const char *test);
void ub_row_cpu(struct ub_row *r, uint64_t bytes);
int ub_sort_percentiles(double *v, size_t n, double *med, double *p99, double *p999);

/* ub_net.c: sockets with timeouts (seconds per call). Return 0, byte counts or -errno. */
int ub_listen(const struct ub_opts *o, struct sockaddr_storage *bound, socklen_t *len);
int ub_connect(const struct ub_opts *o);
void ub_sock_setup(int fd, const struct ub_opts *o, int spin);
int ub_write_all(int fd, const void *buf, size_t n, int spin, double timeout);
int ub_read_all(int fd, void *buf, size_t n, int spin, double timeout);
int ub_read_some(int fd, void *buf, size_t n, int spin, double timeout);
void ub_tail_push(unsigned char *tail, size_t *tail_len, const void *buf, size_t n);
int ub_tail_trailer(const unsigned char *tail, size_t tail_len, struct ub_trailer *t);
void ub_trailer_fill(struct ub_trailer *t, uint64_t sent, uint64_t received, double t0);
int ub_parse_addr(const char *text, struct ub_opts *o);
int ub_drain_to_eof(int fd, int spin, double timeout, uint64_t *bytes,
		    unsigned char *tail, size_t *tail_len);

/* ub_server.c */
int ub_server_run(int lfd, const struct ub_opts *o);

/* ub_engine.c: poll-driven connections for the server and for bibw's client. */
enum { UB_R_ECHO = 1, UB_R_SINK = 2, UB_R_SOURCE = 4, UB_R_CLIENT = 8, UB_R_PEER_TRAILER = 16 };
struct ub_engine_conn {
	int fd;
	unsigned roles;
	uint64_t msg, window;
	uint64_t sent, received, raw_received;
	uint64_t acks_owed;
	size_t msg_off;			/* progress in the message being sent */
	unsigned char *echo_buf;	/* ECHO: bytes read, not yet written back */
	size_t echo_off, echo_len;
	unsigned char tail[UB_TAIL];
	size_t tail_len;
	struct ub_trailer out;		/* our trailer, once the data is done */
	size_t out_off;
	int rx_eof, source_done, finished;
	double t_first_rx, t_end;
};
int ub_engine_run(struct ub_engine_conn *c, int n, double src_deadline, int spin,
		  double io_timeout, double t0);

/* ub_client.c: the tests. Each fills rows[] and returns the row count or -1. */
int ub_run_test(enum ub_test t, struct ub_opts *o, struct ub_row *rows, int max);

/* ub_overhead.c */
int ub_overhead(const struct ub_opts *o, struct ub_row *rows, int max);

/* ub_output.c */
void ub_output_begin(const struct ub_opts *o);
void ub_output_rows(const struct ub_opts *o, const struct ub_row *rows, int n);
int ub_output_end(const struct ub_opts *o);
const char *ub_test_name(enum ub_test t);

#endif
