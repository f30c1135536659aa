/* SPDX-License-Identifier: MIT */
/*
 * Destinations whose connections are too short for a fast path (core/shortconn.h): four
 * short connections in a row keep the next ones to that address and port on kernel TCP,
 * one that is not short (enough units, or a long life) gives it back; other ports and
 * families are other destinations; the least recently used one is forgotten first;
 * ULSOCK_SHORT_CALLS=0 turns it all off. Units are turns and 64 KiB pieces; the
 * kernel's count of a connection's units (TCP_INFO's data segments and bytes) is checked
 * on a real loopback connection.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "core/config.h"
#include "core/shortconn.h"
#include "os/libc.h"

static struct sockaddr_in v4(const char *addr, uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

	inet_pton(AF_INET, addr, &a.sin_addr);
	return a;
}

#define SA(x) ((struct sockaddr *)&(x))
#define QUICK 1000000ull /* 1 ms: a short life */

static void note_shorts(struct sockaddr *dst, int n)
{
	for (int i = 0; i < n; i++)
		uls_short_note(dst, 2, QUICK);
}

static void test_run_and_release(void)
{
	struct sockaddr_in a = v4("127.0.0.1", 7000);

	uls_short_reset();
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
	note_shorts(SA(a), ULS_SHORT_RUN - 1);
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
	note_shorts(SA(a), 1);
	CHECK_INT(uls_short_skip(SA(a)), ==, 1);
	/* More short ones keep it so. */
	note_shorts(SA(a), 10);
	CHECK_INT(uls_short_skip(SA(a)), ==, 1);
	/* One with as many units as the threshold is not short. */
	uls_short_note(SA(a), (uint32_t)uls_cfg.short_calls, QUICK);
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
	note_shorts(SA(a), ULS_SHORT_RUN);
	CHECK_INT(uls_short_skip(SA(a)), ==, 1);
	/* Nor is one that lived long, however few its units. */
	uls_short_note(SA(a), 0, ULS_SHORT_LIFE_NS);
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
	/* A long one in the middle of a run starts it again. */
	note_shorts(SA(a), ULS_SHORT_RUN - 1);
	uls_short_note(SA(a), 100, QUICK);
	note_shorts(SA(a), ULS_SHORT_RUN - 1);
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
}

static void test_destinations_apart(void)
{
	struct sockaddr_in a = v4("127.0.0.1", 7000), port = v4("127.0.0.1", 7001),
			   addr = v4("127.0.0.2", 7000);
	struct sockaddr_in6 six = {.sin6_family = AF_INET6, .sin6_port = htons(7000)};
	struct sockaddr_un_like {
		sa_family_t family;
		char path[20];
	} unix_dst = {AF_UNIX, "/tmp/x"};

	uls_short_reset();
	six.sin6_addr.s6_addr[15] = 1;
	note_shorts(SA(a), ULS_SHORT_RUN);
	CHECK_INT(uls_short_skip(SA(a)), ==, 1);
	CHECK_INT(uls_short_skip(SA(port)), ==, 0);
	CHECK_INT(uls_short_skip(SA(addr)), ==, 0);
	CHECK_INT(uls_short_skip(SA(six)), ==, 0);
	note_shorts(SA(six), ULS_SHORT_RUN);
	CHECK_INT(uls_short_skip(SA(six)), ==, 1);
	/* Only Internet addresses are remembered. */
	note_shorts((struct sockaddr *)&unix_dst, ULS_SHORT_RUN);
	CHECK_INT(uls_short_skip((struct sockaddr *)&unix_dst), ==, 0);
}

static void test_least_recent_forgotten(void)
{
	struct sockaddr_in first = v4("127.0.0.1", 6000), kept = v4("127.0.0.1", 6001);

	uls_short_reset();
	note_shorts(SA(first), ULS_SHORT_RUN);
	note_shorts(SA(kept), ULS_SHORT_RUN);
	/* ULS_SHORT_DESTS - 1 others, with kept looked at in between: first goes. */
	for (int i = 0; i < ULS_SHORT_DESTS - 1; i++) {
		struct sockaddr_in o = v4("127.0.1.1", (uint16_t)(10000 + i));
		note_shorts(SA(o), 1);
		CHECK_INT(uls_short_skip(SA(kept)), ==, 1);
	}
	CHECK_INT(uls_short_skip(SA(first)), ==, 0);
	CHECK_INT(uls_short_skip(SA(kept)), ==, 1);
	/* A long connection to a destination never seen takes no place. */
	uls_short_reset();
	note_shorts(SA(kept), ULS_SHORT_RUN);
	for (int i = 0; i < 2 * ULS_SHORT_DESTS; i++) {
		struct sockaddr_in o = v4("127.0.1.1", (uint16_t)(10000 + i));
		uls_short_note(SA(o), 500, QUICK);
	}
	CHECK_INT(uls_short_skip(SA(kept)), ==, 1);
}

