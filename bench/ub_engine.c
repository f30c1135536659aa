/*
 * ulsock-bench: a poll-driven set of non-blocking connections.
 *
 * The server serves every session through it (one process per session, as in seed
 * 001's hot-spot and fan tests, where one server process handles all clients), and the
 * bibw client uses it to send and receive at once. Each connection has roles:
 *   ECHO    write back every byte read (ping-pong peers),
 *   SINK    count and drop what arrives, sending one ack byte per window of messages,
 *   SOURCE  send messages of c->msg bytes until the source deadline,
 * and ends with the trailer protocol of ub.h: a server writes its trailer once the
 * client's end of file has arrived and its own data is out, then the caller closes; a
 * client writes its trailer when its source is done, shuts down its direction and
 * reads until the server's end of file.
 */
#include "ub.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SCRATCH (1 << 18)

struct engine {
	unsigned char *src;		/* message contents, largest msg bytes */
	unsigned char *scratch;		/* where sinks read into */
	double src_deadline;
	double t0;
	int spin;
};

static int is_client(const struct ub_engine_conn *c)
{
	return (c->roles & UB_R_CLIENT) != 0;
}

static int source_active(const struct ub_engine_conn *c)
{
	return (c->roles & UB_R_SOURCE) && !c->source_done;
}

static int trailer_ready(const struct ub_engine_conn *c)
{
	if (c->out.magic)
		return 1;
	if (source_active(c) || c->echo_len || c->acks_owed)
		return 0;
	return is_client(c) || c->rx_eof;
}

static short wanted_events(const struct ub_engine_conn *c)
{
	short ev = 0;

	if (!c->rx_eof && !c->echo_len)
		ev |= POLLIN;
	if (c->echo_len || c->acks_owed || source_active(c) ||
	    (trailer_ready(c) && c->out_off < UB_TAIL))
		ev |= POLLOUT;
	return ev;
}

