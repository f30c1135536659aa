/* SPDX-License-Identifier: MIT */
/*
 * A client's offer on the board (docs/protocol.md, section 3) is taken back exactly once,
 * whichever of its server and itself answers it first: the server that finds the segment
 * at its accept, or the client that moves to kernel TCP for good (it saw the server's
 * data on TCP before the server attached, or it closed). Both at once is the case that
 * matters: a server between finding the segment and attaching while the client settles.
 * Until the segment's offer word (shm_abi.h, struct uls_seg_both), the client took its
 * offer back whenever the server had not said ATTACHED yet, and a server in that window
 * had taken it too: two off the count, one of them another client's offer, which its
 * server then skipped ("no segment offered to this port by this user"), so that
 * connection stayed on kernel TCP (CI's test_nginx.py::test_wrk[both-close-shm], now and
 * then).
 *
 * One process holds both ends (conn_pair.h). Another offer to the listener's port stays
 * counted throughout, so a count taken twice shows: after every connection the slot must
 * hold exactly that one. A second thread settles the client (uls_conn_set_kernel, as
 * shm/io.c does on a data byte from a server that has not attached) while the main thread
 * accepts, at three moments: the instant the board's count falls (the server took the
 * offer and is about to attach), after a random spin (before, during or after the
 * server's look), and after the accept returned.
 */
#include <sched.h>
#include <sys/mman.h>

#include "conn_pair.h"
#include "os/cpu.h"
#include "transport/shm/offers.h"

#define ROUNDS 3000
#define RING_SMALL 4096u

static char dir[64], board_path[128];
static _Atomic uint32_t *pending; /* the listener's slot on the board */

static _Atomic(struct end *) to_settle;
static _Atomic int mode, accepted, settled;
static uint32_t armed; /* the count with the client's offer on it */

enum { AT_TAKE, AT_RANDOM, AT_AFTER, MODES };

static void *settler(void *arg)
{
	uint64_t rng = 0x0ffe12;

	(void)arg;
	for (;;) {
		struct end *e;
		while (!(e = atomic_load(&to_settle)))
			uls_cpu_relax();
		if (e == (struct end *)1)
			return NULL;
		switch (atomic_load(&mode)) {
		case AT_TAKE: /* bounded by the accept's end: a server that declined takes none */
			while (atomic_load(pending) == armed && !atomic_load(&accepted))
				;
			break;
		case AT_RANDOM:
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			for (uint64_t n = (rng >> 33) % 4000; n; n--)
				uls_cpu_relax();
			break;
		default:
			while (!atomic_load(&accepted))
				uls_cpu_relax();
		}
		uls_conn_set_kernel(e->c, e->fd, "test: the client settles");
		atomic_store(&to_settle, NULL);
		atomic_store(&settled, 1);
	}
}

/* Returns whether the server attached (it found the segment before the client settled). */
static int round_trip(int lfd, int m, uint32_t base)
{
	struct end cli = pair_connect(0, RING_SMALL, RING_SMALL);

	armed = atomic_load(pending);
	CHECK_INT(armed, ==, base + 1);
	CHECK_INT(atomic_load(&shm_of(cli.c)->seg.hdr->both.offer), ==, 1);
	atomic_store(&accepted, 0);
	atomic_store(&settled, 0);
	atomic_store(&mode, m);
	atomic_store(&to_settle, &cli);
	struct end srv = pair_accept(lfd, 0);
	atomic_store(&accepted, 1);
	while (!atomic_load(&settled))
		sched_yield();
	/* Answered once: the other offer is still counted, the client's is not. */
	CHECK_INT(atomic_load(pending), ==, base);
	CHECK_INT(atomic_load(&shm_of(cli.c)->seg.hdr->both.offer), ==, 0);
	int attached = srv.c->tp == &uls_shm_transport;
	pair_close(&srv);
	pair_close(&cli);
	CHECK_INT(atomic_load(pending), ==, base);
	pair_unlink_all();
	atomic_store(&pair_nseg, 0);
	return attached;
}

static void cleanup(void)
{
	if (getpid() == pair_main_pid) {
		unlink(board_path);
		rmdir(dir);
	}
}

int main(void)
{
	int attached[MODES] = {0};
	pthread_t t;

	pair_init("balanced");
	snprintf(dir, sizeof(dir), "/dev/shm/ulsock-test-offer.%d", (int)getpid());
	CHECK_EQ(mkdir(dir, 0700), 0);
	snprintf(board_path, sizeof(board_path), "%s/ulsock-offers.%u", dir, (unsigned)getuid());
	atexit(cleanup);
	uls_offer_reset(dir);
	int lfd = pair_listen();

	/* The other client's offer to the same port, never answered during the test. */
	uls_offer_made((struct sockaddr *)&pair_addr);
	int bfd = open(board_path, O_RDWR | O_CLOEXEC);
	CHECK(bfd >= 0);
	struct uls_offer_board *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED,
					 bfd, 0);
	CHECK(b != MAP_FAILED);
	close(bfd);
	pending = &b->slot[uls_offer_slot_index(ntohs(pair_addr.sin_port))].pending;
	uint32_t base = atomic_load(pending);
	CHECK_INT(base, ==, 1);

	CHECK_EQ(pthread_create(&t, NULL, settler, NULL), 0);
	for (int i = 0; i < ROUNDS; i++) {
		check_context("round %d, mode %d", i, i % MODES);
		pair_watchdog();
		attached[i % MODES] += round_trip(lfd, i % MODES, base);
	}
	atomic_store(&to_settle, (struct end *)1);
	pthread_join(t, NULL);
	check_context("%s", "");
	/* Which side answered depends on the order: say how often the server attached. */
	printf("server attached in %d, %d and %d of %d rounds each (settled at the take, at "
	       "random, after the accept)\n", attached[AT_TAKE], attached[AT_RANDOM],
	       attached[AT_AFTER], ROUNDS / MODES);
	munmap(b, sizeof(*b));
	close(lfd);
	return CHECK_PASS;
}
