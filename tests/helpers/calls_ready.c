/*
 * calls_ready: readiness as the kernel reports it beyond "bytes are queued": O_ASYNC signals
 * (F_SETOWN, F_SETOWN_EX to one thread, F_SETSIG with siginfo, ioctl FIOASYNC), SO_RCVLOWAT
 * in select/poll/epoll and in receives, SO_SNDLOWAT, what send, recv and poll find after the
 * peer closed (its FIN, then its RST), and epoll_wait over thousands of ready descriptors.
 * Usage: calls_ready CASE.
 *
 * The kernel is the oracle: every expectation here was checked against kernel TCP first.
 */
#include "calls_common.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/syscall.h>

#define SEED_ASYNC 71u

/* ---- O_ASYNC ----------------------------------------------------------------------------- */

/*
 * The stream the signal-driven receiver must get whole: async_msgs messages of uneven sizes,
 * some sent alone (a pause after them), some back to back, then the end of the stream. The
 * small variant sends many tiny messages, each alone.
 */
static int async_msgs = 64;
static int async_small;
/* The receiver reads exactly what FIONREAD reports, never to EAGAIN; the sender ends the
 * stream only after the receiver has it all (the FIN raises a signal of its own). */
static int async_exact;
/* Stream bytes the sender put before the receiver armed O_ASYNC (async_unread). */
static uint64_t async_pre;
/* A signal the kernel raises at once; waiting longer than this is a hang. */
#define ASYNC_WAIT_S 5

static size_t async_msg_len(int i)
{
	if (async_small)
		return 1 + (size_t)(i * 37) % 64;
	return 1 + (size_t)(i * 7919) % 30000;
}

static uint64_t async_total(void)
{
	uint64_t t = async_pre;

	for (int i = 0; i < async_msgs; i++)
		t += async_msg_len(i);
	return t;
}

/* The peer: waits until the receiver armed its signals, streams, then shuts down. */
static __attribute__((noreturn)) void async_sender(struct calls_pair *p)
{
	uint64_t off = async_pre;

	calls_await(p);
	for (int i = 0; i < async_msgs; i++) {
		size_t n = async_msg_len(i);
		calls_send_pat(p->fd, off, n, SEED_ASYNC);
		off += n;
		if (async_small || i % 4 == 3)
			calls_sleep_ms(async_small ? 1 : 3);
	}
	if (async_exact)
		calls_await(p);
	CHECK(shutdown(p->fd, SHUT_WR) == 0);
	calls_await(p);
	calls_pair_close(p);
	_exit(0);
}

struct async_rx {
	int fd;
	sigset_t set;	/* the signals that announce I/O, blocked in the receiving thread */
	int rtsig;	/* the F_SETSIG signal whose siginfo is checked, or 0 */
	uint64_t got;	/* stream bytes received so far */
	int signals;	/* signals taken */
	int with_info;	/* signals that carried si_fd and si_band (F_SETSIG) */
};

/* Waits for the next I/O signal; no signal within ASYNC_WAIT_S is a failure (a hang). */
static void async_wait(struct async_rx *rx, siginfo_t *si)
{
	struct timespec t = {.tv_sec = ASYNC_WAIT_S};
	int s;

	do {
		s = sigtimedwait(&rx->set, si, &t);
	} while (s == -1 && errno == EINTR);
	if (s == -1) {
		dprintf(2,
			"calls[%d] %s: FAIL no I/O signal within %d s: %llu of %llu bytes "
			"received after %d signals (errno %d: %s)\n",
			(int)getpid(), calls_case_name, ASYNC_WAIT_S, (unsigned long long)rx->got,
			(unsigned long long)async_total(), rx->signals, errno, strerror(errno));
		calls_die();
	}
}

/* Reads until EAGAIN, checking every byte; returns 1 at the end of the stream. */
static int async_drain(struct async_rx *rx)
{
	static unsigned char buf[65536];

	for (;;) {
		ssize_t r = recv(rx->fd, buf, sizeof(buf), 0);
		if (r == 0)
			return 1;
		if (r == -1) {
			CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
			return 0;
		}
		CHECK_PAT(buf, rx->got, (size_t)r, SEED_ASYNC);
		rx->got += (uint64_t)r;
	}
}

/*
 * The signal-driven receiver: sleeps until a signal says there is something, then reads all
 * there is. It never waits on the socket itself, so a signal that does not come is a hang.
 * With F_SETSIG, each signal's siginfo names the descriptor and says POLL_IN: the peer only
 * sends data and, at the end, a FIN (a half close is POLL_IN too, tcp_fin()). A plain SIGIO
 * may also come with F_SETSIG when the queue of real-time signals overflows.
 */
static void async_receive(struct async_rx *rx)
{
	siginfo_t si;
	int eof = 0;

	while (!eof) {
		async_wait(rx, &si);
		rx->signals++;
		if (rx->rtsig && si.si_signo == rx->rtsig) {
			CHECK_EQ(si.si_fd, rx->fd);
			CHECK_EQ(si.si_code, POLL_IN);
			CHECK_EQ(si.si_band, POLLIN | POLLRDNORM);
			rx->with_info++;
		}
		eof = async_drain(rx);
	}
	CHECK_EQ(rx->got, async_total());
	if (rx->rtsig)
		CHECK(rx->with_info > 0);
	CHECK(rx->signals > 0);
}

