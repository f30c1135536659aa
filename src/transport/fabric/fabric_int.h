/* SPDX-License-Identifier: MIT */
/*
 * Internal to the fabric transport (docs/protocol.md, section 9): the state of a
 * connection, the process's endpoint and what its files share: proc.c (the endpoint, its
 * slots, progress and the dispatch of arrivals), setup.c (the gate, the directory and the
 * handshake) and io.c (the data path, readiness and close).
 *
 * Locking: one mutex per process, fab.mu, covers the endpoint (FI_THREAD_DOMAIN) and
 * every field of every connection below but the two TCP counters; tx_mu and rx_mu order a
 * connection's senders and receivers and own tx_tcp and rx_tcp. Order: tx_mu or rx_mu,
 * then fab.mu; nothing sleeps holding fab.mu.
 */
#ifndef ULS_FAB_INT_H
#define ULS_FAB_INT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../../core/conn.h"
#include "../../os/cpu.h"
#include "dir.h"
#include "endpoint.h"
#include "msg.h"
#include "pool.h"

/* The libfabric tag of a receive slot is its class (protocol.md 9.2). */
#define FAB_CLASS_HS ULS_FAB_CLASS_HANDSHAKE
#define FAB_CLASS_CONN ULS_FAB_CLASS_CONN
#define FAB_CLASS_BULK ULS_FAB_CLASS_BULK
#define FAB_HDR ULS_FAB_HDR_SIZE

/* Where the handshake of a connection stands. */
enum fab_hs {
	HS_CLI_CONNECTING, /* client: the kernel's connect has not completed yet */
	HS_CLI_DIR,        /* client: asking the server host's directory */
	HS_CLI_SENT,       /* client: CONNECT sent, waiting for ACCEPT (hs_wait_ns) */
	HS_CLI_ACCEPTED,   /* client: ACCEPT valid, the switch is this side's to make */
	HS_SRV_REG,        /* server: registered, waiting for CONNECT (hs_wait_ns) */
	HS_SRV_ACCEPTED,   /* server: ACCEPT sent, waiting for the client's SWITCH */
	HS_DONE,           /* both committed: each direction switches at its sender's will */
	HS_FAILED,         /* stays on TCP for `why` */
};

struct fab_conn {
	struct uls_conn *c;
	struct fab_conn *next;  /* the process's list (fab.conns) */
	struct fab_conn *hnext; /* its tag's bucket */
	int fd;                 /* a descriptor of the socket when it was set up */
	enum fab_hs hs;
	int announced;        /* HS_DONE, and the path was logged (fab_step) */
	uint64_t hs_since;    /* ns: when the handshake began */
	uint64_t hs_deadline; /* ns */
	char why[80];         /* HS_FAILED: why it stays on TCP */
	struct uls_fab_dirq dq;
	struct uls_fab_tuple tuple; /* this side's view (protocol.md 9.2) */
	uint8_t nc[16], ns[16];
	uint8_t connect_mac[ULS_FAB_MAC_SIZE]; /* the client's CONNECT mac, for ACCEPT's */
	uint64_t tag, peer_tag; /* the tags this side and the peer receive on */
	fi_addr_t peer;
	uint32_t peer_slot;   /* the peer's slot size: DATA fits in it */
	uint32_t peer_window; /* bytes this side may send before a return */
	uint32_t rx_window;   /* bytes the peer may send before a return (a power of two) */

	/* Sending. */
	pthread_mutex_t tx_mu;
	uint64_t tx_tcp;     /* data bytes sent on TCP (tx_mu) */
	int tx_sw;           /* this side switched its sending direction */
	int tx_never;        /* it never will (shut down, urgent data, O_ASYNC before it) */
	uint64_t tx_sw_pos;  /* where: tx_tcp then */
	uint64_t tx_fab;     /* data bytes sent on the fabric */
	uint64_t tx_ret;     /* of these, returned by the peer's window */
	uint32_t tx_seq;
	uint32_t tx_flight;  /* sends posted, not completed */
	int fin_sent;
	int close_sent;      /* a FIN with CLOSE went: the peer answers it with TAKEN (9.8) */
	int taken;           /* ...and did: every byte before it arrived there */
	int fin_tcp;         /* after a move back, the kernel's shutdown said it on TCP too */

