/* SPDX-License-Identifier: MIT */
/*
 * The fabric endpoint (src/transport/fabric/endpoint.h) on libfabric's software
 * providers, between two processes of this host on 127.0.0.1: libfabric is mapped only
 * once an endpoint opens; tagged messages of every size up to 64 KiB arrive whole, in
 * order, with their tags, and a receive posted for one tag never takes another's; a
 * receiver that sleeps on the completion queue's wait descriptor (tcp;ofi_rxm) wakes for
 * a message, and one without a descriptor (udp;ofi_rxd) is told so and polls. Messages
 * travel from and into the slots of registered pools (pool.h), whose rules are checked
 * too: every slot once, none twice, a double or foreign give-back refused, within the
 * memlock budget. Where the endpoint reports sources (FI_SOURCE), each message names its
 * sender's entry in the address vector, and one from a process never added (a stranger
 * that knows the address) names none, which is what the transport's check of a message
 * against its connection's peer rests on.
 *
 * usage: test_fabric_ep [PROVIDER...]   (default: tcp;ofi_rxm udp;ofi_rxd)
 * net passes too when named, but its endpoint leaks inside libfabric 1.17 (21 reports of
 * LeakSanitizer, with or without sources asked), which the ASan run of ctest would fail.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "os/libc.h"
#include "transport/fabric/endpoint.h"
#include "transport/fabric/lib.h"
#include "transport/fabric/pool.h"

#define ROUNDS 200
#define MAX_LEN (64u << 10)
#define TAG_DATA 0x5eed000000000000ull
#define TAG_OTHER 0x0a7e000000000000ull
#define TAG_STRANGER 0x0bad000000000000ull

/* Is a file whose name contains what mapped in this process? */
static int mapped(const char *what)
{
	char line[512];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	CHECK(f != NULL);
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

/* Length and contents of message i: every size class, each byte a function of (i, k). */
static size_t len_of(unsigned i)
{
	static const size_t sizes[] = {1, 7, 64, 100, 1000, 4096, 8191, 16384, 40000, MAX_LEN};
	return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

static void fill(uint8_t *p, size_t n, unsigned i)
{
	for (size_t k = 0; k < n; k++)
		p[k] = (uint8_t)(i * 131 + k * 7 + (k >> 8));
}

/* Waits for the next completion: asleep on the wait descriptor where there is one. Its
 * sender's address goes to *from where from is not NULL and e reports sources. */
static void next_completion(struct uls_fab_ep *e, struct fi_cq_tagged_entry *c, int *slept,
			    fi_addr_t *from)
{
	void *err_ctx = NULL;
	time_t deadline = time(NULL) + 30; /* a peer gone never answers: fail, never spin on */

	for (;;) {
		CHECK(time(NULL) < deadline);
		ssize_t r = uls_fab_ep_poll(e, c, 1, from, &err_ctx);
		if (r == 1)
			return;
		if (r < 0)
			check_context("completion error %zd: %s", r, uls_fab_err((int)r));
		CHECK_INT(r, ==, 0);
		int w = uls_fab_ep_wait(e, 5000);
		if (e->wait_fd >= 0) {
			CHECK_INT(w, >=, 0);
			*slept += w == 1;
		} else {
			CHECK_INT(w, ==, -FI_ENOSYS);
		}
	}
}

/* Sends len bytes of data from a slot of tx, and waits until the slot is free again. */
static void send_all(struct uls_fab_ep *e, struct uls_fab_pool *tx, const void *data,
		     size_t len, fi_addr_t to, uint64_t tag)
{
	struct fi_context ctx;
	struct fi_cq_tagged_entry c;
	ssize_t r;
	int slept = 0;
	uint32_t idx;
	void *buf = uls_fab_pool_get(tx, &idx);

	CHECK(buf != NULL);
	memcpy(buf, data, len);
	while ((r = uls_fab_ep_tsend(e, buf, len, tx->desc, to, tag, &ctx)) == -FI_EAGAIN) {
		void *err_ctx;
		CHECK(uls_fab_ep_poll(e, &c, 1, NULL, &err_ctx) >= 0);
	}
	CHECK_INT(r, ==, 0);
	/* The send's own completion: the buffer is free again. */
	for (;;) {
		next_completion(e, &c, &slept, NULL);
		if (c.op_context == &ctx)
			break;
	}
	CHECK(c.flags & FI_SEND);
	CHECK_EQ(uls_fab_pool_put(tx, idx), 0);
}

/* Receives one message of tag into a slot of rx, which must be exactly want bytes, and
 * copies it to buf; its sender's address to *from as next_completion does. */
static void recv_one(struct uls_fab_ep *e, struct uls_fab_pool *rx, uint8_t *buf, size_t want,
		     uint64_t tag, int *slept, fi_addr_t *from)
{
	struct fi_context ctx;
	struct fi_cq_tagged_entry c;
	ssize_t r;
	uint32_t idx;
	uint8_t *slot = uls_fab_pool_get(rx, &idx);

	CHECK(slot != NULL);
	while ((r = uls_fab_ep_trecv(e, slot, rx->slot_size, rx->desc, FI_ADDR_UNSPEC, tag, 0,
				     &ctx)) == -FI_EAGAIN) {
		void *err_ctx;
		CHECK(uls_fab_ep_poll(e, &c, 1, NULL, &err_ctx) >= 0);
	}
	CHECK_INT(r, ==, 0);
	next_completion(e, &c, slept, from);
	CHECK(c.op_context == &ctx);
	CHECK(c.flags & FI_RECV);
	CHECK_U64(c.tag, ==, tag);
	CHECK_U64(c.len, ==, want);
	CHECK(c.buf == NULL || c.buf == slot);
	memcpy(buf, slot, want);
	CHECK_EQ(uls_fab_pool_put(rx, idx), 0);
}

/* A pool of both kinds for e, one slot as large as the largest message. */
static void pools_open(struct uls_fab_ep *e, struct uls_fab_pool *tx, struct uls_fab_pool *rx)
{
	char why[160];

	if (uls_fab_pool_open(tx, e, MAX_LEN, 2, FI_SEND, why, sizeof(why)) < 0 ||
	    uls_fab_pool_open(rx, e, MAX_LEN, 2, FI_RECV, why, sizeof(why)) < 0)
		check_context("pool: %s", why);
	CHECK(tx->base != NULL && rx->base != NULL);
	/* The provider needs its buffers registered: then the pools are. */
	if (e->info->domain_attr->mr_mode & FI_MR_LOCAL)
		CHECK(tx->desc != NULL && rx->desc != NULL);
}

/* The pool's own rules, on a small one. */
static void pool_rules(struct uls_fab_ep *e)
{
	struct uls_fab_pool p;
	char why[160];
	uint8_t seen[8] = {0};
	uint32_t idx[8], extra;

	CHECK_INT(uls_fab_pool_open(&p, e, 100, 8, FI_RECV, why, sizeof(why)), ==, -1);
	CHECK_INT(uls_fab_pool_open(&p, e, 4096, 0, FI_RECV, why, sizeof(why)), ==, -1);
	CHECK_EQ(uls_fab_pool_open(&p, e, 4096, 8, FI_RECV, why, sizeof(why)), 0);
	for (int i = 0; i < 8; i++) {
		uint8_t *s = uls_fab_pool_get(&p, &idx[i]);
		CHECK(s != NULL);
		CHECK_U64(idx[i], <, 8);
		CHECK(!seen[idx[i]]);
		seen[idx[i]] = 1;
		CHECK_INT(uls_fab_pool_index(&p, s), ==, (int)idx[i]);
		memset(s, i, 4096); /* each slot is its own 4 KiB */
	}
	CHECK(uls_fab_pool_get(&p, &extra) == NULL);
	CHECK_INT(uls_fab_pool_index(&p, (uint8_t *)uls_fab_slot(&p, 1) + 1), ==, -1);
	CHECK_INT(uls_fab_pool_index(&p, &extra), ==, -1);
	CHECK_EQ(uls_fab_pool_put(&p, idx[3]), 0);
	CHECK_INT(uls_fab_pool_put(&p, idx[3]), ==, -1); /* twice */
	CHECK_INT(uls_fab_pool_put(&p, 8), ==, -1);       /* not a slot */
	CHECK(uls_fab_pool_get(&p, &extra) != NULL);
	CHECK_U64(extra, ==, idx[3]);
	uls_fab_pool_close(&p);
	CHECK(p.base == NULL);

	struct rlimit rl;
	CHECK_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	size_t rx = uls_fab_pool_budget(1), tx = uls_fab_pool_budget(0);
	CHECK_U64(rx, >=, 64u << 10);
	CHECK_U64(tx, >=, 64u << 10);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= (1u << 20)) {
		CHECK_U64(rx, <=, rl.rlim_cur / 4);
		CHECK_U64(tx, <=, rl.rlim_cur / 8);
	}
}

/* e's address, told over sock. */
static void give_addr(struct uls_fab_ep *e, int sock)
{
	uint64_t n = e->addr_len;

	CHECK_INT(write(sock, &n, sizeof(n)), ==, (int)sizeof(n));
	CHECK_INT(write(sock, e->addr, e->addr_len), ==, (int)e->addr_len);
}

/* The address told over sock, added to e's address vector. */
static fi_addr_t take_addr(struct uls_fab_ep *e, int sock)
{
	uint8_t peer[ULS_FAB_ADDR_MAX];
	uint64_t n;
	fi_addr_t a;

	CHECK_INT(read(sock, &n, sizeof(n)), ==, (int)sizeof(n));
	CHECK_U64(n, <=, sizeof(peer));
	CHECK_INT(read(sock, peer, n), ==, (int)n);
	CHECK_EQ(uls_fab_ep_insert(e, peer, n, &a), 0);
	return a;
}

/* The two processes swap endpoint addresses over a socket pair and add each other. */
static fi_addr_t meet(struct uls_fab_ep *e, int sock)
{
	give_addr(e, sock);
	return take_addr(e, sock);
}

/* fn(prov, its end of a socket pair) in a child that dies with this process (fn never
 * returns); *sock is this side's end. */
static pid_t spawn(void (*fn)(const char *, int), const char *prov, int *sock)
{
	int sv[2];

	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(sv[0]);
		fn(prov, sv[1]);
		_exit(1); /* fn ends the child itself */
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

/* The child: sends ROUNDS messages, each preceded by one of another tag, then waits for
 * the parent's answer. */
static void sender(const char *prov, int sock)
{
	struct uls_fab_ep e;
	struct uls_fab_pool tx, rx;
	char why[160];
	uint8_t *buf = malloc(MAX_LEN);
	int slept = 0;

	CHECK(buf != NULL);
	if (uls_fab_ep_open(&e, prov, "127.0.0.1", why, sizeof(why)) < 0)
		check_context("child: %s", why);
	CHECK(e.ep != NULL);
	pools_open(&e, &tx, &rx);
	fi_addr_t parent = meet(&e, sock);
	for (unsigned i = 0; i < ROUNDS; i++) {
		size_t n = len_of(i);
		fill(buf, 16, i + 100000);
		send_all(&e, &tx, buf, 16, parent, TAG_OTHER | i);
		fill(buf, n, i);
		send_all(&e, &tx, buf, n, parent, TAG_DATA | i);
	}
	recv_one(&e, &rx, buf, 5, TAG_DATA, &slept, NULL);
	CHECK_MEM(buf, "done!", 5);
	uls_fab_pool_close(&tx);
	uls_fab_pool_close(&rx);
	uls_fab_ep_close(&e);
	free(buf);
	exit(0);
}

/*
 * A third process that knows the receiver's address but is not in its address vector:
 * sends one message of TAG_STRANGER, then waits for the receiver's word that it arrived.
 */
static void stranger(const char *prov, int sock)
{
	struct uls_fab_ep e;
	struct uls_fab_pool tx, rx;
	uint8_t ok;
	char why[160];

	if (uls_fab_ep_open(&e, prov, "127.0.0.1", why, sizeof(why)) < 0)
		check_context("stranger: %s", why);
	CHECK(e.ep != NULL);
	pools_open(&e, &tx, &rx);
	send_all(&e, &tx, "stranger", 8, take_addr(&e, sock), TAG_STRANGER);
	CHECK_INT(read(sock, &ok, 1), ==, 1);
	uls_fab_pool_close(&tx);
	uls_fab_pool_close(&rx);
	uls_fab_ep_close(&e);
	/* Forked from the parent's run: its buffers and unflushed output are the parent's
	 * (LeakSanitizer would count them here, and stdio print them twice). */
	_exit(0);
}

/* Where the endpoint reports sources: a message from a process it never added says so
 * (FI_ADDR_NOTAVAIL), which is how the transport tells it from a connection's peer. */
static void check_stranger(const char *prov, struct uls_fab_ep *e, struct uls_fab_pool *rx)
{
	int sock, status, slept = 0;
	uint8_t buf[8];
	fi_addr_t from = 0; /* the child's entry: a provider that wrote nothing fails */
	pid_t pid = spawn(stranger, prov, &sock);

	give_addr(e, sock);
	recv_one(e, rx, buf, 8, TAG_STRANGER, &slept, &from);
	CHECK_MEM(buf, "stranger", 8);
	CHECK_U64(from, ==, FI_ADDR_NOTAVAIL);
	CHECK_INT(write(sock, "k", 1), ==, 1);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(sock);
	printf("%s: a stranger's message arrives with no source\n", prov);
}

static void run(const char *prov)
{
	struct uls_fab_ep e;
	char why[160];
	int sock, status, slept = 0;
	uint8_t *buf, *want, *other;
	/* Two processes as two programs would be: each loads libfabric for itself. */
	pid_t pid = spawn(sender, prov, &sock);

	buf = malloc(MAX_LEN);
	want = malloc(MAX_LEN);
	other = malloc(16);
	CHECK(buf && want && other);
	if (uls_fab_ep_open(&e, prov, "127.0.0.1", why, sizeof(why)) < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		free(buf);
		free(want);
		free(other);
		if (strstr(why, "no provider fits"))
			CHECK_SKIP("provider %s: %s", prov, why);
		check_context("parent: %s", why);
		CHECK(!"uls_fab_ep_open");
	}
	CHECK(uls_fab_loaded());
	CHECK(mapped("libfabric"));
	CHECK(strstr(prov, e.prov) != NULL || strstr(e.prov, prov) != NULL);
	printf("%s: provider %s, fabric %s, wait fd %d, address %zu bytes, mr_mode %#llx, "
	       "sources %s, untagged messages %s, inject %zu\n", prov, e.prov, e.fabric_name,
	       e.wait_fd, e.addr_len, (unsigned long long)e.info->domain_attr->mr_mode,
	       e.source ? "reported" : "not", e.msg ? "too" : "not", e.inject_size);
	/* Every provider here has untagged messages besides tagged ones (protocol.md 9.2),
	 * asked last with what was taken before; only shm's injects are taken. */
	CHECK(e.msg);
	CHECK(e.inject_size == 0 || strcmp(e.prov, "shm") == 0);
	pool_rules(&e);
	struct uls_fab_pool tx, rx;
	pools_open(&e, &tx, &rx);
	fi_addr_t child = meet(&e, sock);
	/*
	 * Receives only of TAG_DATA | i, in order: each message of the other tag sent before
	 * it must wait for its own receive (posted after), never satisfy this one.
	 */
	for (unsigned i = 0; i < ROUNDS; i++) {
		size_t n = len_of(i);
		fi_addr_t from = FI_ADDR_NOTAVAIL;
		recv_one(&e, &rx, buf, n, TAG_DATA | i, &slept, &from);
		fill(want, n, i);
		CHECK_MEM(buf, want, n);
		if (e.source) /* each message names its sender: the child's entry */
			CHECK_U64(from, ==, child);
		recv_one(&e, &rx, other, 16, TAG_OTHER | i, &slept, NULL);
		fill(want, 16, i + 100000);
		CHECK_MEM(other, want, 16);
	}
	if (e.source)
		check_stranger(prov, &e, &rx);
	send_all(&e, &tx, "done!", 5, child, TAG_DATA);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (e.wait_fd >= 0)
		CHECK_INT(slept, >, 0); /* the receiver did sleep in the kernel and was woken */
	printf("%s: %d messages, woke from the wait fd %d times\n", prov, 2 * ROUNDS, slept);
	uls_fab_pool_close(&tx);
	uls_fab_pool_close(&rx);
	uls_fab_ep_close(&e);
	close(sock);
	free(buf);
	free(want);
	free(other);
}

int main(int argc, char **argv)
{
	static const char *defaults[] = {"tcp;ofi_rxm", "udp;ofi_rxd"};
	const char **provs = argc > 1 ? (const char **)argv + 1 : defaults;
	int n = argc > 1 ? argc - 1 : 2;

	/* Nothing has loaded libfabric: only an endpoint does (a process that never makes an
	 * inter-host connection never maps it), checked in each run's process. */
	uls_libc_init();
	for (int i = 0; i < n; i++) {
		/* Each provider in a process of its own, which has not loaded libfabric. */
		int status;
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			CHECK(!uls_fab_loaded());
			CHECK(!mapped("libfabric"));
			run(provs[i]);
			exit(CHECK_PASS);
		}
		CHECK_EQ(waitpid(pid, &status, 0), pid);
		CHECK(WIFEXITED(status));
		if (WEXITSTATUS(status) == CHECK_SKIPPED)
			printf("%s: skipped\n", provs[i]);
		else
			CHECK_INT(WEXITSTATUS(status), ==, CHECK_PASS);
	}
	return CHECK_PASS;
}