/*
 * The receiver that takes exactly what FIONREAD reports after each signal: it never meets
 * EAGAIN, so every arrival after the first read must raise a signal of its own, as the
 * kernel raises one per arrival. The sender waits for its post before the FIN.
 */
static void async_receive_exact(struct async_rx *rx, struct calls_pair *p)
{
	static unsigned char buf[65536];
	siginfo_t si;

	while (rx->got < async_total()) {
		async_wait(rx, &si);
		rx->signals++;
		int n = 0;
		CHECK(ioctl(rx->fd, FIONREAD, &n) == 0);
		CHECK(n >= 0 && (uint64_t)n <= async_total() - rx->got);
		while (n > 0) {
			ssize_t r = recv(rx->fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf),
					 0);
			CHECK(r > 0);
			CHECK_PAT(buf, rx->got, (size_t)r, SEED_ASYNC);
			rx->got += (uint64_t)r;
			n -= (int)r;
		}
	}
	calls_post(p, 'g');
	/*
	 * Then the end of the stream, announced by a signal too. A queued real-time signal of
	 * an arrival already read with an earlier one (two segments before one FIONREAD) may
	 * come first, as on kernel TCP: such a wake-up finds nothing, never a byte more.
	 */
	for (;;) {
		async_wait(rx, &si);
		ssize_t r = recv(rx->fd, buf, 1, MSG_DONTWAIT);
		if (r == 0)
			break;
		CHECK_EQ(r, -1);
		CHECK_EQ(errno, EAGAIN);
	}
}

/* Blocks SIG in the calling thread and makes it the only member of rx->set. */
static void async_block(struct async_rx *rx, int sig)
{
	sigemptyset(&rx->set);
	sigaddset(&rx->set, sig);
	if (sig != SIGIO)
		sigaddset(&rx->set, SIGIO);
	CHECK(pthread_sigmask(SIG_BLOCK, &rx->set, NULL) == 0);
}

/* Sets O_ASYNC and O_NONBLOCK with F_SETFL; F_GETFL reports both. */
static void async_setfl(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	CHECK(fl >= 0);
	CHECK(fcntl(fd, F_SETFL, fl | O_ASYNC | O_NONBLOCK) == 0);
	fl = fcntl(fd, F_GETFL);
	CHECK(fl & O_ASYNC);
	CHECK(fl & O_NONBLOCK);
}

/* F_SETOWN to this process, O_ASYNC by F_SETFL, SIGIO: the stream arrives whole. */
static void case_async_setown(CALLS_ARGS)
{
	struct calls_pair p;
	struct async_rx rx = {0};

	calls_pair_open(&p, AF_INET);
	if (p.child == 0)
		async_sender(&p);
	async_block(&rx, SIGIO);
	CHECK_EQ(fcntl(p.fd, F_GETOWN), 0);
	CHECK(fcntl(p.fd, F_SETOWN, getpid()) == 0);
	CHECK_EQ(fcntl(p.fd, F_GETOWN), getpid());
	async_setfl(p.fd);
	rx.fd = p.fd;
	calls_post(&p, 'a');
	async_receive(&rx);
	calls_post(&p, 'e');
	calls_pair_close(&p);
}

/* The same armed by ioctl: FIOSETOWN, then FIOASYNC, which F_GETFL shows as O_ASYNC. */
static void case_async_fioasync(CALLS_ARGS)
{
	struct calls_pair p;
	struct async_rx rx = {0};
	int pid = (int)getpid(), owner = 0, on = 1;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0)
		async_sender(&p);
	async_block(&rx, SIGIO);
	CHECK(ioctl(p.fd, FIOSETOWN, &pid) == 0);
	CHECK(ioctl(p.fd, FIOGETOWN, &owner) == 0);
	CHECK_EQ(owner, pid);
	CHECK(ioctl(p.fd, FIOASYNC, &on) == 0);
	CHECK(ioctl(p.fd, FIONBIO, &on) == 0);
	CHECK(fcntl(p.fd, F_GETFL) & O_ASYNC);
	rx.fd = p.fd;
	calls_post(&p, 'a');
	async_receive(&rx);
	calls_post(&p, 'e');
	calls_pair_close(&p);
}

/* F_SETSIG to a real-time signal: each one carries si_fd, si_code POLL_IN, si_band POLLIN. */
static void case_async_setsig(CALLS_ARGS)
{
	struct calls_pair p;
	struct async_rx rx = {0};
	int sig = SIGRTMIN + 1;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0)
		async_sender(&p);
	async_block(&rx, sig);
	rx.rtsig = sig;
	CHECK_EQ(fcntl(p.fd, F_GETSIG), 0);
	CHECK(fcntl(p.fd, F_SETSIG, sig) == 0);
	CHECK_EQ(fcntl(p.fd, F_GETSIG), sig);
	CHECK(fcntl(p.fd, F_SETOWN, getpid()) == 0);
	async_setfl(p.fd);
	rx.fd = p.fd;
	calls_post(&p, 'a');
	async_receive(&rx);
	calls_post(&p, 'e');
	calls_pair_close(&p);
}