	/* Receiving. */
	pthread_mutex_t rx_mu;
	uint64_t rx_tcp;      /* data bytes read from TCP (rx_mu) */
	int peer_sw;
	uint64_t peer_sw_pos;
	uint8_t *rxbuf;       /* rx_window bytes, a ring */
	uint64_t rx_in, rx_out; /* fabric bytes arrived, and consumed */
	uint64_t rx_ret;      /* consumed bytes returned to the peer */
	uint32_t rx_seq;
	/* Messages that came before an earlier one (a provider may complete a long message
	 * after later short ones): copies, by seq modulo FAB_HOLD, taken in order. */
	struct fab_held **held;
	uint32_t held_n, held_bytes;
	int fin;              /* the peer's FIN came: its stream ends at fin_pos */
	int peer_closed;      /* ...and its last holder closed */
	uint64_t fin_pos;
	int tcp_end;          /* the TCP stream ended (FIN or RST) while on the fabric */
	uint64_t end_deadline; /* ...and a FIN on the fabric is awaited until then (ns) */
	int err;              /* after the data: ECONNRESET, ETIMEDOUT */
	_Atomic uint64_t gen; /* changes with every arrival (epoll's edges) */
	_Atomic uint64_t tx_short; /* sends that found no room (writable edges, as TCP's) */
	/* Threads that want the connection's locks to move it back (a fork or exec in
	 * another thread): a call that waits with nothing done lets go of them (FAB_YIELD). */
	_Atomic int movers;
	int orphan;           /* a fork child's copy: the parent owns the fabric side */

	/*
	 * Moving back to TCP in place (protocol.md 9.10). Every byte sent on the fabric is
	 * kept in txbuf (peer_window bytes, a ring over fabric positions) until the peer's
	 * window returns it, so that a peer that leaves gets what it had not read again, on
	 * TCP.
	 */
	uint8_t *txbuf;
	int rev;              /* this side sent REVERT REQUEST|LEAVING: its fabric is over */
	int rev_answered;     /* ...and the peer's REVERT came */
	int tx_stop;          /* no more fabric sends: TCP, after the resend */
	int peer_rev;         /* the peer's REVERT came: its fabric stream ends at peer_fab_end */
	uint64_t peer_fab_end;
	int resend_pending;   /* the peer left: bytes from resend_from go again on TCP */
	uint64_t resend_from; /* a position of this side's stream */
	uint64_t peer_tcp_pos; /* the peer's REVERT: every byte it sent on TCP, wake-ups too */

	/*
	 * Wake-ups (protocol.md 9.7), where a side has no CQ wait descriptor: the sleeper
	 * sends SLEEP, and the peer answers each with one byte on TCP, after the data or
	 * window it waits for. Both counts only grow.
	 */
	int need_wake;        /* this side sleeps on TCP: it sends SLEEP (no wait fd) */
	int peer_need_wake;   /* the peer does: this side answers its SLEEPs */
	int peer_untagged;    /* the peer's connection slots are untagged: sent so (9.2) */
	uint32_t sleeps;      /* SLEEPs sent */
	uint64_t rx_wake;     /* wake-up bytes read off TCP (at most one per SLEEP) */
	uint32_t peer_sleeps; /* the peer's SLEEPs seen */
	uint32_t wake_want;   /* ...the last one waits for this (ULS_FAB_WANT_*), 0: answered */
	uint64_t wakes;       /* wake-up bytes sent (one per peer SLEEP, while on the fabric) */

	/*
	 * Offers (protocol.md 9.6, AVAIL), where both sides read (fab.ep.reads): a long send
	 * copies into txbuf only, which is registered, and the receiver reads the bytes from
	 * there straight into its program's buffer. Positions count fabric bytes, as tx_fab
	 * and rx_in do.
	 */
	int reads;              /* both announced READS: this side offers and takes offers */
	int no_offers;          /* txbuf could not be registered: DATA only */
	struct fid_mr *tx_mr;   /* txbuf's registration, from the first offer */
	uint64_t tx_key, tx_addr, guard; /* its key, RMA address, and the guard word's value */
	uint64_t offered_end;   /* fabric position past the last byte offered */
	uint64_t peer_taken;    /* the peer's TAKEN: it copied every offer before this */
	struct fab_offer *offers; /* the peer's offers not yet read, a ring of fab_offers_max */
	uint32_t off_head, off_n;
	int pull;               /* take every offer now (fab_run_pulls): the peer closed */
	int rev_due;            /* ...or leaves, and its REVERT's answer waits for that */
	uint64_t offers_read;   /* bytes read from the peer's memory (the close line) */
	/* A lend in flight (9.6, LEND): the stream's lend_len bytes from fabric position
	 * lend_pos lie in the program's buffer at lend_src, registered under lend_mr, while
	 * its send waits for the window to return them; else they move into txbuf. */
	const uint8_t *lend_src;
	struct fid_mr *lend_mr;
	uint64_t lend_pos;
	uint32_t lend_len;      /* 0: none */
	uint32_t lend_skip;     /* long sends to offer from txbuf before lending again */
	uint64_t lent, moved;   /* bytes lent and taken from the program's buffer, and moved */
	uint64_t lend_due;      /* receiver: the end of the peer's last lend (window returned
				 * as soon as it is consumed: its send waits for that) */

