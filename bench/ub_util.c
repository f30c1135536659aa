/*
 * ulsock-bench: time, CPU accounting, statistics, errors and the watchdog.
 */
#include "ub.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

double ub_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

double ub_cpu_base;

/* User plus system CPU seconds of this process so far (zero right after fork). */
double ub_cpu_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void vmessage(const char *fmt, va_list ap)
{
	fprintf(stderr, "ulsock-bench[%d]: ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void ub_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
	exit(1);
}

void ub_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmessage(fmt, ap);
	va_end(ap);
}

static void watchdog_fired(int sig)
{
	static const char msg[] = "ulsock-bench: watchdog: run took too long, giving up\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(3);
	_exit(3);
}

/*
 * Every process arms one: whatever a peer does, this process exits within seconds.
 * The per-call socket timeouts catch a dead peer first; this catches the rest.
 */
void ub_watchdog(double seconds)
{
	struct itimerval it = {0};

	signal(SIGALRM, watchdog_fired);
	it.it_value.tv_sec = (time_t)seconds;
	it.it_value.tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6);
	if (seconds > 0 && !it.it_value.tv_sec && !it.it_value.tv_usec)
		it.it_value.tv_usec = 1;
	setitimer(ITIMER_REAL, &it, NULL);
}

void ub_row_init(struct ub_row *r, const char *test)
{
	memset(r, 0, sizeof(*r));
	r->test = test;
	r->param = "";
	r->lat_med_us = r->lat_p99_us = r->lat_p999_us = NAN;
	r->mb_s = r->msg_s = r->conn_s = r->ns_call = NAN;
	r->cpu_client_s = r->cpu_server_s = r->mb_per_cpu_s = NAN;
}

/* Seed 002's metric: payload megabytes moved per CPU-second of both sides together. */
void ub_row_cpu(struct ub_row *r, uint64_t bytes)
{
	double cpu = r->cpu_client_s + (isnan(r->cpu_server_s) ? 0 : r->cpu_server_s);

	if (cpu > 0)
		r->mb_per_cpu_s = bytes / 1e6 / cpu;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Sorts v and stores nearest-rank percentiles; returns -1 when there are no samples. */
int ub_sort_percentiles(double *v, size_t n, double *med, double *p99, double *p999)
{
	if (!n)
		return -1;
	qsort(v, n, sizeof(*v), cmp_double);
	*med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*p99 = v[(size_t)ceil(0.99 * n) - 1];
	*p999 = v[(size_t)ceil(0.999 * n) - 1];
	return 0;
}
