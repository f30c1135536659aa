/* SPDX-License-Identifier: MIT */
#include "offers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "../../core/config.h"
#include "../../core/handshake.h"
#include "../../core/log.h"
#include "../../os/cpu.h"
#include "../../os/libc.h"

#define BOARD_NONE ((struct uls_offer_board *)1) /* this process cannot use a board for none_uid */

/*
 * A board removed while mapped (`rm`, logind's RemoveIPC at the user's logout) is made
 * again by the next process that needs one; those that still map the old one would not
 * see each other's offers. So a process checks once a second that its board still has
 * the name, and maps the new one, at most BOARD_REMAPS times (the old mapping stays: a
 * thread may still read it); after that it uses none, and its servers look every time.
 */
#define BOARD_REMAPS 8

static _Atomic(struct uls_offer_board *) board_at;
static _Atomic uint32_t none_uid;
static _Atomic uint64_t board_ino;    /* the inode board_at was mapped from */
static _Atomic uint32_t board_seen;   /* now_s() when the name was last checked */
static _Atomic uint32_t board_remaps;
static const char *board_dir = "/dev/shm"; /* another only in tests, before any use */

static uint32_t now_s(void)
{
	return (uint32_t)(uls_now_ns() / 1000000000u) + 1;
}

static struct uls_offer_slot *slot_of(struct uls_offer_board *b, const struct sockaddr *sa)
{
	return &b->slot[uls_offer_slot_index(uls_addr_port(sa))];
}

/* A new file is zeros: give it its header. A header of another layout: not ours. */
static int board_valid(struct uls_offer_board *b, uid_t uid)
{
	if (atomic_load_explicit(&b->magic, memory_order_acquire) == 0) {
		atomic_store(&b->version, ULS_OFFER_VERSION);
		atomic_store(&b->slots, ULS_OFFER_SLOTS);
		atomic_store(&b->uid, (uint32_t)uid);
		atomic_store_explicit(&b->magic, ULS_OFFER_MAGIC, memory_order_release);
	}
	return atomic_load_explicit(&b->magic, memory_order_acquire) == ULS_OFFER_MAGIC &&
	       atomic_load(&b->version) == ULS_OFFER_VERSION &&
	       atomic_load(&b->slots) == ULS_OFFER_SLOTS && atomic_load(&b->uid) == (uint32_t)uid;
}

static void board_path(char *buf, size_t len, uid_t uid)
{
	snprintf(buf, len, "%s/ulsock-offers.%u", board_dir, (unsigned)uid);
}

/* Opens (or makes) and maps this user's board; NULL when it cannot be used. */
static struct uls_offer_board *board_map(uid_t uid, uint64_t *ino)
{
	char path[256];
	struct stat st;
	void *map;
	int fd;

	board_path(path, sizeof(path), uid);
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		uls_dbg("offer board %s: %s", path, strerror(errno));
		return NULL;
	}
	/* Only a file this user made as we make it: no one else may write or shrink it. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
	    (st.st_mode & 077) != 0 ||
	    (st.st_size < (off_t)sizeof(struct uls_offer_board) &&
	     ftruncate(fd, sizeof(struct uls_offer_board)) < 0)) {
		uls_dbg("offer board %s not used", path);
		uls_libc.close(fd);
		return NULL;
	}
	*ino = (uint64_t)st.st_ino;
	map = mmap(NULL, sizeof(struct uls_offer_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	uls_libc.close(fd);
	if (map == MAP_FAILED)
		return NULL;
	/* A process of the user that shrinks the file cuts the mapping: it then reads 0. */
	if (uls_guard_note(map, sizeof(struct uls_offer_board)) < 0) {
		munmap(map, sizeof(struct uls_offer_board));
		return NULL;
	}
	if (!board_valid(map, uid)) {
		uls_dbg("offer board %s has another layout", path);
		uls_guard_forget(map);
		munmap(map, sizeof(struct uls_offer_board));
		return NULL;
	}
	return map;
}

/* Once a second, one caller asks: is the board's name still the mapped file's? */
static int board_renamed(uid_t uid)
{
	uint32_t now = now_s(), seen = atomic_load_explicit(&board_seen, memory_order_relaxed);
	char path[256];
	struct stat st;

	if (now == seen || !atomic_compare_exchange_strong(&board_seen, &seen, now))
		return 0;
	board_path(path, sizeof(path), uid);
	return stat(path, &st) < 0 || (uint64_t)st.st_ino != atomic_load(&board_ino);
}