	/*
	 * Writes (protocol.md 9.14, RING and WROTE), where both sides write (fab.ep.writes):
	 * each registers its receive ring for the peer's writes and says where with RING; a
	 * long send is written from txbuf into the peer's ring at its positions.
	 */
	int writes;             /* both announced WRITES */
	struct fid_mr *ring_mr; /* rxbuf's registration for the peer's writes (RING sent) */
	uint64_t peer_ring_addr, peer_ring_key;
	uint32_t peer_ring_len; /* the peer's RING came (its window): this side writes */
	uint64_t written;       /* bytes this side wrote into the peer's ring (close line) */
};

/* One offer of the peer's: len bytes of its stream from fabric position pos. */
struct fab_offer {
	uint64_t pos, addr, key, guard_addr, guard_key, guard;
	uint32_t len;
	int lent; /* a LEND's: a changed guard may mean MOVED */
};
/* Unread offers a receiver takes: one per 8 KiB of its window (9.11). A sender offers 16
 * KiB or more but for the run before its ring wraps, so it keeps within half of that. */
static inline uint32_t fab_offers_max(const struct fab_conn *f)
{
	return f->rx_window / 8192u;
}
/* The guard words after txbuf's ring (9.6): the ring's, which the sender clears before
 * the memory goes, then a lend's, cleared before its send returns. */
#define FAB_GUARD 16u
/* A send's run of at least this much in one piece of the program's memory is lent, not
 * copied, where the profile spins (9.6, LEND). */
#define FAB_LEND_MIN 65536u
/* A send of at least this much is offered, not copied into DATA (where both read), or
 * written into the peer's ring (where both write). */
#define FAB_OFFER_MIN 16384u
/* Where both write, DATA keeps to this much unreturned (rxm reset a pair's connection
 * with 64 eager messages in flight to a slow reader: setup.c). */
#define FAB_DATA_WINDOW 262144u

static inline struct fab_conn *fab_of(struct uls_conn *c)
{
	struct fab_conn *f;

	memcpy(&f, c->tp_state, sizeof(f));
	return f;
}

/* The process's endpoint and connections (proc.c). */
struct fab_proc {
	pthread_mutex_t mu;
	int state; /* 0: not opened, 1: open, -1: failed for `why` */
	pid_t pid; /* the process that opened it (a fork child opens its own) */
	char why[160];
	struct uls_fab_ep ep;
	struct uls_fab_pool rxp, txp; /* small slots */
	struct uls_fab_pool rxb, txb; /* bulk slots, empty where too few fit the budget */
	struct fab_op *ops; /* one per slot: rxp's, rxb's, txp's (from tx_base), txb's */
	uint32_t tx_base, txb_base;
	int untagged; /* connection slots posted untagged (9.2): FI_MSG, ULSOCK_FABRIC_UNTAGGED */
	uint64_t ep_id;
	struct fab_conn *conns;
	struct fab_conn *bucket[1024];
	int nconns;
	struct fab_peer *peers;
	int npeers, peers_cap;
	uint64_t tx_done; /* sends completed: their slots are free again */
	_Atomic uint32_t tx_posted; /* sends posted or deferred, not completed */
	uint64_t progressed_ns; /* when fab_progress last read the queue (fab_progress_fresh) */
};

extern struct fab_proc fab;
extern const struct uls_transport_ops uls_fabric_transport;

/* proc.c */
/* Opens the endpoint once per process (fab.mu held), at the address of local, this
 * side's end of the first connection: 0, or -1 with fab.why. */
int fab_open_at(const struct sockaddr_storage *local);
/* Reads completions and dispatches them (fab.mu held). */
void fab_progress(void);
/* The same, in a spin whose step read the clock just before: now, recorded as the time
 * of this read instead of a clock read of its own (a fifth of a spinning wait's time
 * went to the clock, two reads a step). */