/* Reads what is there; returns bytes read, 0 when nothing moved, or -errno. */
static int on_readable(struct engine *e, struct ub_engine_conn *c)
{
	unsigned char *dst = c->echo_buf ? c->echo_buf : e->scratch;
	size_t cap = c->echo_buf ? (c->msg < SCRATCH ? c->msg : SCRATCH) : SCRATCH;
	ssize_t r = recv(c->fd, dst, cap, 0);

	if (r < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (r == 0) {
		c->rx_eof = 1;
		return 0;
	}
	if (!c->raw_received)
		c->t_first_rx = ub_now();
	if ((c->roles & UB_R_SINK) && c->window) {
		uint64_t per_ack = c->window * c->msg;

		c->acks_owed += (c->raw_received + (uint64_t)r) / per_ack -
				c->raw_received / per_ack;
	}
	c->raw_received += (uint64_t)r;
	ub_tail_push(c->tail, &c->tail_len, dst, (size_t)r);
	if (c->echo_buf) {
		c->echo_off = 0;
		c->echo_len = (size_t)r;
	}
	return (int)r;
}

static int send_some(struct ub_engine_conn *c, const void *p, size_t n)
{
	ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (w < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	return (int)w;
}

/* Writes the next thing owed: echo, acks, source data, then the trailer. */
static int on_writable(struct engine *e, struct ub_engine_conn *c)
{
	static const unsigned char acks[64];
	int w;

	if (c->echo_len) {
		w = send_some(c, c->echo_buf + c->echo_off, c->echo_len);
		if (w > 0) {
			c->echo_off += (size_t)w;
			c->echo_len -= (size_t)w;
			c->sent += (uint64_t)w;
		}
		return w;
	}
	if (c->acks_owed) {
		w = send_some(c, acks, c->acks_owed < 64 ? c->acks_owed : 64);
		if (w > 0) {
			c->acks_owed -= (uint64_t)w;
			c->sent += (uint64_t)w;
		}
		return w;
	}
	if (source_active(c)) {
		/* Stop only between messages, so every message sent is whole. */
		if (!c->msg_off && ub_now() >= e->src_deadline) {
			c->source_done = 1;
			return 0;
		}
		w = send_some(c, e->src + c->msg_off, c->msg - c->msg_off);
		if (w > 0) {
			c->msg_off = (c->msg_off + (size_t)w) % c->msg;
			c->sent += (uint64_t)w;
		}
		return w;
	}
	return 0;
}

static int write_trailer(struct engine *e, struct ub_engine_conn *c)
{
	int w;

	if (!c->out.magic) {
		uint64_t got = c->raw_received;

		if ((c->roles & UB_R_PEER_TRAILER) && got >= UB_TAIL)
			got -= UB_TAIL;
		ub_trailer_fill(&c->out, c->sent, got, e->t0);
	}
	w = send_some(c, (unsigned char *)&c->out + c->out_off, UB_TAIL - c->out_off);
	if (w > 0)
		c->out_off += (size_t)w;
	if (c->out_off == UB_TAIL && is_client(c) && shutdown(c->fd, SHUT_WR) < 0)
		return -errno;
	return w;
}

/* Advances one connection after poll; returns progress (> 0), 0, or -errno. */
static int step(struct engine *e, struct ub_engine_conn *c, short revents)
{
	int moved = 0, r;

	if ((revents & (POLLIN | POLLHUP | POLLERR)) && !c->rx_eof && !c->echo_len) {
		r = on_readable(e, c);
		if (r < 0)
			return r;
		moved += r + c->rx_eof;
	}
	if (revents & (POLLOUT | POLLERR)) {
		r = on_writable(e, c);
		if (r < 0)
			return r;
		moved += r;
	}
	if (trailer_ready(c) && c->out_off < UB_TAIL) {
		r = write_trailer(e, c);
		if (r < 0)
			return r;
		moved += r;
	}
	if (c->out_off == UB_TAIL && (!is_client(c) || c->rx_eof) && !c->finished) {
		c->finished = 1;
		c->t_end = ub_now();
		moved++;
	}
	return moved;
}

static int engine_init(struct engine *e, struct ub_engine_conn *c, int n)
{
	uint64_t max = 1;

	for (int i = 0; i < n; i++) {
		if (c[i].msg > max)
			max = c[i].msg;
		if ((c[i].roles & UB_R_ECHO) && !c[i].echo_buf) {
			c[i].echo_buf = malloc(c[i].msg < SCRATCH ? c[i].msg : SCRATCH);
			if (!c[i].echo_buf)
				return -ENOMEM;
		}
	}
	e->src = malloc(max);
	e->scratch = malloc(SCRATCH);
	if (!e->src || !e->scratch)
		return -ENOMEM;
	memset(e->src, 'u', max);
	return 0;
}

static void engine_fini(struct engine *e, struct ub_engine_conn *c, int n)
{
	for (int i = 0; i < n; i++) {
		free(c[i].echo_buf);
		c[i].echo_buf = NULL;
	}
	free(e->src);
	free(e->scratch);
}

/*
 * Runs every connection to its end. Fails with -ETIMEDOUT when nothing moves for
 * io_timeout seconds, so a dead peer cannot hold it. This is the program's one loop
 * over many connections, which is why it keeps the poll array and the steps together.
 */
int ub_engine_run(struct ub_engine_conn *c, int n, double src_deadline, int spin,
		  double io_timeout, double t0)
{
	struct engine e = {.src_deadline = src_deadline, .t0 = t0, .spin = spin};
	struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
	double last_move = ub_now();
	int left = n, rc;

	rc = pfd ? engine_init(&e, c, n) : -ENOMEM;
	while (!rc && left > 0) {
		int k = 0, r;

		for (int i = 0; i < n; i++) {
			pfd[i].fd = c[i].finished ? -1 : c[i].fd;
			pfd[i].events = c[i].finished ? 0 : wanted_events(&c[i]);
			pfd[i].revents = 0;
		}
		r = poll(pfd, (nfds_t)n, spin ? 0 : 50);
		if (r < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		for (int i = 0; i < n && r >= 0; i++) {
			if (c[i].finished)
				continue;
			int m = step(&e, &c[i], pfd[i].revents);

			if (m < 0) {
				rc = m;
				break;
			}
			k += m;
			left -= c[i].finished;
		}
		if (k)
			last_move = ub_now();
		else if (ub_now() - last_move > io_timeout)
			rc = -ETIMEDOUT;
	}
	engine_fini(&e, c, n);
	free(pfd);
	return rc;
}
