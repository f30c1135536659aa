/* SPDX-License-Identifier: MIT */
/*
 * The offer board: which local ports a process of this user has lately offered a segment
 * to, so that a server skips its look for one (a sock_diag query and an open of the file:
 * three system calls, about a tenth of a short connection's cost) when no client of its
 * user can have made one.
 *
 * One small file per user, /dev/shm/ulsock-offers.<uid>, mode 0600, mapped by that
 * user's ulsock processes for their whole life. A slot per port (hashed): how many offers
 * are waiting for their server's look, and when the last one was made. A client counts
 * its offer before it calls connect(), so the server that accepts the connection sees the
 * count (the kernel's accept queue orders the two); the server that finds the segment
 * takes the count back, and so does a client whose connect() failed.
 *
 * The board only decides whether a server looks: every segment it finds is still proven
 * by sock_diag and its identity, as before. A count that never comes back (a client
 * killed, a server without ulsock, a server of another user) makes its slot's servers
 * look, as they always did, until ULS_OFFER_FRESH_S pass without a new offer there. What
 * a wrong board costs is speed, never a byte: a server that skips a look leaves the
 * client's offer untaken, and the client then moves on to kernel TCP as it does with a
 * server without ulsock.
 *
 * Processes of other users never share a board: a server that trusts other users
 * (ULSOCK_TRUST_UIDS) always looks. Any process of the user can write the board; a
 * file not made as this module makes it (another owner, group or others may write, a
 * bad header) is not used, and then a server always looks. A file shrunk under the
 * mapping is cut by the segment guard (guard.h): it reads as zeros and servers look.
 */
#ifndef ULS_OFFERS_H
#define ULS_OFFERS_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#define ULS_OFFER_SLOTS 1024u
#define ULS_OFFER_FRESH_S 10u

/*
 * The file's layout: an ABI between the user's processes, which may run different builds
 * (docs/protocol.md, section 3). Every field can be written by any of them: read as a
 * hint only.
 */
#define ULS_OFFER_MAGIC 0x0031464f534c55ULL /* "ULSOF1" */
#define ULS_OFFER_VERSION 1u

struct uls_offer_slot {
	_Atomic uint32_t pending; /* offers to the slot's ports not yet found by a server */
	_Atomic uint32_t stamp;   /* CLOCK_MONOTONIC seconds + 1 at the last offer; 0: none */
};

struct uls_offer_board {
	/* Written by whoever finds the file new (all write the same values, magic last). */
	_Atomic uint32_t version;
	_Atomic uint32_t slots; /* ULS_OFFER_SLOTS */
	_Atomic uint32_t uid;   /* the user whose board this is */
	_Atomic uint32_t pad0;
	_Atomic uint64_t magic;
	uint8_t pad1[64 - 24];
	struct uls_offer_slot slot[ULS_OFFER_SLOTS];
};

_Static_assert(sizeof(struct uls_offer_board) == 64 + 8 * ULS_OFFER_SLOTS, "board layout");
_Static_assert(ULS_OFFER_SLOTS == 1u << 10, "uls_offer_slot_index takes 10 bits");

/* The slot of a port: a multiplicative hash's top 10 bits. */
static inline uint32_t uls_offer_slot_index(uint16_t port)
{
	return ((uint32_t)port * 0x9e3779b1u) >> 22;
}

/* The reason of a server that did not look. */
#define ULS_OFFER_NONE_REASON \
	"no segment offered to this port by this user (no ulsock, another user, or short connections)"

/* A client offers a segment to dst: counted before its connect(). */
void uls_offer_made(const struct sockaddr *dst);

/* The offer to dst is answered: its server found the segment, or the connect failed. */
void uls_offer_done(const struct sockaddr *dst);

/* Should a server that accepted a local connection on `self` look for a segment?
 * 1: an offer may be waiting (or the board cannot tell); 0: none can be. */
int uls_offer_waiting(const struct sockaddr *self);

/* Tests: unmaps this process's board and keeps it in dir from now on (NULL: /dev/shm).
 * Not thread-safe: no other thread may use the board meanwhile. */
void uls_offer_reset(const char *dir);

#endif