void fab_progress_at(uint64_t now);
/* fab_progress unless it read the queue less than FAB_FRESH_NS ago (fab.mu held):
 * for calls that can go on without news (a send with room), where another read would
 * cost the provider's progress, a system call on tcp, for nothing new. What arrived in
 * between is seen at the next call, as if it had come that much later. */
void fab_progress_fresh(void);
/* Progress while sends are posted, up to ns (fab.mu held): a provider with manual progress
 * writes a long message to its socket only in progress calls. */
void fab_flush(uint64_t ns);
/* Before a sleep (fab.mu held): posts the slots fab_repost would, then 1 when it may
 * sleep on the wait descriptor, 0 when completions wait (read them first) or the
 * provider has no wait descriptor. */
int fab_trywait(void);
/* Posts again the connection slots taken since the last post (fab.mu held): before a
 * sleep. */
void fab_repost(void);
/* A short wait's sleep (fab.mu not held): 1 ms on the wait descriptor after a trywait
 * that allowed it (may), 1 ms without one on a provider that has none. */
void fab_sleep_1ms(int may);
/* A poll or epoll sleeper's longest sleep on a provider without a wait descriptor: 1 ms
 * after news (fab_news), doubling to 64 ms while none comes. */
uint64_t fab_nowake_nap(void);
extern _Atomic uint32_t fab_nap_ms;
/* The sleep slice after one of ms without news: 1, 2, 4 .. 64 ms (0: none yet). */
static inline uint32_t fab_next_slice(uint32_t ms)
{
	return ms ? (ms < 64 ? 2 * ms : 64) : 1;
}
/* The address vector entry of a peer's fabric address, made once: 0 or -1. */
int fab_peer_addr(const uint8_t *addr, size_t len, fi_addr_t *out);
/* Sends one message of class cls (header and payload already in a slot's bytes). */
int fab_send(struct fab_conn *f, fi_addr_t dest, uint32_t cls, const void *msg, size_t len);
/* The most stream bytes one DATA message to f may carry now, 0 when no TX slot is free. */
size_t fab_tx_room(const struct fab_conn *f);
/* Frees the held messages of f (fab.mu held). */
void fab_held_free(struct fab_conn *f);
#define FAB_HOLD 64u /* messages a connection may receive ahead of the next seq */
/* DATA a side keeps posted and not completed per connection: a provider completes a
 * receive no later than the send (rxm's rendezvous: after the peer's read), so at most
 * these and a few control messages can overtake one (9.6). */
#define FAB_FLIGHT 32u
/* Copies n bytes of iov from skip to dst. */
void fab_iov_copy(uint8_t *dst, const struct iovec *iov, int iovcnt, size_t skip, size_t n);
/* Sends DATA of n bytes taken from iov at skip (fab.mu held): 0 or -errno. */
int fab_send_data(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		  size_t n);
/* Stream bytes arriving (DATA, AVAIL: 9.6, 9.11): 1 when f takes len more of them; 0
 * when not, the case handled (a violation, or skipped because this side left). */
int fab_stream_admits(struct fab_conn *f, uint32_t len);
/* A connection message with no payload (CREDIT) or a packed one (SWITCH, FIN, RESET). */
int fab_send_ctl(struct fab_conn *f, int type, const void *payload, size_t plen);
/* Messages to dest that wait to be posted (the provider refused them for now), after
 * trying them again: 0 when none (fab.mu held). */
int fab_deferred_to(fi_addr_t dest);
/* CREDIT, SWITCH and FIN of f (fab.mu held): 0 or -errno. */
int fab_send_credit(struct fab_conn *f);
int fab_send_switch(struct fab_conn *f, uint64_t pos);
int fab_send_fin(struct fab_conn *f, uint64_t pos, int close);
void fab_tag_add(struct fab_conn *f);
void fab_tag_del(struct fab_conn *f);
struct fab_conn *fab_by_tag(uint64_t tag);
uint64_t fab_random64(void);
/* Both sides committed: the connection's path is the fabric (fab.mu held). */
void fab_done(struct fab_conn *f);
/* The connection broke a rule (9.11): it ends with ECONNRESET (fab.mu held). */
void fab_violation(struct fab_conn *f, const char *what);

/* Sends the REVERT of 9.10 for f: REQUEST|LEAVING from the side that leaves, or the
 * answer (fab.mu held). */