/* Many tiny messages, each alone: every one must raise its own signal or be read after one. */
static void case_async_small(CALLS_ARGS)
{
	async_small = 1;
	async_msgs = 400;
	case_async_setown(argc, argv);
}

/*
 * O_ASYNC armed on the connecting side before connect(): the signals that come with the
 * connection's set-up are taken like any other, and the stream from the accepting side
 * arrives whole. Under ulsock such a socket stays on kernel TCP, with the reason logged.
 */
static void case_async_connect(CALLS_ARGS)
{
	struct calls_pair p = {0};
	struct async_rx rx = {0};
	int to_child[2], to_parent[2];
	int lfd = calls_listen(AF_INET, &p.server, "kernel");

	CHECK(pipe2(to_child, O_CLOEXEC) == 0);
	CHECK(pipe2(to_parent, O_CLOEXEC) == 0);
	p.child = fork();
	CHECK(p.child >= 0);
	if (p.child == 0) {
		calls_child_setup();
		close(to_child[1]);
		close(to_parent[0]);
		p.sync_rd = to_child[0];
		p.sync_wr = to_parent[1];
		p.fd = calls_accept(lfd);
		close(lfd);
		async_sender(&p);
	}
	close(lfd);
	close(to_child[0]);
	close(to_parent[1]);
	p.sync_rd = to_parent[0];
	p.sync_wr = to_child[1];
	async_block(&rx, SIGIO);
	p.fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(p.fd >= 0);
	CHECK(fcntl(p.fd, F_SETOWN, getpid()) == 0);
	CHECK(fcntl(p.fd, F_SETFL, fcntl(p.fd, F_GETFL) | O_ASYNC) == 0);
	CHECK(connect(p.fd, (struct sockaddr *)&p.server.ss, p.server.len) == 0);
	async_setfl(p.fd);
	rx.fd = p.fd;
	calls_post(&p, 'a');
	async_receive(&rx);
	calls_post(&p, 'e');
	calls_pair_close(&p);
}

struct async_thread {
	struct calls_pair *p;
	struct async_rx rx;
};

/* The owner thread: names itself with F_SETOWN_EX (F_OWNER_TID) and takes the signals. */
static void *async_tid_main(void *arg)
{
	struct async_thread *t = arg;
	struct f_owner_ex own = {.type = F_OWNER_TID, .pid = (pid_t)syscall(SYS_gettid)};
	struct f_owner_ex got = {0};
	int sig = SIGRTMIN + 2;

	async_block(&t->rx, sig);
	t->rx.rtsig = sig;
	CHECK(fcntl(t->p->fd, F_SETSIG, sig) == 0);
	CHECK(fcntl(t->p->fd, F_SETOWN_EX, &own) == 0);
	CHECK(fcntl(t->p->fd, F_GETOWN_EX, &got) == 0);
	CHECK_EQ(got.type, F_OWNER_TID);
	CHECK_EQ(got.pid, own.pid);
	async_setfl(t->p->fd);
	t->rx.fd = t->p->fd;
	calls_post(t->p, 'a');
	async_receive(&t->rx);
	return NULL;
}

/*
 * F_SETOWN_EX to one thread: the signals go to that thread only. The main thread leaves the
 * signal unblocked with a counting handler, so a signal sent to the process as a whole (which
 * the kernel gives to a thread that does not block it) would show up in the count.
 */
static void case_async_setown_ex(CALLS_ARGS)
{
	struct calls_pair p;
	struct async_thread t = {0};
	pthread_t th;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0)
		async_sender(&p);
	calls_on_signal(SIGRTMIN + 2, SA_RESTART);
	calls_on_signal(SIGIO, SA_RESTART);
	t.p = &p;
	CHECK(pthread_create(&th, NULL, async_tid_main, &t) == 0);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK_EQ(calls_sig_count, 0);
	calls_post(&p, 'e');
	calls_pair_close(&p);
}

/*
 * A pair like calls_pair_open's but without the greeting: the accepted socket has never been
 * read or waited on when the case starts, as in a server that arms O_ASYNC right after accept.
 */
static void pair_open_fresh(struct calls_pair *p)
{
	int to_child[2], to_parent[2];
	int lfd = calls_listen(AF_INET, &p->server, "shm");

	CHECK(pipe2(to_child, O_CLOEXEC) == 0);
	CHECK(pipe2(to_parent, O_CLOEXEC) == 0);
	p->child = fork();
	CHECK(p->child >= 0);
	if (p->child == 0) {
		calls_child_setup();
		close(lfd);
		close(to_child[1]);
		close(to_parent[0]);
		p->sync_rd = to_child[0];
		p->sync_wr = to_parent[1];
		p->fd = calls_connect(&p->server);
		return;
	}
	close(to_child[0]);
	close(to_parent[1]);
	p->sync_rd = to_parent[0];
	p->sync_wr = to_child[1];
	p->fd = calls_accept(lfd);
	close(lfd);
}

static volatile sig_atomic_t async_pending;
static struct async_rx fresh_rx;

static void async_note(int sig)
{
	(void)sig;
	async_pending = 1;
}

/* SIGALRM while waiting for an I/O signal: report how far the stream got, then fail. */
static void async_hung(int sig)
{
	(void)sig;
	dprintf(2, "calls[%d] %s: FAIL no I/O signal within %d s: %llu of %llu bytes received "
		   "after %d signals\n", (int)getpid(), calls_case_name, ASYNC_WAIT_S,
		(unsigned long long)fresh_rx.got, (unsigned long long)async_total(),
		fresh_rx.signals);
	_exit(1);
}