static void test_off(void)
{
	struct sockaddr_in a = v4("127.0.0.1", 7000);
	int saved = uls_cfg.short_calls;

	uls_short_reset();
	uls_cfg.short_calls = 0;
	note_shorts(SA(a), 2 * ULS_SHORT_RUN);
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
	uls_cfg.short_calls = saved;
	/* Nothing was learned while off. */
	CHECK_INT(uls_short_skip(SA(a)), ==, 0);
}

static void test_units(void)
{
	uint32_t w = 0;

	/* A turn is a unit: the first call, then each change of direction. */
	w = uls_short_turn(w, 0);
	CHECK_U64(uls_short_units(w, 0), ==, 1);
	w = uls_short_turn(w, 1);
	CHECK_U64(uls_short_units(w, 0), ==, 2);
	/* Another call in the same direction is an eighth: one answer in nine reads. */
	for (int i = 0; i < 7; i++)
		w = uls_short_turn(w, 1);
	CHECK_U64(uls_short_units(w, 0), ==, 2);
	w = uls_short_turn(w, 1);
	CHECK_U64(uls_short_units(w, 0), ==, 3);
	w = uls_short_turn(w, 0);
	CHECK_U64(uls_short_units(w, 0), ==, 4);
	/* A first call that receives is a turn too. */
	CHECK_U64(uls_short_units(uls_short_turn(0, 1), 0), ==, 1);
	/* Bytes: one unit per 64 KiB moved in all. */
	CHECK_U64(uls_short_units(w, 65535), ==, 4);
	CHECK_U64(uls_short_units(w, 65536), ==, 5);
	CHECK_U64(uls_short_units(w, 10 << 16), ==, 14);
	CHECK_U64(uls_short_units(w, UINT64_MAX), ==, ULS_SHORT_CALLS_MAX);
	/* Both saturate. */
	for (int i = 0; i < 2 * ULS_SHORT_CALLS_MAX + 10; i++)
		w = uls_short_turn(w, (unsigned)i & 1);
	CHECK_U64(uls_short_units(w, 0), ==, ULS_SHORT_CALLS_MAX);
	for (int i = 0; i < 10 * ULS_SHORT_CALLS_MAX; i++)
		w = uls_short_turn(w, 1);
	CHECK_U64(uls_short_units(w, 0), ==, ULS_SHORT_CALLS_MAX);
	CHECK_U64(uls_short_units(w, UINT64_MAX), ==, ULS_SHORT_CALLS_MAX);
}

/* A loopback connection with one byte each way: two data segments, as the kernel counts. */
static void test_kernel_units(void)
{
	struct sockaddr_in a = v4("127.0.0.1", 0);
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s;
	char b;

	CHECK(l >= 0 && c >= 0);
	CHECK_INT(bind(l, SA(a), sizeof(a)), ==, 0);
	CHECK_INT(listen(l, 1), ==, 0);
	CHECK_INT(getsockname(l, SA(a), &len), ==, 0);
	CHECK_INT(connect(c, SA(a), sizeof(a)), ==, 0);
	s = accept(l, NULL, NULL);
	CHECK(s >= 0);
	CHECK_U64(uls_short_kernel_units(c), ==, 0);
	CHECK_INT(write(c, "q", 1), ==, 1);
	CHECK_INT(read(s, &b, 1), ==, 1);
	CHECK_INT(write(s, "a", 1), ==, 1);
	CHECK_INT(read(c, &b, 1), ==, 1);
	CHECK_U64(uls_short_kernel_units(c), ==, 2);
	CHECK_U64(uls_short_kernel_units(l), ==, 0);
	/* One answer of 256 KiB more, read in pieces: one turn, and one unit per 64 KiB. */
	static char big[256 << 10];
	CHECK_INT(write(c, "q", 1), ==, 1);
	CHECK_INT(read(s, &b, 1), ==, 1);
	size_t got = 0;
	CHECK_INT(write(s, big, sizeof(big)), ==, (int)sizeof(big));
	while (got < sizeof(big)) {
		ssize_t n = read(c, big, 8192);
		CHECK(n > 0);
		got += (size_t)n;
	}
	/* 2 for the first exchange, 2 for the second (its answer may be several segments:
	 * one more where in and out differ), 4 for its 256 KiB. */
	uint32_t u = uls_short_kernel_units(c);
	CHECK_U64(u, >=, 8);
	CHECK_U64(u, <=, 9);
	/* Not a TCP socket: the kernel cannot tell, and that counts as long. */
	CHECK_U64(uls_short_kernel_units(-1), ==, UINT32_MAX);
	close(s);
	close(c);
	close(l);
}

int main(void)
{
	uls_libc_init();
	uls_config_load();
	CHECK_INT(uls_cfg.short_calls, ==, ULS_SHORT_CALLS_DEFAULT);
	test_units();
	test_run_and_release();
	test_destinations_apart();
	test_least_recent_forgotten();
	test_off();
	test_kernel_units();
	return CHECK_PASS;
}