int fab_send_revert(struct fab_conn *f, uint32_t flags);
/* SLEEP n for want (9.7), and the wake-up byte that answers the peer's (fab.mu held). */
int fab_send_sleep(struct fab_conn *f, uint32_t want, uint32_t n);
void fab_wake_answer(struct fab_conn *f);
/* Where this side has read the peer's stream to (TCP, then fabric). */
uint64_t fab_rx_consumed(const struct fab_conn *f);

/* offer.c (protocol.md 9.6, AVAIL and TAKEN; all with fab.mu held). */
/* Offers up to n bytes of iov from skip, one run of txbuf: the count, or -errno
 * (-EAGAIN: no send slot now; -ENOTSUP: no registration, send DATA). */
ssize_t fab_offer_send(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t n);
/* Lends up to n bytes of iov from skip (one piece of it, one run of txbuf) and waits for
 * the peer to take them, or moves them into txbuf: the count, or -errno as above. */
ssize_t fab_lend_send(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		      size_t n);
void fab_offer_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len);
void fab_lend_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len);
void fab_moved_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len);
void fab_taken_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len);
/* The peer's offer that begins at fabric position pos, or NULL. */
struct fab_offer *fab_offer_at(struct fab_conn *f, uint64_t pos);
/* Where the next offer begins (rx_in when none). */
uint64_t fab_offer_next(const struct fab_conn *f);
/* The head offer into the program's memory at base (n bytes there): read straight in,
 * the count; or, n being short, copied into the receive buffer first, 0; or -errno. */
ssize_t fab_offer_into(struct fab_conn *f, void *base, size_t n);
/* Copies every offer into the receive buffer: 0, or -errno (the connection is reset). */
int fab_offer_pull_all(struct fab_conn *f);
/* Marks f to take its offers after the current dispatch, then to answer the peer's
 * REVERT (rev), or to send TAKEN after a FIN with CLOSE: 1 when marked, 0 when there is
 * nothing to do (no offer before a REVERT). */
int fab_pull_later(struct fab_conn *f, int rev);
void fab_run_pulls(void);
/* Bytes offered that the peer has neither taken nor returned. */
int fab_offers_untaken(const struct fab_conn *f);
/* A FIN with CLOSE sent that the peer, still there, has not answered with TAKEN (9.8). */
int fab_fin_untaken(const struct fab_conn *f);
/* io.c: f, unlisted with its FIN unanswered, is awaited at the exit by its tag; a late
 * TAKEN (or the peer's own FIN with CLOSE) for that tag ends the wait. */
void fab_untaken_note(const struct fab_conn *f);
void fab_untaken_late(uint64_t tag, uint8_t type, const uint8_t *p, uint32_t len);
void fab_untaken_pair_failed(fi_addr_t peer);
/* The connection ends: txbuf and its registration go, or linger while the peer may still
 * read them; the peer's offers are forgotten. */
void fab_offer_release(struct fab_conn *f);
/* write.c (protocol.md 9.14, RING and WROTE; all with fab.mu held). */
/* Registers f's receive ring for the peer's writes and sends RING (its handshake ended,
 * both announced WRITES); without it the peer sends DATA. */
void fab_ring_offer(struct fab_conn *f);
void fab_ring_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len);
/* Writes up to n bytes of iov from skip, one run of the peer's ring, and announces them:
 * the count, or -errno (-EAGAIN: no room in the provider or for the WROTE now; -ENOTSUP:
 * no RING from the peer, send DATA). */
ssize_t fab_write_send(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		       size_t n);
void fab_wrote_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len);
/* The connection ends: its ring's registration goes, or stays with the memory while the
 * peer may still write (until fab_ring_late sees the peer's last message). */
void fab_ring_release(struct fab_conn *f);
/* A message of type for a connection that is gone, tag its own, from src (FI_ADDR_UNSPEC:
 * not known): a FIN, REVERT or RESET ends its peer's writes, and its lingering ring goes
 * (only the one shared with src where src is known). */
void fab_ring_late(uint64_t tag, uint8_t type, fi_addr_t src);
/* The pair with peer failed (9.8): nothing more comes from it, its lingering rings go. */
void fab_ring_pair_failed(fi_addr_t peer);
/* proc.c: one RMA write of f's (fab.mu held): 0 or -errno (-EAGAIN: none now). */
int fab_write(struct fab_conn *f, const void *buf, size_t len, uint64_t addr, uint64_t key);
/* proc.c: a control message could take a send slot now. */
int fab_ctl_room(void);

/* proc.c: one read of the peer's memory (fab.mu held): 0 or -errno. */
int fab_read(const struct iovec *local, size_t nl, const struct fi_rma_iov *remote, size_t nr,
	     fi_addr_t src);

