/*
 * uls-wakeup: what it costs one process to wake another that sleeps, by each mechanism a
 * user-level sockets layer could use to end a sleep in poll, select or epoll.
 *
 * Two processes, pinned to two CPUs, take turns: each sleeps until the other wakes it,
 * then wakes the other and sleeps again (a "sleeping ping-pong", the shape of a request
 * and its answer between two programs that sleep between messages). Per mechanism:
 *
 *   tcp      a byte on a loopback TCP connection (today's wake-up byte, protocol.md 9.7)
 *   unix     a byte on an AF_UNIX stream socket pair
 *   pipe     a byte on a pipe (one each way)
 *   eventfd  a counter add on an eventfd (one each way, shared at set-up)
 *   futex    FUTEX_WAKE on a word of shared memory: the floor, but a futex is not a
 *            descriptor and no poll, select or epoll can wait for it
 *
 * Every descriptor mechanism sleeps in epoll_wait on a set holding only that descriptor
 * (-w poll: in poll), as a program's event loop would. Reported per mechanism: the half
 * round trip (one wake-up and the sleeper's return to user space), the waker's time in
 * its system call, and the CPU both processes used per wake-up (getrusage), as medians
 * of the runs, mechanisms interleaved so that a drifting machine hits all alike.
 *
 *   uls-wakeup [-n WAKES] [-r RUNS] [-a CPU] [-b CPU] [-w epoll|poll] [-m LIST]
 *
 * One line per mechanism: "wakeup <name> half_rtt_ns=.. wake_call_ns=.. cpu_ns=..".
 * Plain C11 and Linux system calls; it never links against ulsock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mech { M_TCP, M_UNIX, M_PIPE, M_EVENTFD, M_FUTEX, M_COUNT };
static const char *const names[M_COUNT] = {"tcp", "unix", "pipe", "eventfd", "futex"};

/* What the two processes share: the futex words and each side's results. */
struct shared {
	_Alignas(64) _Atomic uint32_t word[2]; /* futex: side i sleeps on word[i] */
	_Alignas(64) uint64_t wake_call_ns[2];  /* time in the waking call, summed */
	uint64_t cpu_ns[2];                      /* user and system CPU of the turns */
	int failed;
};

/* A mechanism's two ends: side i waits on in[i] and wakes the other through out[i]. */
struct link {
	enum mech m;
	int in[2], out[2];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

static long futex(_Atomic uint32_t *w, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)w, op, val, NULL, NULL, 0);
}