/*
 * O_ASYNC armed on a socket right after accept, before any read: the receiver sleeps in
 * sigsuspend (SIGIO caught by a handler, blocked outside the wait) and reads to EAGAIN after
 * each signal. The first bytes must raise the first signal on their own.
 */
static void case_async_fresh(CALLS_ARGS)
{
	struct calls_pair p;
	struct async_rx *rx = &fresh_rx;
	sigset_t block, during;
	int eof = 0;

	pair_open_fresh(&p);
	if (p.child == 0)
		async_sender(&p);
	calls_set_handler(SIGIO, async_note, 0);
	sigemptyset(&block);
	sigaddset(&block, SIGIO);
	CHECK(sigprocmask(SIG_BLOCK, &block, &during) == 0);
	sigdelset(&during, SIGIO);
	CHECK(fcntl(p.fd, F_SETOWN, getpid()) == 0);
	async_setfl(p.fd);
	rx->fd = p.fd;
	calls_post(&p, 'a');
	calls_set_handler(SIGALRM, async_hung, 0);
	while (!eof) {
		alarm(ASYNC_WAIT_S);
		while (!async_pending)
			sigsuspend(&during);
		alarm(0);
		async_pending = 0;
		rx->signals++;
		eof = async_drain(rx);
	}
	calls_watchdog();
	CHECK_EQ(rx->got, async_total());
	calls_post(&p, 'e');
	calls_pair_close(&p);
}

/* Arms SIGIO to this process on the receiver's side and takes the stream exactly. */
static void async_exact_run(struct calls_pair *p, struct async_rx *rx)
{
	CHECK(fcntl(p->fd, F_SETOWN, getpid()) == 0);
	async_setfl(p->fd);
	rx->fd = p->fd;
	calls_post(p, 'a');
	async_receive_exact(rx, p);
	calls_post(p, 'e');
	calls_pair_close(p);
}

/*
 * A signal for every arrival: the receiver reads exactly the bytes FIONREAD reports after
 * each signal and never reads until EAGAIN, so no later arrival is announced by anything
 * but its own signal (a signal-driven server that knows its message lengths).
 */
static void case_async_exact(CALLS_ARGS)
{
	struct calls_pair p;
	struct async_rx rx = {0};

	async_exact = 1;
	calls_pair_open(&p, AF_INET);
	if (p.child == 0)
		async_sender(&p);
	async_block(&rx, SIGIO);
	async_exact_run(&p, &rx);
}

/*
 * O_ASYNC armed while the client's first bytes, sent before the server accepted, are still
 * unread and the client has sent more since (so on a ring): the first signal comes with the
 * stream, and the receiver (reading exactly FIONREAD's count) gets every byte in order.
 */
static void case_async_unread(CALLS_ARGS)
{
	struct calls_pair p = {0};
	struct async_rx rx = {0};
	int lfd = calls_listen(AF_INET, &p.server, "shm");

	async_exact = 1;
	async_pre = 20;
	calls_pair_fork(&p, lfd);
	if (p.child == 0) {
		p.fd = calls_connect(&p.server);
		calls_send_pat(p.fd, 0, 10, SEED_ASYNC); /* before the accept: on TCP */
		calls_post(&p, 'c');
		calls_await(&p);
		calls_send_pat(p.fd, 10, 10, SEED_ASYNC); /* after it: on the ring */
		calls_post(&p, 'w');
		async_sender(&p);
	}
	async_block(&rx, SIGIO);
	calls_await(&p);
	p.fd = calls_accept(lfd);
	close(lfd);
	calls_post(&p, 's');
	calls_await(&p);
	async_exact_run(&p, &rx);
}

/* ---- SO_RCVLOWAT, SO_SNDLOWAT ---------------------------------------------------------------- */

static int ep_make(int fd, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.u64 = 77};
	int ep = epoll_create1(EPOLL_CLOEXEC);

	CHECK(ep >= 0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
	return ep;
}

static int epoll_count(int ep, int ms)
{
	struct epoll_event ev[2];
	int n = epoll_wait(ep, ev, 2, ms);

	CHECK(n >= 0);
	if (n > 0) {
		CHECK_EQ(ev[0].data.u64, 77);
		CHECK(ev[0].events & EPOLLIN);
	}
	return n;
}

static void set_lowat(int fd, int v)
{
	int got = 0;
	socklen_t len = sizeof(got);

	CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0);
	CHECK(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &got, &len) == 0);
	CHECK_EQ(got, v);
}

/*
 * SO_RCVLOWAT 10 with 5 bytes queued (FIONREAD says so): poll, select, epoll (level and edge
 * triggered) report nothing readable for a whole 200 ms; 5 more bytes make the socket readable
 * to all of them, and recv returns the 10.
 */