/* io.c: the process ends: FINs and up to 100 ms for what was posted (9.8), once. */
void fab_last_words(void);
/* The process ends or execs: its shm region's name goes (peers that mapped it keep it). */
void fab_shm_unlink(void);
/* io.c: the resend after a leaving peer's REVERT (tx_mu held): 0 or -errno. */
ssize_t fab_resend(struct fab_conn *f, int fd, int nonblock);
/* After a move back: this side's FIN on the fabric, if it sent one, as the kernel's
 * shutdown of the TCP write side. */
void fab_fin_to_tcp(struct fab_conn *f, int fd);

/* The slot size this process announces (9.2): its bulk slots', or its small ones'. */
uint32_t fab_slot_size(void);

/* setup.c: the set-up operations of the table, and: */
/* The key of ULSOCK_FABRIC_KEY, fab_key_len 0 without one (protocol.md 9.4). */
#define ULS_FAB_KEY_MIN 32
#define ULS_FAB_KEY_MAX 1024
extern uint8_t fab_key[ULS_FAB_KEY_MAX];
extern size_t fab_key_len;
enum uls_tp_answer fab_connect(struct uls_conn *c, int fd, const struct sockaddr *dst,
			       const struct uls_conn_hints *hints, char *why, size_t wlen);
void fab_connect_failed(struct uls_conn *c);
void fab_connected(struct uls_conn *c, int fd);
enum uls_tp_answer fab_accept(struct uls_conn *c, int fd, char *why, size_t wlen);
int fab_adopt(struct uls_conn *c, int fd);
/* Off the process's lists, its tag dropped (fab.mu held); again is harmless. */
void fab_unlist(struct fab_conn *f);
/* Moves back to TCP before either direction switched, when that is still this side's to
 * decide: 0, or -EBUSY (fab.mu held). */
int fab_abandon(struct fab_conn *f);
/* Advances f's handshake without blocking (no lock held); fd names the socket. */
void fab_step(struct fab_conn *f, int fd);
/* After the peer's REVERT: reads the wake-up bytes it sent before it (9.7, 9.10); 1 when
 * none is left, and its TCP data comes next (fab.mu held). */
int fab_wakes_skipped(struct fab_conn *f, int fd);
/* A handshake-class arrival whose header passed its checks (fab.mu held). */
void fab_hs_arrival(const struct uls_fab_hdr *h, const uint8_t *payload);
/* The sending direction switches now if it may (tx_mu held, not fab.mu). */
void fab_maybe_switch(struct fab_conn *f);

/*
 * Something changed for f (an arrival, its handshake's end, a failure): its generation
 * moves (waiters compare it), and threads of this process asleep in poll or epoll on it
 * are rung, since this thread may have read the completion their wait descriptor was
 * to report (core/bell.h).
 */
static inline void fab_news(struct fab_conn *f)
{
	atomic_store(&fab_nap_ms, 0);
	atomic_fetch_add(&f->gen, 1);
	uls_bells_ring_others(&f->c->bells);
}

/* A handshake of f is under way that no completion may announce (fab.mu held, or a
 * hint): the client's steps, the server's wait for CONNECT, and its first 2 s after
 * ACCEPT, while the provider may still be connecting. */
static inline int fab_handshaking(const struct fab_conn *f)
{
	if (f->orphan)
		return 0;
	return f->hs < HS_CLI_ACCEPTED || f->hs == HS_SRV_REG ||
	       (f->hs == HS_SRV_ACCEPTED && uls_now_ns() < f->hs_deadline);
}

/*
 * How long a sleeper waits before it looks at a handshake again (nothing of it wakes
 * anyone, 9.7): 1 ms in its first 100 ms, then a 32nd of its age, at most 64 ms. A peer
 * that is slow to answer (its program sleeps, or it never runs ulsock) costs this side
 * a few hundred wake-ups over the whole wait, not one a millisecond.
 */
/* Milliseconds since f's handshake began, at now. */
static inline unsigned long long fab_hs_age_ms(const struct fab_conn *f, uint64_t now)
{
	return now > f->hs_since ? (now - f->hs_since) / 1000000u : 0;
}

static inline uint32_t fab_hs_nap_ms(const struct fab_conn *f, uint64_t now)
{
	uint64_t age_ms = fab_hs_age_ms(f, now);

	if (age_ms < 100)
		return 1;
	return age_ms / 32 > 64 ? 64 : (uint32_t)(age_ms / 32);
}

#endif
