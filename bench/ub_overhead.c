/*
 * ulsock-bench: what calls that no sockets layer should accelerate cost (seed 002
 * section 5.4). An interposer sits in front of read, write, sendto, socket and close
 * for every descriptor; the driver runs this test with and without the preload, and
 * the difference per call is what interposition adds to the rest of a program.
 */
#include "ub.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH 1000
#define MAX_BATCHES 4096
#define CALL_SIZE 64

struct fixture {
	int file, pipe_r, pipe_w, udp;
	struct sockaddr_in udp_to;
};

enum op { OP_FILE_WRITE, OP_FILE_READ, OP_PIPE, OP_UDP_SEND, OP_SOCKET, NOPS };

static const char *const op_names[NOPS] = {
	[OP_FILE_WRITE] = "file-write", [OP_FILE_READ] = "file-read",
	[OP_PIPE] = "pipe-write-read",	[OP_UDP_SEND] = "udp-send",
	[OP_SOCKET] = "tcp-socket-close",
};

/* One call of op; returns 0 or -errno. */
static int call(const struct fixture *f, enum op op, char *buf)
{
	int fd;

	switch (op) {
	case OP_FILE_WRITE:
		return pwrite(f->file, buf, CALL_SIZE, 0) == CALL_SIZE ? 0 : -EIO;
	case OP_FILE_READ:
		return pread(f->file, buf, CALL_SIZE, 0) == CALL_SIZE ? 0 : -EIO;
	case OP_PIPE:
		if (write(f->pipe_w, buf, CALL_SIZE) != CALL_SIZE)
			return -EIO;
		return read(f->pipe_r, buf, CALL_SIZE) == CALL_SIZE ? 0 : -EIO;
	case OP_UDP_SEND:
		/* The receiver never reads: once its buffer is full the kernel drops. */
		return sendto(f->udp, buf, CALL_SIZE, 0, (const struct sockaddr *)&f->udp_to,
			      sizeof(f->udp_to)) == CALL_SIZE ? 0 : -errno;
	default:
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		close(fd);
		return 0;
	}
}

static void fixture_fini(struct fixture *f)
{
	int fds[] = {f->file, f->pipe_r, f->pipe_w, f->udp};

	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static int fixture_init(struct fixture *f, int *udp_rx)
{
	char path[] = "/tmp/ulsock-bench-XXXXXX";
	int p[2];
	socklen_t len = sizeof(f->udp_to);

	*f = (struct fixture){.file = -1, .pipe_r = -1, .pipe_w = -1, .udp = -1};
	f->file = mkstemp(path);
	if (f->file < 0)
		return -errno;
	unlink(path);
	if (pipe(p) < 0)
		return -errno;
	f->pipe_r = p[0];
	f->pipe_w = p[1];
	f->udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	*udp_rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (f->udp < 0 || *udp_rx < 0)
		return -errno;
	f->udp_to.sin_family = AF_INET;
	f->udp_to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(*udp_rx, (struct sockaddr *)&f->udp_to, sizeof(f->udp_to)) < 0 ||
	    getsockname(*udp_rx, (struct sockaddr *)&f->udp_to, &len) < 0)
		return -errno;
	return 0;
}

/* Times batches of one op for o->seconds; the row's figure is the median batch. */
static int measure(const struct ub_opts *o, const struct fixture *f, enum op op,
		   double *batches, struct ub_row *row)
{
	char buf[CALL_SIZE];
	double cpu0, t0, med, p99, p999;
	size_t nb = 0;
	int r = 0;

	memset(buf, 'o', sizeof(buf));
	r = call(f, op, buf);
	if (r < 0)
		return r;
	ub_row_init(row, "overhead");
	row->param = op_names[op];
	row->size = CALL_SIZE;
	row->clients = 1;
	cpu0 = ub_cpu_self();
	t0 = ub_now();
	while (nb < MAX_BATCHES && (nb < 5 || ub_now() - t0 < o->seconds)) {
		double b0 = ub_now();

		for (int i = 0; i < BATCH && !r; i++)
			r = call(f, op, buf);
		if (r < 0)
			return r;
		batches[nb++] = (ub_now() - b0) / BATCH * 1e9;
	}
	row->elapsed_s = ub_now() - t0;
	row->cpu_client_s = ub_cpu_self() - cpu0;
	row->count = nb * BATCH;
	ub_sort_percentiles(batches, nb, &med, &p99, &p999);
	row->ns_call = med;
	row->verified = 1;
	return 0;
}

int ub_overhead(const struct ub_opts *o, struct ub_row *rows, int max)
{
	static double batches[MAX_BATCHES];
	struct fixture f;
	int udp_rx = -1, n = 0, r;

	r = fixture_init(&f, &udp_rx);
	for (int op = 0; op < NOPS && n < max && !r; op++) {
		r = measure(o, &f, (enum op)op, batches, &rows[n]);
		if (r < 0)
			ub_warn("overhead %s: %s", op_names[op], strerror(-r));
		else
			n++;
	}
	if (r < 0 && !n)
		ub_warn("overhead: %s", strerror(-r));
	fixture_fini(&f);
	if (udp_rx >= 0)
		close(udp_rx);
	return r < 0 ? -1 : n;
}