static void case_rcvlowat(CALLS_ARGS)
{
	struct calls_pair p;
	char buf[100];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "abcde", 5);
		calls_await(&p);
		calls_write_all(p.fd, "fghij", 5);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	set_lowat(p.fd, 10);
	int lt = ep_make(p.fd, EPOLLIN);
	int et = ep_make(p.fd, EPOLLIN | EPOLLET);
	calls_post(&p, '5');
	CHECK_EQ(calls_wait_fionread(p.fd, 5, 5000), 5);
	CHECK_EQ(calls_wait_for(p.fd, POLLIN, 200), 0);
	CHECK_EQ(calls_select_readable(p.fd, 200), 0);
	CHECK_EQ(epoll_count(lt, 200), 0);
	CHECK_EQ(epoll_count(et, 0), 0);
	CHECK_EQ(calls_fionread(p.fd), 5);

	calls_post(&p, 'n');
	CHECK_EQ(calls_wait_for(p.fd, POLLIN, 5000), POLLIN);
	CHECK_EQ(calls_fionread(p.fd), 10);
	CHECK_EQ(calls_select_readable(p.fd, 0), 1);
	CHECK_EQ(epoll_count(lt, 0), 1);
	CHECK_EQ(epoll_count(et, 0), 1);
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), 0), 10);
	CHECK_EQ(memcmp(buf, "abcdefghij", 10), 0);
	close(lt);
	close(et);
	calls_pair_close(&p);
}

/*
 * SO_RCVLOWAT 10 in receives: a blocking recv(100) with 5 bytes there does not return them
 * alone: it returns at least 10 (see below); MSG_DONTWAIT returns what is there (5); SO_RCVTIMEO
 * ends the wait with the 5 that are there; the end of the stream ends it with fewer (3, then
 * 0), and makes poll report the socket readable below the mark.
 *
 * Kernel detail: a recv that copied the first 5 bytes and sleeps for the rest is woken only
 * when SO_RCVLOWAT bytes beyond what it copied are queued (tcp_data_ready() compares
 * rcv_nxt - copied_seq with sk_rcvlowat), so 5 more bytes alone leave it asleep. The peer
 * therefore sends 5, 5 (once the receiver is blocked) and then 10: recv returns 10 if it
 * started late, 20 if it slept, and never 5.
 */
static void case_rcvlowat_recv(CALLS_ARGS)
{
	struct calls_pair p;
	char buf[100];

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_await(&p);
		calls_write_all(p.fd, "abcde", 5);
		calls_await(&p); /* the receiver is about to block */
		calls_sleep_ms(100);
		calls_write_all(p.fd, "fghij", 5);
		calls_sleep_ms(200);
		calls_write_all(p.fd, "klmnopqrst", 10);
		calls_await(&p);
		calls_write_all(p.fd, "12345", 5);
		calls_await(&p);
		calls_write_all(p.fd, "67890", 5);
		calls_await(&p);
		calls_write_all(p.fd, "xyz", 3);
		CHECK(shutdown(p.fd, SHUT_WR) == 0);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	set_lowat(p.fd, 10);
	calls_post(&p, 'a');
	CHECK_EQ(calls_wait_fionread(p.fd, 5, 5000), 5);
	calls_post(&p, 'b');
	ssize_t r = recv(p.fd, buf, sizeof(buf), 0);
	dprintf(1, "calls: note rcvlowat_recv: the blocking recv returned %zd\n", r);
	CHECK(r >= 10);
	if (r < 20)
		calls_read_exact(p.fd, buf + r, (size_t)(20 - r));
	CHECK_EQ(memcmp(buf, "abcdefghijklmnopqrst", 20), 0);

	calls_post(&p, 'c');
	CHECK_EQ(calls_wait_fionread(p.fd, 5, 5000), 5);
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), MSG_DONTWAIT), 5);
	CHECK_EQ(memcmp(buf, "12345", 5), 0);

	struct timeval tv = {.tv_usec = 200000}, zero = {0};
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
	calls_post(&p, 'd');
	CHECK_EQ(calls_wait_fionread(p.fd, 5, 5000), 5);
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), 0), 5);
	CHECK_EQ(memcmp(buf, "67890", 5), 0);
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof(zero)) == 0);

	calls_post(&p, 'e');
	CHECK_EQ(calls_wait_for(p.fd, POLLIN, 5000), POLLIN);
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), 0), 3);
	CHECK_EQ(memcmp(buf, "xyz", 3), 0);
	CHECK_EQ(recv(p.fd, buf, sizeof(buf), 0), 0);
	calls_pair_close(&p);
}

/*
 * SO_RCVLOWAT of 1.5 MiB, more than ulsock's ring holds (1 MiB by default; the kernel
 * grows its receive buffer to match, up to half of tcp_rmem's maximum, and keeps the
 * mark it stored): once the peer sent that much, poll, select and epoll report the socket
 * readable, and the bytes are all there, in order. ulsock reports it readable once its
 * ring holds as much as a sender can put there (shm/io.c, rx_poll_ready).
 */
