/* SPDX-License-Identifier: MIT */
/* The leader/follower wait queue of a connection (wait.h): uls_wait and its helpers. */
#include "wait.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <time.h>

#include "bell.h"
#include "conn.h"
#include "../os/cpu.h"
#include "../os/libc.h"

void uls_waitq_init(struct uls_waitq *q)
{
	pthread_condattr_t a;

	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&q->cv, &a);
	pthread_condattr_destroy(&a);
	q->leader = q->waiters = 0;
	q->gen = 0;
}

void uls_waitq_fini(struct uls_waitq *q)
{
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
}

void uls_waitq_kick(struct uls_waitq *q)
{
	pthread_mutex_lock(&q->mu);
	if (q->waiters) {
		q->gen++;
		pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
}

static int ms_until(uint64_t deadline, int max_ms)
{
	uint64_t now;
	int ms;

	if (!deadline)
		return max_ms;
	now = uls_now_ns();
	if (now >= deadline)
		return 0;
	ms = (int)((deadline - now + 999999) / 1000000);
	return max_ms >= 0 && max_ms < ms ? max_ms : ms;
}

static int lead(struct uls_conn *c, int fd, uint64_t deadline, int drain, int max_ms)
{
	/* The thread's bell (bell.h) joins the sleep when another thread may be rung for. */
	int bell = uls_bell_current;
	struct pollfd p[2] = {{.fd = uls_conn_fd(c, fd), .events = POLLIN | POLLRDHUP},
			      {.fd = uls_bell_fd(bell), .events = POLLIN}};
	int ms = ms_until(deadline, max_ms), r;

	if (deadline && ms == 0)
		return -EAGAIN;
	if (atomic_load(&c->closed))
		return -EBADF;
	if (drain && !deadline && max_ms < 0 && bell < 0) {
		/* One system call instead of poll and recv, where a plain recv is safe. */
		r = uls_conn_sleep_recv(c, fd);
		if (r != 0)
			return r < 0 ? r : 0;
	}
	if (ms != 0)
		uls_transports_idle();
	uls_signal_clear();
	r = uls_libc.poll(p, bell >= 0 ? 2 : 1, ms);
	if (r > 0 && bell >= 0 && p[1].revents) {
		uls_bell_clear(bell);
		r -= !p[0].revents;
	}
	/* The number was closed by another thread: the socket lives on for this call on the
	 * descriptor the close kept (conn.c); the next look uses it. */
	if (r > 0 && (p[0].revents & POLLNVAL))
		return atomic_load(&c->kept) ? 0 : -EBADF;
	if (r < 0)
		return errno == EINTR && (deadline || uls_signals_interrupt()) ? -EINTR : 0;
	if (r > 0 && drain && p[0].revents)
		uls_conn_drain(c, fd);
	if (r == 0 && deadline && uls_now_ns() >= deadline)
		return -EAGAIN;
	return 0;
}

static int follow(struct uls_waitq *q, uint64_t deadline, int max_ms)
{
	unsigned g = q->gen;
	struct timespec ts;
	uint64_t until = deadline;

	if (max_ms >= 0) {
		uint64_t cap = uls_now_ns() + (uint64_t)max_ms * 1000000u;
		if (!until || cap < until)
			until = cap;
	}
	while (q->gen == g && q->leader) {
		if (!until) {
			pthread_cond_wait(&q->cv, &q->mu);
			continue;
		}
		ts.tv_sec = (time_t)(until / 1000000000u);
		ts.tv_nsec = (long)(until % 1000000000u);
		if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
			return deadline && uls_now_ns() >= deadline ? -EAGAIN : 0;
	}
	return 0;
}

int uls_wait(struct uls_conn *c, int fd, uint64_t deadline, int drain, int max_ms)
{
	struct uls_waitq *q = &c->wq;
	int r;

	pthread_mutex_lock(&q->mu);
	if (atomic_load(&c->closed)) {
		pthread_mutex_unlock(&q->mu);
		return -EBADF;
	}
	q->waiters++;
	if (q->leader) {
		r = follow(q, deadline, max_ms);
		q->waiters--;
		pthread_mutex_unlock(&q->mu);
		return r;
	}
	q->leader = 1;
	pthread_mutex_unlock(&q->mu);
	r = lead(c, fd, deadline, drain, max_ms);
	pthread_mutex_lock(&q->mu);
	q->leader = 0;
	q->waiters--;
	q->gen++;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return r;
}