/* A connected loopback TCP pair, both ends with TCP_NODELAY: 0, or -1. */
static int tcp_pair(int fd[2])
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int one = 1, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0)
		return -1;
	fd[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd[0] < 0 || connect(fd[0], (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	fd[1] = accept(l, NULL, NULL);
	close(l);
	if (fd[1] < 0)
		return -1;
	setsockopt(fd[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static int link_open(struct link *k, enum mech m)
{
	int a[2], b[2];

	k->m = m;
	switch (m) {
	case M_TCP:
	case M_UNIX:
		if (m == M_TCP ? tcp_pair(a) : socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a))
			return -1;
		k->in[0] = k->out[0] = a[0];
		k->in[1] = k->out[1] = a[1];
		return 0;
	case M_PIPE:
		if (pipe2(a, O_CLOEXEC) || pipe2(b, O_CLOEXEC))
			return -1;
		k->in[0] = a[0], k->out[1] = a[1]; /* side 1 wakes side 0 through pipe a */
		k->in[1] = b[0], k->out[0] = b[1];
		return 0;
	case M_EVENTFD:
		a[0] = eventfd(0, EFD_CLOEXEC);
		a[1] = eventfd(0, EFD_CLOEXEC);
		if (a[0] < 0 || a[1] < 0)
			return -1;
		k->in[0] = k->out[1] = a[0];
		k->in[1] = k->out[0] = a[1];
		return 0;
	default:
		k->in[0] = k->in[1] = k->out[0] = k->out[1] = -1;
		return 0;
	}
}

static void link_close(struct link *k)
{
	int fds[4] = {k->in[0], k->in[1], k->out[0], k->out[1]};

	for (int i = 0; i < 4; i++) {
		int dup = 0;
		for (int j = 0; j < i; j++)
			dup |= fds[j] == fds[i];
		if (fds[i] >= 0 && !dup)
			close(fds[i]);
	}
}

/* Wakes the other side: the time spent in the waking call goes to *spent. */
static int wake(struct link *k, struct shared *s, int side, uint64_t *spent)
{
	uint64_t t0 = now_ns();
	int ok;

	if (k->m == M_FUTEX) {
		atomic_store(&s->word[!side], 1);
		ok = futex(&s->word[!side], FUTEX_WAKE, 1) >= 0;
	} else if (k->m == M_EVENTFD) {
		uint64_t one = 1;
		ok = write(k->out[side], &one, sizeof(one)) == sizeof(one);
	} else {
		char b = 1;
		ok = write(k->out[side], &b, 1) == 1;
	}
	*spent += now_ns() - t0;
	return ok ? 0 : -1;
}

/* Sleeps until woken, then takes the wake-up (the byte, the count, the word). */
static int sleep_until_woken(struct link *k, struct shared *s, int side, int ep, int use_poll)
{
	if (k->m == M_FUTEX) {
		while (atomic_load(&s->word[side]) == 0)
			if (futex(&s->word[side], FUTEX_WAIT, 0) < 0 && errno != EAGAIN &&
			    errno != EINTR)
				return -1;
		atomic_store(&s->word[side], 0);
		return 0;
	}
	for (;;) {
		int r;
		if (use_poll) {
			struct pollfd p = {.fd = k->in[side], .events = POLLIN};
			r = poll(&p, 1, 10000);
		} else {
			struct epoll_event ev;
			r = epoll_wait(ep, &ev, 1, 10000);
		}
		if (r == 1)
			break;
		if (r == 0 || (r < 0 && errno != EINTR))
			return -1; /* 10 s without a wake-up: the other side is gone */
	}
	uint64_t got;
	ssize_t n = read(k->in[side], &got, k->m == M_EVENTFD ? sizeof(got) : 1);
	return n > 0 ? 0 : -1;
}

/* One side's turns: side 0 wakes first. */
static int turns(struct link *k, struct shared *s, int side, long wakes, int use_poll)
{
	int ep = -1;
	uint64_t spent = 0;

	if (k->m != M_FUTEX && !use_poll) {
		struct epoll_event ev = {.events = EPOLLIN};
		ep = epoll_create1(EPOLL_CLOEXEC);
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, k->in[side], &ev) < 0)
			return -1;
	}
	uint64_t c0 = cpu_ns();
	for (long i = 0; i < wakes; i++) {
		if (side == 0 && wake(k, s, side, &spent) < 0)
			return -1;
		if (sleep_until_woken(k, s, side, ep, use_poll) < 0)
			return -1;
		if (side == 1 && wake(k, s, side, &spent) < 0)
			return -1;
	}
	s->cpu_ns[side] = cpu_ns() - c0;
	s->wake_call_ns[side] = spent;
	if (ep >= 0)
		close(ep);
	return 0;
}

struct result {
	double half_rtt_ns, wake_call_ns, cpu_ns;
};

static int run_once(enum mech m, long wakes, int cpu_a, int cpu_b, int use_poll,
		    struct shared *s, struct result *out)
{
	struct link k;

	memset(s, 0, sizeof(*s));
	if (link_open(&k, m) < 0) {
		fprintf(stderr, "uls-wakeup: %s: %s\n", names[m], strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (pin(cpu_b) != 0)
			fprintf(stderr, "uls-wakeup: cannot pin to CPU %d\n", cpu_b);
		_exit(turns(&k, s, 1, wakes, use_poll) == 0 ? 0 : 1);
	}
	if (pin(cpu_a) != 0)
		fprintf(stderr, "uls-wakeup: cannot pin to CPU %d\n", cpu_a);
	uint64_t t0 = now_ns();
	int r = turns(&k, s, 0, wakes, use_poll);
	uint64_t t1 = now_ns();
	int status;
	if (r < 0)
		kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	link_close(&k);
	if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "uls-wakeup: %s: a side failed\n", names[m]);
		return -1;
	}
	/* Each turn is two wake-ups: side 0's and side 1's answer. */
	out->half_rtt_ns = (double)(t1 - t0) / (2.0 * (double)wakes);
	out->wake_call_ns = (double)(s->wake_call_ns[0] + s->wake_call_ns[1]) / (2.0 * (double)wakes);
	out->cpu_ns = (double)(s->cpu_ns[0] + s->cpu_ns[1]) / (2.0 * (double)wakes);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static void usage(void)
{
	fprintf(stderr, "usage: uls-wakeup [-n WAKES] [-r RUNS] [-a CPU] [-b CPU] "
			"[-w epoll|poll] [-m tcp,unix,pipe,eventfd,futex]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long wakes = 20000;
	int runs = 5, cpu_a = 0, cpu_b = 1, use_poll = 0, want[M_COUNT] = {0}, any = 0, opt;

	while ((opt = getopt(argc, argv, "n:r:a:b:w:m:")) != -1) {
		switch (opt) {
		case 'n':
			wakes = atol(optarg);
			break;
		case 'r':
			runs = atoi(optarg);
			break;
		case 'a':
			cpu_a = atoi(optarg);
			break;
		case 'b':
			cpu_b = atoi(optarg);
			break;
		case 'w':
			if (strcmp(optarg, "poll") != 0 && strcmp(optarg, "epoll") != 0)
				usage();
			use_poll = strcmp(optarg, "poll") == 0;
			break;
		case 'm':
			for (char *t = strtok(optarg, ","); t; t = strtok(NULL, ",")) {
				int found = 0;
				for (int m = 0; m < M_COUNT; m++)
					if (strcmp(t, names[m]) == 0)
						want[m] = found = any = 1;
				if (!found)
					usage();
			}
			break;
		default:
			usage();
		}
	}
	if (wakes < 1 || runs < 1 || runs > 100)
		usage();
	if (!any)
		for (int m = 0; m < M_COUNT; m++)
			want[m] = 1;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		cpu_b = cpu_a; /* one CPU: the turns still run, on one core */
	struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED) {
		perror("uls-wakeup: mmap");
		return 1;
	}
	static double half[M_COUNT][100], call[M_COUNT][100], cpu[M_COUNT][100];
	/* Run r of every mechanism before run r + 1 of any: interleaved. */
	for (int r = 0; r < runs; r++)
		for (int m = 0; m < M_COUNT; m++) {
			struct result res;
			if (!want[m])
				continue;
			if (run_once((enum mech)m, wakes, cpu_a, cpu_b, use_poll, s, &res) < 0)
				return 1;
			half[m][r] = res.half_rtt_ns;
			call[m][r] = res.wake_call_ns;
			cpu[m][r] = res.cpu_ns;
		}
	for (int m = 0; m < M_COUNT; m++)
		if (want[m])
			printf("wakeup %s half_rtt_ns=%.0f wake_call_ns=%.0f cpu_ns=%.0f "
			       "(medians of %d runs of %ld wake-ups, %s)\n",
			       names[m], median(half[m], runs), median(call[m], runs),
			       median(cpu[m], runs), runs, wakes,
			       m == M_FUTEX ? "FUTEX_WAIT" : use_poll ? "poll" : "epoll_wait");
	munmap(s, sizeof(*s));
	return 0;
}