static void case_rcvlowat_big(CALLS_ARGS)
{
	struct calls_pair p;
	int mark = 3 << 19, got = 0;
	socklen_t len = sizeof(got);

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		char c;
		calls_read_exact(p.fd, &c, 1);
		calls_send_pat(p.fd, 0, (size_t)(c == 'b' ? mark : 1 << 16), 41);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof(mark)) == 0);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &got, &len) == 0);
	/* A kernel whose tcp_rmem caps the mark lower: the case shrinks to a small one. */
	if (got != mark)
		mark = 1 << 16;
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &mark, sizeof(mark)) == 0);
	int lt = ep_make(p.fd, EPOLLIN);
	calls_write_all(p.fd, mark == 1 << 16 ? "s" : "b", 1);
	/*
	 * Each waits: Linux also reports a socket readable below its mark for a moment, when
	 * its receive window is nearly closed or its buffer under pressure
	 * (tcp_epollin_ready), and a look right after may find the window open again.
	 */
	CHECK_EQ(calls_wait_for(p.fd, POLLIN, 10000), POLLIN);
	CHECK_EQ(calls_select_readable(p.fd, 10000), 1);
	CHECK_EQ(epoll_count(lt, 10000), 1);
	/*
	 * The mark goes back to 1 before the blocking reads: Linux wakes a reader asleep in
	 * recv only once the mark is queued (tcp_data_ready), even one that asked for less,
	 * so a 64 KiB read that found the queue empty for a moment could sleep for good with
	 * 1.3 MiB queued, the sender done (seen 1 run in about 1,500 beside 5 more). The case
	 * rcvlowat_short_read covers that difference.
	 */
	int one = 1;
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0);
	calls_recv_pat(p.fd, 0, (size_t)mark, 41);
	close(lt);
	calls_pair_close(&p);
}

/*
 * A blocking recv that asks for fewer bytes than SO_RCVLOWAT, asleep before they arrive:
 * POSIX has it wait for the smaller of the two, and Linux computes that target too, but
 * it wakes a sleeping reader only once the mark is queued (tcp_data_ready), so with a
 * mark of 512 KiB and 128 KiB sent the recv(4096) sleeps until its SO_RCVTIMEO (1 s) and
 * then returns 4096 bytes. ulsock wakes it as soon as the 4096 bytes are there (README,
 * limitations; calls.md D24). Both return the same bytes; the case asserts those, never
 * the time.
 */
static void case_rcvlowat_short_read(CALLS_ARGS)
{
	struct calls_pair p;
	unsigned char buf[4096];
	struct timeval tv = {.tv_sec = 1};
	int one = 1;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_send_pat(p.fd, 0, 1 << 20, 42);
		calls_await(&p);
		calls_sleep_ms(100); /* the receiver is asleep in recv */
		calls_send_pat(p.fd, 0, 128 << 10, 43);
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	/* 1 MiB first: Linux's receive window grows wide open, so it is not what wakes. */
	calls_recv_pat(p.fd, 0, 1 << 20, 42);
	set_lowat(p.fd, 512 << 10);
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
	calls_post(&p, 'a');
	ssize_t r;
	do {
		r = recv(p.fd, buf, sizeof(buf), 0);
	} while (r == -1 && errno == EINTR);
	CHECK_EQ(r, (ssize_t)sizeof(buf));
	CHECK_PAT(buf, 0, sizeof(buf), 43);
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) == 0);
	calls_recv_pat(p.fd, sizeof(buf), (128 << 10) - sizeof(buf), 43);
	calls_pair_close(&p);
}

/*
 * The low-water options themselves, on a connected socket: SO_RCVLOWAT is 1 by default and 0
 * stores 1; SO_SNDLOWAT reads 1 and cannot be set on Linux (ENOPROTOOPT), staying 1.
 */
static void case_lowat_opts(CALLS_ARGS)
{
	struct calls_pair p;
	int v = 0, one = 1;
	socklen_t len = sizeof(v);

	calls_pair_open(&p, AF_INET);
	if (p.child == 0) {
		calls_expect_eof(p.fd);
		calls_pair_close(&p);
	}
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len) == 0);
	CHECK_EQ(v, 1);
	set_lowat(p.fd, 7);
	v = 0;
	CHECK(setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0);
	len = sizeof(v);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len) == 0);
	CHECK_EQ(v, 1);
	len = sizeof(v);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_SNDLOWAT, &v, &len) == 0);
	CHECK_EQ(v, 1);
	CHECK_EQ(len, sizeof(int));
	CHECK_ERR(setsockopt(p.fd, SOL_SOCKET, SO_SNDLOWAT, &one, sizeof(one)), ENOPROTOOPT);
	v = 9;
	CHECK_ERR(setsockopt(p.fd, SOL_SOCKET, SO_SNDLOWAT, &v, sizeof(v)), ENOPROTOOPT);
	len = sizeof(v);
	CHECK(getsockopt(p.fd, SOL_SOCKET, SO_SNDLOWAT, &v, &len) == 0);
	CHECK_EQ(v, 1);
	calls_pair_close(&p);
}

/* ---- after the peer closed ----------------------------------------------------------------- */

/* Waits (up to 5 s) until poll reports POLLERR or POLLHUP, which it always may; returns them. */
static short wait_err_hup(int fd)
{
	return calls_wait_for(fd, 0, 5000);
}

static short poll_now(int fd, short events)
{
	struct pollfd pf = {.fd = fd, .events = events};

	CHECK(poll(&pf, 1, 0) >= 0);
	return pf.revents;
}

#define ALL_EV (POLLIN | POLLOUT | POLLRDHUP)

