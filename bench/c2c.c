/*
 * uls-c2c: how long a cache line takes to go from one CPU to another and back, over time.
 *
 * Two threads, pinned to two CPUs, bounce a counter between two cache lines: one thread
 * stores n and waits for the other to store n back. Every interval prints the mean round
 * trip in nanoseconds. On a virtual machine the answer depends on where the host placed
 * the two virtual CPUs (two threads of one core, two cores sharing a cache, or further
 * apart), and that can change from one second to the next; every cross-process fast path
 * pays it, so benchmark results move with it.
 *
 *   uls-c2c [-a CPU] [-b CPU] [-s SECONDS] [-i INTERVAL_MS]
 *
 * Prints one line per interval, "c2c_rtt_ns=R", then "c2c: min=.. median=.. max=..".
 * Plain C11 and POSIX threads; it never links against ulsock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct line {
	_Alignas(128) _Atomic uint64_t v;
};

static struct line ping, pong;
static atomic_int stop;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *echo(void *arg)
{
	int cpu = *(int *)arg;
	uint64_t n = 1;

	if (pin(cpu) != 0)
		fprintf(stderr, "uls-c2c: cannot pin to CPU %d\n", cpu);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if (atomic_load_explicit(&ping.v, memory_order_acquire) != n)
			continue;
		atomic_store_explicit(&pong.v, n, memory_order_release);
		n++;
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int arg_int(const char *s, int lo, int hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "uls-c2c: bad number '%s' (%d..%d)\n", s, lo, hi);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	int a = 0, b = 1, seconds = 10, interval_ms = 500, opt;
	pthread_t t;

	while ((opt = getopt(argc, argv, "a:b:s:i:h")) != -1) {
		switch (opt) {
		case 'a': a = arg_int(optarg, 0, CPU_SETSIZE - 1); break;
		case 'b': b = arg_int(optarg, 0, CPU_SETSIZE - 1); break;
		case 's': seconds = arg_int(optarg, 1, 3600); break;
		case 'i': interval_ms = arg_int(optarg, 10, 60000); break;
		default:
			fprintf(stderr, "usage: uls-c2c [-a CPU] [-b CPU] [-s SECONDS] "
					"[-i INTERVAL_MS]\n");
			return opt == 'h' ? 0 : 2;
		}
	}
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "uls-c2c: needs two CPUs\n");
		return 77;
	}
	int slots = seconds * 1000 / interval_ms;

	if (slots < 1)
		slots = 1;
	uint64_t *rtt = calloc((size_t)slots, sizeof(*rtt));
	if (!rtt || pin(a) != 0) {
		fprintf(stderr, "uls-c2c: cannot pin to CPU %d (or no memory)\n", a);
		return 1;
	}
	if (pthread_create(&t, NULL, echo, &b) != 0) {
		fprintf(stderr, "uls-c2c: pthread_create failed\n");
		return 1;
	}
	uint64_t n = 1;
	for (int k = 0; k < slots; k++) {
		uint64_t start = now_ns(), end = start + (uint64_t)interval_ms * 1000000u, trips = 0;
		while (now_ns() < end) {
			for (int i = 0; i < 1000; i++, n++) {
				atomic_store_explicit(&ping.v, n, memory_order_release);
				while (atomic_load_explicit(&pong.v, memory_order_acquire) != n)
					;
			}
			trips += 1000;
		}
		rtt[k] = (now_ns() - start) / trips;
		printf("c2c_rtt_ns=%llu\n", (unsigned long long)rtt[k]);
		fflush(stdout);
	}
	atomic_store(&stop, 1);
	atomic_store_explicit(&ping.v, n, memory_order_release);
	pthread_join(t, NULL);
	qsort(rtt, (size_t)slots, sizeof(*rtt), cmp_u64);
	printf("c2c: min=%llu median=%llu max=%llu (ns, round trip, CPU %d <-> %d)\n",
	       (unsigned long long)rtt[0], (unsigned long long)rtt[slots / 2],
	       (unsigned long long)rtt[slots - 1], a, b);
	free(rtt);
	return 0;
}