/*
 * This process's board for its current uid, mapped at first use. Lock-free (connect and
 * accept may run in signal handlers): two threads that map it at once keep the first.
 * After a change of uid the old mapping stays (a thread may still read it); it is small.
 */
static struct uls_offer_board *board_get(void)
{
	uid_t uid = uls_uid();
	struct uls_offer_board *b = atomic_load_explicit(&board_at, memory_order_acquire);
	struct uls_offer_board *mine;
	uint64_t ino = 0;

	if (b == BOARD_NONE && atomic_load_explicit(&none_uid, memory_order_relaxed) == uid)
		return NULL;
	if (b && b != BOARD_NONE) {
		uint32_t owner = atomic_load(&b->uid); /* a file shrunk since: cut here */

		if (uls_guard_cut_at(b))
			return NULL; /* for good: the board reads zeros now */
		if (owner == (uint32_t)uid && !board_renamed(uid))
			return b;
	}
	mine = atomic_fetch_add(&board_remaps, 1) < BOARD_REMAPS ? board_map(uid, &ino) : NULL;
	if (!mine) {
		atomic_store(&none_uid, (uint32_t)uid);
		atomic_store(&board_at, BOARD_NONE);
		return NULL;
	}
	if (!atomic_compare_exchange_strong(&board_at, &b, mine)) {
		uls_guard_forget(mine);
		munmap(mine, sizeof(struct uls_offer_board));
		return b == BOARD_NONE ? NULL : b;
	}
	atomic_store(&board_ino, ino);
	atomic_store(&board_seen, now_s());
	return mine;
}

void uls_offer_made(const struct sockaddr *dst)
{
	struct uls_offer_board *b = board_get();
	struct uls_offer_slot *s;

	if (!b)
		return;
	s = slot_of(b, dst);
	/* The stamp first: a server that sees the count sees a stamp at least this new. */
	uint32_t now = now_s();
	/* Acquire: a count read here that another offer added (release) comes with that
	 * offer's stamp, which the exchange below then finds fresh. */
	uint32_t counted = atomic_load_explicit(&s->pending, memory_order_acquire);
	uint32_t was = atomic_exchange_explicit(&s->stamp, now, memory_order_relaxed);
	/*
	 * Offers counted before a stamp that had faded are over (uls_offer_waiting ignores
	 * them): the count starts again, or counts nobody took back (a client killed, a
	 * connect refused later) would make the slot's servers look for 10 s after every
	 * new offer, for good. Only a stamp that is old: another client's offer may have
	 * stamped the next second meanwhile (the difference is then negative), and its count
	 * must stay. The count is cleared only if nobody changed it since it was read before
	 * the stamp: an offer counted in between keeps it.
	 */
	if ((int32_t)(now - was) > (int32_t)ULS_OFFER_FRESH_S)
		atomic_compare_exchange_strong_explicit(&s->pending, &counted, 0,
							memory_order_relaxed, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->pending, 1, memory_order_release);
}

void uls_offer_done(const struct sockaddr *dst)
{
	struct uls_offer_board *b = board_get();
	struct uls_offer_slot *s;
	uint32_t n;

	if (!b)
		return;
	s = slot_of(b, dst);
	n = atomic_load_explicit(&s->pending, memory_order_relaxed);
	while (n && !atomic_compare_exchange_weak_explicit(&s->pending, &n, n - 1,
							   memory_order_relaxed, memory_order_relaxed))
		;
}

/* A server trusting other users looks always: their offers are on their own boards. */
static int trusts_others(void)
{
	uid_t uid = uls_uid();

	for (int i = 0; i < uls_cfg.ntrusted; i++)
		if (uls_cfg.trusted[i] != uid)
			return 1;
	return 0;
}

int uls_offer_waiting(const struct sockaddr *self)
{
	struct uls_offer_board *b;
	struct uls_offer_slot *s;

	if (trusts_others() || !(b = board_get()))
		return 1;
	s = slot_of(b, self);
	if (!atomic_load_explicit(&s->pending, memory_order_acquire))
		return 0;
	/* Counts of offers nobody took (a client killed, a plain server) fade. */
	return now_s() - atomic_load_explicit(&s->stamp, memory_order_relaxed) <=
	       ULS_OFFER_FRESH_S;
}

void uls_offer_reset(const char *dir)
{
	struct uls_offer_board *b = atomic_exchange(&board_at, NULL);

	if (b && b != BOARD_NONE) {
		uls_guard_forget(b);
		munmap(b, sizeof(*b));
	}
	board_dir = dir ? dir : "/dev/shm";
	atomic_store(&board_remaps, 0);
}