/*
 * The peer closed after reading everything: its FIN arrives (recv 0), and the socket is
 * half open. The first send is accepted whole (the kernel sends it; the closed peer answers
 * with a reset). After the reset poll reports POLLERR|POLLHUP; recv still returns 0 (the FIN
 * came first); the pending error is EPIPE: send with MSG_NOSIGNAL fails with EPIPE and no
 * signal, a send without it fails with EPIPE and raises SIGPIPE; then POLLERR is gone.
 */
static void case_send_after_close(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	if (p.child == 0)
		calls_pair_close(&p);
	calls_on_signal(SIGPIPE, 0);
	calls_expect_eof(p.fd);
	CHECK_EQ(poll_now(p.fd, ALL_EV), POLLIN | POLLOUT | POLLRDHUP);
	CHECK_EQ(send(p.fd, "abc", 3, 0), 3);
	CHECK_EQ(calls_sig_count, 0);
	CHECK_EQ(wait_err_hup(p.fd), POLLERR | POLLHUP);
	CHECK_EQ(poll_now(p.fd, ALL_EV), POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP);
	calls_expect_eof(p.fd);
	CHECK_ERR(send(p.fd, "d", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_EQ(calls_sig_count, 0);
	CHECK_ERR(send(p.fd, "e", 1, 0), EPIPE);
	CHECK_EQ(calls_sig_count, 1);
	CHECK_EQ(poll_now(p.fd, ALL_EV), POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	calls_expect_eof(p.fd);
	calls_pair_close(&p);
}

/*
 * The peer closes with bytes of ours unread: its kernel answers with a reset at once, no FIN.
 * Returns once the reset is here (POLLERR|POLLHUP, and readable).
 */
static void reset_by_unread_close(struct calls_pair *p)
{
	if (p->child == 0) {
		calls_await(p);
		CHECK_EQ(calls_wait_fionread(p->fd, 6, 5000), 6);
		calls_pair_close(p);
	}
	calls_on_signal(SIGPIPE, 0);
	calls_write_all(p->fd, "unread", 6);
	calls_post(p, 'c');
	CHECK_EQ(wait_err_hup(p->fd), POLLERR | POLLHUP);
	CHECK_EQ(poll_now(p->fd, ALL_EV), POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP);
}

/*
 * After a reset the first send reports it: ECONNRESET, without SIGPIPE (the signal belongs
 * to EPIPE only); the next send fails with EPIPE and SIGPIPE; recv returns 0 from then on.
 */
static void case_reset_then_send(CALLS_ARGS)
{
	struct calls_pair p;

	calls_pair_open(&p, AF_INET);
	reset_by_unread_close(&p);
	CHECK_ERR(send(p.fd, "a", 1, 0), ECONNRESET);
	CHECK_EQ(calls_sig_count, 0);
	CHECK_ERR(send(p.fd, "b", 1, 0), EPIPE);
	CHECK_EQ(calls_sig_count, 1);
	CHECK_ERR(send(p.fd, "c", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_EQ(calls_sig_count, 1);
	calls_expect_eof(p.fd);
	CHECK_EQ(poll_now(p.fd, ALL_EV), POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	calls_pair_close(&p);
}

/* The same reset taken by recv first: ECONNRESET once, then 0; a send then fails with EPIPE. */
static void case_reset_then_recv(CALLS_ARGS)
{
	struct calls_pair p;
	char c;

	calls_pair_open(&p, AF_INET);
	reset_by_unread_close(&p);
	CHECK_ERR(recv(p.fd, &c, 1, 0), ECONNRESET);
	CHECK_EQ(recv(p.fd, &c, 1, 0), 0);
	CHECK_EQ(poll_now(p.fd, ALL_EV), POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	CHECK_ERR(send(p.fd, "a", 1, 0), EPIPE);
	CHECK_EQ(calls_sig_count, 1);
	calls_pair_close(&p);
}

/* ---- epoll_wait over thousands of ready descriptors ------------------------------------------ */

static void raise_nofile(rlim_t need)
{
	struct rlimit rl;

	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_cur >= need)
		return;
	rl.rlim_cur = need;
	if (rl.rlim_max < need)
		rl.rlim_max = need;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		calls_skip("cannot raise RLIMIT_NOFILE far enough");
}

/* Connects n times, sends one byte on each, holds them until the go pipe closes. */
static __attribute__((noreturn)) void many_client(const struct calls_addr *server, int n, int go)
{
	int *fds = calloc((size_t)n, sizeof(int));
	char c;

	CHECK(fds != NULL);
	for (int i = 0; i < n; i++) {
		fds[i] = calls_connect(server);
		calls_write_all(fds[i], "m", 1);
	}
	CHECK_EQ(read(go, &c, 1), 0);
	for (int i = 0; i < n; i++)
		CHECK(close(fds[i]) == 0);
	_exit(0);
}

/* One epoll_wait; every event is EPOLLIN for a distinct member (data.u64 < total). */
static int many_wait(int ep, struct epoll_event *ev, int max, int ms, int total,
		     unsigned char *seen, int *fresh)
{
	int n;

	do {
		n = epoll_wait(ep, ev, max, ms);
	} while (n == -1 && errno == EINTR);
	CHECK(n >= 0);
	for (int i = 0; i < n; i++) {
		CHECK(ev[i].data.u64 < (uint64_t)total);
		CHECK_EQ(ev[i].events, EPOLLIN);
		if (fresh) {
			CHECK_EQ(seen[ev[i].data.u64], 0);
			seen[ev[i].data.u64] = 1;
			(*fresh)--;
			if (*fresh == 0)
				fresh = NULL;
		}
	}
	return n;
}

/*
 * Level-triggered passes with maxevents below the count: every call returns exactly max
 * (all members stay ready), and no member is starved: within 3 * total events every
 * member is reported. The kernel's ready list does better (the first total events name
 * each member once: it moves a reported member to its back); ulsock reports the members
 * it decides in cycles, and their order against the kernel's own differs (README,
 * limitations).
 */
static void many_batches(int ep, struct epoll_event *ev, int total, int max)
{
	unsigned char *count = calloc((size_t)total, 1);
	int seen = 0;

	CHECK(count != NULL);
	while (seen < 3 * total) {
		CHECK_EQ(many_wait(ep, ev, max, 5000, total, NULL, NULL), max);
		for (int i = 0; i < max && seen < 3 * total; i++, seen++)
			count[ev[i].data.u64] = 1;
	}
	for (int i = 0; i < total; i++)
		CHECK_EQ(count[i], 1);
	free(count);
}

/*
 * nsock accelerated connections and npipe pipes, each with one byte ready, in one epoll set:
 * one epoll_wait with maxevents 4096 returns every one of them once; then passes of 1000 and
 * of 700.
 */
static void epoll_many(int nsock, int npipe)
{
	int total = nsock + npipe;
	struct calls_addr server;
	int go[2];
	unsigned char *seen = calloc((size_t)total, 1);
	int *fds = calloc((size_t)total, sizeof(int));
	int *wr = calloc((size_t)(npipe + 1), sizeof(int));
	struct epoll_event *ev = calloc(4096, sizeof(*ev));

	CHECK(seen && fds && wr && ev);
	CHECK(total <= 4096);
	raise_nofile((rlim_t)(nsock + 2 * npipe + 256));
	int lfd = calls_listen(AF_INET, &server, "shm");
	/* A backlog for the burst: a full queue drops SYNs, which come again a second later. */
	CHECK(listen(lfd, 4096) == 0);
	CHECK(pipe2(go, O_CLOEXEC) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		calls_child_setup();
		close(lfd);
		close(go[1]);
		many_client(&server, nsock, go[0]);
	}
	close(go[0]);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0);
	for (int i = 0; i < total; i++) {
		if (i < nsock) {
			fds[i] = calls_accept(lfd);
		} else {
			int pp[2];
			CHECK(pipe(pp) == 0);
			calls_write_all(pp[1], "p", 1);
			fds[i] = pp[0];
			wr[i - nsock] = pp[1];
		}
		struct epoll_event e = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
		CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &e) == 0);
	}
	close(lfd);
	/* Every byte has arrived before the set is asked. */
	for (int i = 0; i < nsock; i++)
		CHECK_EQ(calls_wait_fionread(fds[i], 1, 10000), 1);

	int fresh = total;
	CHECK_EQ(many_wait(ep, ev, 4096, 5000, total, seen, &fresh), total);
	CHECK_EQ(fresh, 0);
	many_batches(ep, ev, total, 1000);
	many_batches(ep, ev, total, 700);
	many_batches(ep, ev, total, 64);

	/* Each member once more, then nothing: the bytes are gone. */
	for (int i = 0; i < total; i++) {
		char c;
		CHECK_EQ(read(fds[i], &c, 1), 1);
		CHECK_EQ(c, i < nsock ? 'm' : 'p');
	}
	CHECK_EQ(many_wait(ep, ev, 4096, 0, total, NULL, NULL), 0);
	for (int i = 0; i < total; i++)
		close(fds[i]);
	for (int i = 0; i < npipe; i++)
		close(wr[i]);
	close(ep);
	close(go[1]);
	calls_wait_child(pid);
	free(seen);
	free(fds);
	free(wr);
	free(ev);
}

static void case_epoll_3000(CALLS_ARGS)
{
	epoll_many(3000, 0);
}

static void case_epoll_3000_mixed(CALLS_ARGS)
{
	epoll_many(1500, 1500);
}

static const struct calls_case cases[] = {
	{"async_setown", case_async_setown},
	{"async_fioasync", case_async_fioasync},
	{"async_setsig", case_async_setsig},
	{"async_setown_ex", case_async_setown_ex},
	{"async_fresh", case_async_fresh},
	{"async_small", case_async_small},
	{"async_connect", case_async_connect},
	{"async_exact", case_async_exact},
	{"async_unread", case_async_unread},
	{"rcvlowat", case_rcvlowat},
	{"rcvlowat_recv", case_rcvlowat_recv},
	{"rcvlowat_short_read", case_rcvlowat_short_read},
	{"rcvlowat_big", case_rcvlowat_big},
	{"lowat_opts", case_lowat_opts},
	{"send_after_close", case_send_after_close},
	{"reset_then_send", case_reset_then_send},
	{"reset_then_recv", case_reset_then_recv},
	{"epoll_3000", case_epoll_3000},
	{"epoll_3000_mixed", case_epoll_3000_mixed},
	{NULL, NULL},
};

int main(int argc, char **argv)
{
	return calls_main(argc, argv, cases);
}
