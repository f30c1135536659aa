/* SPDX-License-Identifier: MIT */
/*
 * The process's side of the fabric (fabric_int.h): its endpoint, opened at the first
 * connection that needs it; its slots (posted receives and sends); progress, which reads
 * completions in the program's own calls only; and the dispatch of what arrives to the
 * connections by tag (docs/protocol.md 9.2, 9.5, 9.6, 9.11).
 */
#include "fabric_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../core/config.h"
#include "../../core/fdtable.h"
#include "../../core/log.h"
#include "../../os/cpu.h"
#include "../../os/guard.h"
#include "../../os/libc.h"
#include "lib.h"

struct fab_proc fab = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* What a posted slot is doing: its completion's context. */
struct fab_op {
	struct fi_context ctx; /* first: the completion gives its address back */
	struct uls_fab_pool *pool; /* the slot's */
	uint32_t idx;
	uint8_t rx;     /* a receive slot (else a send's) */
	uint8_t cls;    /* a receive's class */
	uint8_t posted;
	uint8_t untagged; /* a send to connection slots posted untagged (9.2) */
	uint8_t counted;  /* a send whose completion the close waits for: never injected */
	uint32_t len;   /* a send's */
	uint64_t since; /* a deferred send's first try (ns) */
	uint64_t tag;   /* a send's connection (its own tag), 0 for handshakes */
	fi_addr_t dest;
};

struct fab_peer {
	uint8_t addr[ULS_FAB_ADDR_MAX];
	size_t len;
	fi_addr_t fi;
};

/*
 * Two sizes of slot (protocol.md 9.2): small ones for handshakes, control and short DATA,
 * and bulk ones for long DATA, one tenth of the messages' cost each for a stream (the
 * providers' cost is per message). A provider may complete a long message after later
 * short ones (rxm's rendezvous), so arrivals are taken in `seq` order (hold_arrival).
 */
#define SLOT_SIZE ULS_FAB_SMALL_SLOT
#define BULK_SIZE 65536u
#define UNPINNED_RX (4u << 20)
#define UNPINNED_TX (2u << 20)
#define BULK_MIN 4u /* fewer bulk slots than this: none, DATA fits the small ones */

/* The read of an offer (fab_read): one at a time, under fab.mu, told apart by address. */
#define FAB_READ_NS 10000000000ull
enum { RD_IDLE = 1, RD_POSTED = 2, RD_DONE = 3 }; /* else a negative error */
static struct fab_op rd_op;
static int rd_state = RD_IDLE;

/* Sends deferred until the provider takes them (post_tx), oldest first. */
static struct fab_op **deferred;
static uint32_t def_n;
#define HS_SLOTS 16u

uint64_t fab_random64(void)
{
	uint64_t v = 0;

	while (v == 0)
		if (getrandom(&v, sizeof(v), 0) != sizeof(v))
			v = (uint64_t)uls_now_ns() * 0x9e3779b97f4a7c15ull; /* never: getrandom */
	return v;
}

static uint32_t unposted; /* receive slots the provider had no room for yet */
/*
 * Small connection slots taken, posted again later: at the end of a progress that found
 * nothing (a wait's), before a sleep, or once later_max wait. Posting one costs a
 * provider call (shm: its locks, about 80 ns) that a short message's way from the
 * provider to the program need not wait for; at least three quarters of them stay
 * posted meanwhile, and a message that finds none waits in the provider's unexpected
 * queue. Handshake and bulk slots go back at once.
 */
#define REPOST_LATER 32u
static struct fab_op *later[REPOST_LATER];
static uint32_t later_n, later_max;

/* Connection slots are untagged where the provider has untagged messages (9.2). */
static int post_rx(struct fab_op *op)
{
	void *slot = uls_fab_slot(op->pool, op->idx);
	ssize_t r = op->cls == FAB_CLASS_CONN && fab.untagged
			? uls_fab_ep_recv(&fab.ep, slot, op->pool->slot_size, op->pool->desc,
					  FI_ADDR_UNSPEC, &op->ctx)
			: uls_fab_ep_trecv(&fab.ep, slot, op->pool->slot_size, op->pool->desc,
					   FI_ADDR_UNSPEC, op->cls, 0, &op->ctx);

	op->posted = r == 0;
	unposted += r != 0;
	return (int)r;
}

/* A receive not posted for lack of room in the provider is posted at the next progress
 * (a spinning waiter progresses often: the walk happens only when one is left). */
static void repost_all(void)
{
	if (!unposted)
		return;
	unposted = 0;
	for (uint32_t i = 0; i < fab.tx_base; i++)
		if (!fab.ops[i].posted)
			post_rx(&fab.ops[i]);
}

void fab_repost(void)
{
	if (fab.state <= 0 || fab.pid != uls_pid()) /* a fork child: the parent's slots */
		return;
	for (uint32_t i = 0; i < later_n; i++)
		if (!later[i]->posted) /* repost_all may have posted it already */
			post_rx(later[i]);
	later_n = 0;
}

static const char *software[] = {"tcp", "net", "udp", "sockets", "shm"};

static int is_software(const char *prov)
{
	char first[32];
	size_t n = strcspn(prov, ";");

	snprintf(first, sizeof(first), "%.*s", (int)(n < sizeof(first) ? n : sizeof(first) - 1),
		 prov);
	for (size_t i = 0; i < sizeof(software) / sizeof(software[0]); i++)
		if (strcmp(first, software[i]) == 0)
			return 1;
	return 0;
}

static void close_pools(void)
{
	uls_fab_pool_close(&fab.txb);
	uls_fab_pool_close(&fab.rxb);
	uls_fab_pool_close(&fab.txp);
	uls_fab_pool_close(&fab.rxp);
}

static int open_failed(const char *fmt, const char *detail)
{
	snprintf(fab.why, sizeof(fab.why), fmt, detail);
	fab.state = -1;
	return -1;
}

/* The node libfabric binds to: the address of the first connection's own end. */
static const char *node_of(const struct sockaddr_storage *local, char *buf, size_t len)
{
	if (local->ss_family == AF_INET)
		return inet_ntop(AF_INET, &((const struct sockaddr_in *)local)->sin_addr, buf,
				 (socklen_t)len);
	if (local->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)local)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a))
			return inet_ntop(AF_INET, &a->s6_addr[12], buf, (socklen_t)len);
		return inet_ntop(AF_INET6, a, buf, (socklen_t)len);
	}
	return NULL;
}

/*
 * libfabric's shm provider names its shared region in /dev/shm after the source address
 * it is given ("NODE:0:0" in libfabric 1.17), and refuses an endpoint whose region
 * exists (fi_enable: EBUSY). An address is no name on one host: two processes with one
 * local address, or a region left by a process that ended without closing its endpoint
 * (every one: the fabric side dies with the process), would collide. So a shm endpoint
 * is named for its process, with a random part against a reused pid, and the regions of
 * owners that are gone are removed first: each holds 16 MiB of memory.
 */
#define SHM_PREFIX "ulsock-fab."

/*
 * Removes the entries of /dev/shm whose names start with prefix; with gone_only, only
 * those named SHM_PREFIX PID.* whose PID is gone (a live pid, or another user's: EPERM,
 * keeps its region).
 */
static void shm_remove(const char *prefix, int gone_only)
{
	size_t n = strlen(prefix);
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, n) != 0)
			continue;
		char *end;
		long pid = gone_only ? strtol(e->d_name + n, &end, 10) : 0;
		if (gone_only && (pid <= 0 || *end != '.' || kill((pid_t)pid, 0) == 0 ||
				  errno != ESRCH))
			continue;
		char path[300];
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		if (unlink(path) == 0 && gone_only)
			uls_dbg("fabric: removed %s, a shm region of pid %ld (gone)", path, pid);
	}
	closedir(d);
}

static char shm_node[64]; /* this process's name, while it has a shm endpoint */

static const char *shm_name(void)
{
	shm_remove(SHM_PREFIX, 1);
	snprintf(shm_node, sizeof(shm_node), SHM_PREFIX "%d.%016llx", (int)uls_pid(),
		 (unsigned long long)fab_random64());
	return shm_node;
}

void fab_shm_unlink(void)
{
	char mine[sizeof(shm_node) + 1];

	/* The kernel's pid: a vfork child (exec, _exit) has the parent's cached one. */
	if (!shm_node[0] || fab.pid != (pid_t)uls_syscall(SYS_getpid))
		return;
	/* The provider's suffix (":0:0") is its own: whatever follows the name. Peers that
	 * mapped the region keep it until they unmap. */
	snprintf(mine, sizeof(mine), "%s:", shm_node);
	shm_remove(mine, 0);
	shm_node[0] = 0;
}

int fab_open_at(const struct sockaddr_storage *local)
{
	const char *prov = uls_cfg.fabric_provider;
	char why[128], node[64];
	uint32_t nrx, ntx;

	if (fab.state != 0 && fab.pid == uls_pid())
		return fab.state > 0 ? 0 : -1;
	if (fab.pid != uls_pid()) {
		/* A fork child: the parent's objects stay the parent's (protocol.md 9.9). */
		memset(&fab.ep, 0, sizeof(fab.ep));
		memset(&fab.rxp, 0, sizeof(fab.rxp));
		memset(&fab.txp, 0, sizeof(fab.txp));
		memset(&fab.rxb, 0, sizeof(fab.rxb));
		memset(&fab.txb, 0, sizeof(fab.txb));
		fab.ops = NULL;
		fab.npeers = 0;
		fab.state = 0;
		unposted = 0;
		later_n = 0;
	}
	fab.pid = uls_pid();
	if (prov && strcmp(prov, "off") == 0)
		return open_failed("%s", "ULSOCK_FABRIC_PROVIDER is off");
	int shm = prov && strcmp(prov, "shm") == 0;
	if (uls_fab_ep_open(&fab.ep, prov,
			    shm ? shm_name() : node_of(local, node, sizeof(node)),
			    why, sizeof(why)) < 0)
		return open_failed("%s", why);
	if (!prov && is_software(fab.ep.prov)) {
		uls_fab_ep_close(&fab.ep);
		return open_failed("no hardware provider (%s is software: name it in "
				   "ULSOCK_FABRIC_PROVIDER to use it)", fab.ep.prov);
	}
	/* Pinned memory is what RLIMIT_MEMLOCK bounds: a provider that registers nothing
	 * (no FI_MR_LOCAL: tcp, rxm over it) pins nothing either. Where it pins, small and
	 * bulk slots share the budget half and half. */
	int pins = (fab.ep.info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
	size_t rx_bytes = pins ? uls_fab_pool_budget(1) / 2 : UNPINNED_RX;
	size_t tx_bytes = pins ? uls_fab_pool_budget(0) / 2 : UNPINNED_TX;
	uint32_t nrb = (uint32_t)(rx_bytes / BULK_SIZE), ntb = (uint32_t)(tx_bytes / BULK_SIZE);
	nrx = (uint32_t)((pins ? rx_bytes : UNPINNED_RX) / SLOT_SIZE);
	ntx = (uint32_t)((pins ? tx_bytes : UNPINNED_TX) / SLOT_SIZE);
	nrx = nrx > 512 ? 512 : nrx;
	ntx = ntx > 256 ? 256 : ntx;
	/*
	 * Not over rxm: there a bulk DATA goes by rendezvous, which measured no faster than
	 * small slots on tcp;ofi_rxm (libfabric 1.17: 4.0 against 4.4 Gbit/s) and made rxm
	 * reset the pair's connection under a slow reader (docs/PERFORMANCE.md, issue 14).
	 */
	if (nrb < BULK_MIN || ntb < BULK_MIN || strstr(fab.ep.prov, "ofi_rxm"))
		nrb = ntb = 0;
	if (nrx < 2 * HS_SLOTS || ntx < 8) {
		uls_fab_ep_close(&fab.ep);
		return open_failed("%s", "RLIMIT_MEMLOCK too low for the slot pools");
	}
	if (uls_fab_pool_open(&fab.rxp, &fab.ep, SLOT_SIZE, nrx, FI_RECV, why, sizeof(why)) < 0 ||
	    uls_fab_pool_open(&fab.txp, &fab.ep, SLOT_SIZE, ntx, FI_SEND, why, sizeof(why)) < 0 ||
	    (nrb && uls_fab_pool_open(&fab.rxb, &fab.ep, BULK_SIZE, nrb, FI_RECV, why,
				      sizeof(why)) < 0) ||
	    (ntb && uls_fab_pool_open(&fab.txb, &fab.ep, BULK_SIZE, ntb, FI_SEND, why,
				      sizeof(why)) < 0)) {
		close_pools();
		uls_fab_ep_close(&fab.ep);
		return open_failed("%s", why);
	}
	/* The ops: small receives, bulk receives, small sends, bulk sends. */
	fab.tx_base = nrx + nrb;
	fab.untagged = fab.ep.msg && uls_cfg.fabric_untagged;
	later_max = (nrx - HS_SLOTS) / 4 < REPOST_LATER ? (nrx - HS_SLOTS) / 4 : REPOST_LATER;
	fab.txb_base = fab.tx_base + ntx;
	fab.ops = calloc(fab.txb_base + ntb, sizeof(*fab.ops));
	free(deferred);
	deferred = calloc(ntx + ntb, sizeof(*deferred));
	def_n = 0;
	if (!fab.ops || !deferred) {
		close_pools();
		uls_fab_ep_close(&fab.ep);
		return open_failed("%s", "out of memory");
	}
	for (uint32_t i = 0; i < nrx + nrb; i++) {
		struct uls_fab_pool *pool = i < nrx ? &fab.rxp : &fab.rxb;
		uint32_t idx;
		uls_fab_pool_get(pool, &idx); /* receive slots are never given back */
		fab.ops[i] = (struct fab_op){.pool = pool, .idx = idx, .rx = 1,
					     .cls = i < HS_SLOTS ? FAB_CLASS_HS
						    : i < nrx ? FAB_CLASS_CONN : FAB_CLASS_BULK};
		post_rx(&fab.ops[i]);
	}
	for (uint32_t i = 0; i < ntx; i++)
		fab.ops[fab.tx_base + i] = (struct fab_op){.pool = &fab.txp, .idx = i};
	for (uint32_t i = 0; i < ntb; i++)
		fab.ops[fab.txb_base + i] = (struct fab_op){.pool = &fab.txb, .idx = i};
	fab.ep_id = fab_random64();
	fab.state = 1;
	/*
	 * exit() runs atexit handlers before the libraries' destructors, and libfabric's
	 * (loaded after this library) before this library's: the last words must come while
	 * the provider still works. _exit and _Exit have their own (preload/init.c).
	 */
	static int at_exit;
	if (!at_exit)
		at_exit = atexit(fab_last_words) == 0;
	uls_info("fabric: provider %s, fabric %s, %u receive and %u send slots of %u bytes, "
		 "%u and %u of %u; %s%s%s%s", fab.ep.prov, fab.ep.fabric_name, nrx, ntx, SLOT_SIZE,
		 nrb, ntb, BULK_SIZE, fab.ep.reads ? "reads, " : "", fab.ep.writes ? "writes, " : "",
		 fab.untagged ? "untagged connection slots, " : "",
		 fab.ep.source ? "sources checked" : "sources not reported (tags only)");
	return 0;
}

int fab_peer_addr(const uint8_t *addr, size_t len, fi_addr_t *out)
{
	for (int i = 0; i < fab.npeers; i++)
		if (fab.peers[i].len == len && memcmp(fab.peers[i].addr, addr, len) == 0) {
			*out = fab.peers[i].fi;
			return 0;
		}
	if (fab.npeers == fab.peers_cap) {
		int cap = fab.peers_cap ? 2 * fab.peers_cap : 8;
		struct fab_peer *p = realloc(fab.peers, (size_t)cap * sizeof(*p));
		if (!p)
			return -1;
		fab.peers = p;
		fab.peers_cap = cap;
	}
	struct fab_peer *p = &fab.peers[fab.npeers];
	if (len == 0 || len > sizeof(p->addr) || uls_fab_ep_insert(&fab.ep, addr, len, &p->fi) < 0)
		return -1;
	memcpy(p->addr, addr, len);
	p->len = len;
	fab.npeers++;
	*out = p->fi;
	return 0;
}

/* ------------------------------------------------------------------ tags */

static unsigned bucket_of(uint64_t tag)
{
	return (unsigned)((tag * 0x9e3779b97f4a7c15ull) >> 54);
}

void fab_tag_add(struct fab_conn *f)
{
	unsigned b = bucket_of(f->tag);

	f->hnext = fab.bucket[b];
	fab.bucket[b] = f;
}

void fab_tag_del(struct fab_conn *f)
{
	for (struct fab_conn **p = &fab.bucket[bucket_of(f->tag)]; *p; p = &(*p)->hnext)
		if (*p == f) {
			*p = f->hnext;
			return;
		}
}

struct fab_conn *fab_by_tag(uint64_t tag)
{
	struct fab_conn *f = fab.bucket[bucket_of(tag)];

	while (f && f->tag != tag)
		f = f->hnext;
	return f;
}

/* ------------------------------------------------------------------ sending */

static void tx_done(struct fab_op *op, int err);

static struct fab_op *tx_op(struct uls_fab_pool *pool, uint8_t **slot)
{
	uint32_t idx;
	void *s = uls_fab_pool_get(pool, &idx);

	if (!s)
		return NULL;
	*slot = s;
	struct fab_op *op = &fab.ops[(pool == &fab.txb ? fab.txb_base : fab.tx_base) + idx];
	op->counted = 0;
	return op;
}

uint32_t fab_slot_size(void)
{
	return fab.rxb.nslots ? BULK_SIZE : SLOT_SIZE;
}

/* A peer whose slot_size is above the small size has bulk slots of that size (9.2). */
static int peer_bulk(const struct fab_conn *f)
{
	return f->peer_slot > ULS_FAB_SMALL_SLOT;
}

size_t fab_tx_room(const struct fab_conn *f)
{
	size_t small = f->peer_slot < SLOT_SIZE ? f->peer_slot : SLOT_SIZE;

	if (f->tx_flight >= FAB_FLIGHT)
		return 0;
	if (peer_bulk(f) && fab.txb.nfree)
		return (f->peer_slot < BULK_SIZE ? f->peer_slot : BULK_SIZE) - FAB_HDR;
	return fab.txp.nfree ? small - FAB_HDR : 0;
}

/*
 * Sends the provider could not take yet (-FI_EAGAIN: rxm, for one, while it connects to a
 * new peer) that must not be dropped: handshakes and control messages. Each holds its TX
 * slot. Every progress posts what it can, in order per peer: a peer that takes nothing
 * holds up only its own messages, and what waits for it 10 s fails like a send that never
 * completes (9.8). While a peer has messages waiting, its DATA waits too, so the order a
 * peer sees is the order they were made.
 */
#define DEFER_MAX_NS 10000000000ull

/* Posts op's send: 0, 1 when the provider took it whole (injected: no completion comes,
 * the slot is free), or -FI_errno. */
static ssize_t tsend(struct fab_op *op)
{
	void *slot = uls_fab_slot(op->pool, op->idx);

	if (op->len <= fab.ep.inject_size && !op->counted) {
		ssize_t r = uls_fab_ep_inject(&fab.ep, slot, op->len, op->dest, !op->untagged,
					      op->cls);
		return r == 0 ? 1 : r;
	}
	if (op->untagged)
		return uls_fab_ep_send(&fab.ep, slot, op->len, op->pool->desc, op->dest, &op->ctx);
	return uls_fab_ep_tsend(&fab.ep, slot, op->len, op->pool->desc, op->dest, op->cls,
				&op->ctx);
}

static int dest_waits(fi_addr_t dest, uint32_t upto)
{
	for (uint32_t i = 0; i < upto; i++)
		if (deferred[i]->dest == dest)
			return 1;
	return 0;
}

static void flush_deferred(void)
{
	uint64_t now = def_n ? uls_now_ns() : 0;
	uint32_t kept = 0;

	for (uint32_t i = 0; i < def_n; i++) {
		struct fab_op *op = deferred[i];
		ssize_t r = -FI_EAGAIN;
		/* After an earlier message to the same peer that still waits: in order. */
		if (!dest_waits(op->dest, kept))
			r = tsend(op);
		if (r == 1) {
			tx_done(op, 0);
			continue;
		}
		if (r == -FI_EAGAIN && now - op->since < DEFER_MAX_NS) {
			deferred[kept++] = op;
			continue;
		}
		if (r != 0) /* refused, or waited too long: the pair failed */
			tx_done(op, r == -FI_EAGAIN ? ETIMEDOUT : EIO);
	}
	def_n = kept;
}

int fab_deferred_to(fi_addr_t dest)
{
	flush_deferred();
	return dest_waits(dest, def_n);
}

/* Posts op's slot of len bytes: 0 (posted or, with may_defer, deferred), or -errno with
 * the slot given back. */
static int post_tx(struct fab_op *op, struct fab_conn *f, fi_addr_t dest, uint32_t cls,
		   size_t len, int may_defer)
{
	ssize_t r = -FI_EAGAIN;

	op->tag = f ? f->tag : 0;
	op->dest = dest;
	op->cls = (uint8_t)cls;
	op->untagged = f && cls == FAB_CLASS_CONN && f->peer_untagged;
	op->len = (uint32_t)len;
	flush_deferred();
	if (!dest_waits(dest, def_n))
		r = tsend(op);
	if (r == 1) { /* taken whole: nothing in flight */
		uls_fab_pool_put(op->pool, op->idx);
		return 0;
	}
	if (r == -FI_EAGAIN && may_defer && def_n < fab.txp.nslots + fab.txb.nslots) {
		op->since = uls_now_ns();
		deferred[def_n++] = op;
		r = 0;
	}
	if (r != 0) {
		if (r != -FI_EAGAIN)
			uls_dbg("fabric: send of %zu bytes failed: %s", len, uls_fab_err((int)r));
		uls_fab_pool_put(op->pool, op->idx);
		return r == -FI_EAGAIN ? -EAGAIN : -EIO;
	}
	if (f)
		f->tx_flight++;
	atomic_fetch_add(&fab.tx_posted, 1);
	return 0;
}

int fab_send(struct fab_conn *f, fi_addr_t dest, uint32_t cls, const void *msg, size_t len)
{
	uint8_t *slot;
	struct fab_op *op = tx_op(&fab.txp, &slot);

	if (!op)
		return -EAGAIN;
	memcpy(slot, msg, len);
	return post_tx(op, cls == FAB_CLASS_CONN ? f : NULL, dest, cls, len, 1);
}

/* The window this side owes the peer, returned with the message being sent. */
static uint32_t wnd_owed(struct fab_conn *f)
{
	uint32_t w = (uint32_t)(f->rx_out - f->rx_ret);

	f->rx_ret = f->rx_out;
	return w;
}

/* Writes the header of f's next connection message into slot and posts it, returning
 * the window owed with it: 0, or -errno with that window still owed. */
static int conn_post(struct fab_conn *f, struct fab_op *op, uint8_t *slot, int type,
		     size_t plen, int may_defer)
{
	uint32_t wnd = wnd_owed(f);
	struct uls_fab_hdr h = {.type = (uint8_t)type, .len = (uint32_t)plen, .tag = f->peer_tag,
				.seq = f->tx_seq, .wnd = wnd};
	uint32_t cls = op->pool == &fab.txb ? FAB_CLASS_BULK : FAB_CLASS_CONN;

	uls_fab_hdr_pack(&h, slot);
	/*
	 * A FIN is never injected: an injected message counts as sent at once, but the
	 * provider may still hold it queued behind earlier sends (tcp: a socket that was
	 * full). A close that then ended TCP and a process that then exited lost it, and the
	 * peer, which had every byte, read ECONNRESET instead of the end (9.8; seen once in
	 * CI, test_exit_without_close[exit-tcp;ofi_rxm]). Posted, its completion is what the
	 * close and the exit wait for (tx_flight).
	 */
	op->counted = type == ULS_FAB_FIN;
	int r = post_tx(op, f, f->peer, cls, FAB_HDR + plen, may_defer);

	if (r == 0)
		f->tx_seq++;
	else
		f->rx_ret -= wnd;
	/* A peer asleep for window or for data has it on its way: its wake-up byte. */
	if (r == 0 && f->wake_want &&
	    ((wnd && (f->wake_want & ULS_FAB_WANT_SPACE)) ||
	     ((type == ULS_FAB_DATA || type == ULS_FAB_AVAIL || type == ULS_FAB_LEND ||
	       type == ULS_FAB_WROTE) &&
	      (f->wake_want & ULS_FAB_WANT_DATA)) ||
	     type == ULS_FAB_FIN || type == ULS_FAB_RESET))
		fab_wake_answer(f);
	return r;
}

/*
 * The wake-up byte (9.7) that answers the peer's last SLEEP: one byte on TCP, whose
 * stream after this side's switch carries nothing else, on the descriptor the
 * connection was set up on while that still names it. Never after this side's REVERT
 * (TCP carries data again then: the REVERT counts the bytes sent before it). A full
 * socket keeps the answer owed (fab.mu held).
 */
void fab_wake_answer(struct fab_conn *f)
{
	static const char b;
	/* Looked up without classifying: at a close the number is already forgotten. */
	struct uls_fd *e = uls_fd_get(f->fd);

	if (!f->wake_want || !f->tx_sw || f->rev || f->tx_stop || !e ||
	    atomic_load(&e->kind) != ULS_FD_CONN || e->conn != f->c)
		return;
	if (uls_libc.send(f->fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) {
		f->wakes++;
		f->wake_want = 0;
	}
}

int fab_send_sleep(struct fab_conn *f, uint32_t want, uint32_t n)
{
	struct uls_fab_sleep s = {.pos = f->rx_in, .want = want, .n = n};
	uint8_t p[ULS_FAB_SLEEP_SIZE];

	uls_fab_sleep_pack(&s, p);
	return fab_send_ctl(f, ULS_FAB_SLEEP, p, sizeof(p));
}

int fab_send_ctl(struct fab_conn *f, int type, const void *payload, size_t plen)
{
	uint8_t *slot;
	struct fab_op *op = tx_op(&fab.txp, &slot);

	if (!op)
		return -EAGAIN;
	if (plen)
		memcpy(slot + FAB_HDR, payload, plen);
	return conn_post(f, op, slot, type, plen, 1);
}

int fab_send_credit(struct fab_conn *f)
{
	return fab_send_ctl(f, ULS_FAB_CREDIT, NULL, 0);
}

int fab_send_switch(struct fab_conn *f, uint64_t pos)
{
	struct uls_fab_switch sw = {.pos = pos};
	uint8_t p[ULS_FAB_SWITCH_SIZE];

	uls_fab_switch_pack(&sw, p);
	return fab_send_ctl(f, ULS_FAB_SWITCH, p, sizeof(p));
}

int fab_send_fin(struct fab_conn *f, uint64_t pos, int close)
{
	struct uls_fab_fin fin = {.pos = pos, .sleeps = f->sleeps,
				  .flags = close ? ULS_FAB_FIN_CLOSE : 0};
	uint8_t p[ULS_FAB_FIN_SIZE];

	uls_fab_fin_pack(&fin, p);
	return fab_send_ctl(f, ULS_FAB_FIN, p, sizeof(p));
}

uint64_t fab_rx_consumed(const struct fab_conn *f)
{
	if (f->peer_sw && f->peer_sw_pos != UINT64_MAX && f->rx_tcp >= f->peer_sw_pos)
		return f->peer_sw_pos + f->rx_out;
	return f->rx_tcp;
}

int fab_send_revert(struct fab_conn *f, uint32_t flags)
{
	struct uls_fab_revert r = {
		.flags = flags,
		.fabric_end = f->tx_sw ? f->tx_sw_pos + f->tx_fab : f->tx_tcp,
		.tcp_pos = f->tx_tcp + f->wakes,
		.rx_consumed = fab_rx_consumed(f),
	};
	uint8_t p[ULS_FAB_REVERT_SIZE];

	uls_fab_revert_pack(&r, p);
	return fab_send_ctl(f, ULS_FAB_REVERT, p, sizeof(p));
}

void fab_iov_copy(uint8_t *dst, const struct iovec *iov, int iovcnt, size_t skip, size_t n)
{
	size_t done = 0;

	for (int i = 0; i < iovcnt && done < n; i++) {
		size_t l = iov[i].iov_len;
		if (skip >= l) {
			skip -= l;
			continue;
		}
		size_t take = l - skip < n - done ? l - skip : n - done;
		memcpy(dst + done, (const char *)iov[i].iov_base + skip, take);
		done += take;
		skip = 0;
	}
}

int fab_send_data(struct fab_conn *f, const struct iovec *iov, int iovcnt, size_t skip,
		  size_t n)
{
	uint8_t *slot;
	/* Longer than a small slot of the peer's takes a bulk one (fab_tx_room). */
	int bulk = peer_bulk(f) && n > SLOT_SIZE - FAB_HDR;
	struct fab_op *op = tx_op(bulk ? &fab.txb : &fab.txp, &slot);

	if (!op)
		return -EAGAIN;
	fab_iov_copy(slot + FAB_HDR, iov, iovcnt, skip, n);
	int r = conn_post(f, op, slot, ULS_FAB_DATA, n, 0);
	if (r == 0) {
		/* Kept until the peer's window returns it (fabric_int.h, txbuf). */
		size_t at = (size_t)(f->tx_fab % f->peer_window), first = f->peer_window - at;
		if (first > n)
			first = n;
		memcpy(f->txbuf + at, slot + FAB_HDR, first);
		memcpy(f->txbuf, slot + FAB_HDR + first, n - first);
		f->tx_fab += n;
	}
	return r;
}

/* ------------------------------------------------------------------ arrivals */

void fab_done(struct fab_conn *f)
{
	f->hs = HS_DONE;
	/* The reason names the provider on the fabric path (`ulsock stat`, the log), set
	 * first: whoever sees the path logs it (the accept that ran this progress, say). */
	snprintf(f->c->reason, sizeof(f->c->reason), "%s", fab.ep.prov);
	atomic_store(&f->c->path, ULS_PATH_FABRIC);
	fab_ring_offer(f);
	fab_news(f);
}

void fab_violation(struct fab_conn *f, const char *what)
{
	if (!f->err)
		uls_warn("fabric: the peer broke the protocol (%s): the connection is reset", what);
	f->err = ECONNRESET;
	fab_news(f);
}

/*
 * The peer's REVERT (9.10): its fabric stream ends where it says, which must be where it
 * is here; a leaving peer gets again, on TCP, what it had not read; a REQUEST is answered
 * at once, and from here this side sends on TCP only.
 */
static void revert_arrival(struct fab_conn *f, const uint8_t *p, uint32_t len)
{
	struct uls_fab_revert r;
	int peer_fab = f->peer_sw && f->peer_sw_pos != UINT64_MAX;

	if (uls_fab_revert_parse(&r, p, len) < 0 || f->peer_rev ||
	    (peer_fab && r.fabric_end != f->peer_sw_pos + f->rx_in))
		return fab_violation(f, "revert");
	if ((r.flags & ULS_FAB_REVERT_LEAVING) && f->tx_sw) {
		uint64_t end = f->tx_sw_pos + f->tx_fab;
		uint64_t from = r.rx_consumed > f->tx_sw_pos ? r.rx_consumed : f->tx_sw_pos;
		if (r.rx_consumed > end || from < f->tx_sw_pos + f->tx_ret)
			return fab_violation(f, "revert: consumed out of range");
		f->resend_from = from;
		f->resend_pending = 1;
	} else if (!(r.flags & ULS_FAB_REVERT_LEAVING) && f->rev && f->tx_sw &&
		   r.rx_consumed > f->tx_sw_pos + f->tx_fab) {
		return fab_violation(f, "revert: consumed out of range");
	}
	/* Its TCP bytes after the switch are the wake-ups it sent, one per SLEEP at most. */
	if (peer_fab && (r.tcp_pos < f->peer_sw_pos || r.tcp_pos - f->peer_sw_pos > f->sleeps ||
			 r.tcp_pos - f->peer_sw_pos < f->rx_wake))
		return fab_violation(f, "revert: TCP position");
	f->peer_rev = 1;
	f->peer_fab_end = peer_fab ? r.fabric_end : 0;
	f->peer_tcp_pos = r.tcp_pos;
	if (f->rev) {
		f->rev_answered = 1; /* the answer, or a REQUEST crossing ours */
	} else if (r.flags & ULS_FAB_REVERT_REQUEST) {
		/* A leaving peer may lose its memory once answered: its offers are copied
		 * first, and the answer goes after them (fab_run_pulls). */
		if (!fab_pull_later(f, 1))
			fab_send_revert(f, 0);
		f->tx_stop = 1;
	}
	fab_news(f);
}

int fab_stream_admits(struct fab_conn *f, uint32_t len)
{
	if (!f->peer_sw || f->peer_sw_pos == UINT64_MAX || f->fin || f->peer_rev) {
		fab_violation(f, "data outside its switch and FIN");
		return 0;
	}
	if (f->rev) { /* this side left: the peer sends it again on TCP */
		f->rx_in += len;
		f->rx_out = f->rx_in;
		return 0;
	}
	if (f->rx_in + len - f->rx_ret > f->rx_window) {
		fab_violation(f, "data beyond the window");
		return 0;
	}
	return 1;
}

/* A connection message for f whose header passed 9.11's stateless checks (9.6, 9.11). */
static void conn_arrival(struct fab_conn *f, const struct uls_fab_hdr *h, const uint8_t *p)
{
	if (f->err)
		return;
	if (h->seq != f->rx_seq)
		return fab_violation(f, "sequence");
	f->rx_seq++;
	if ((uint64_t)h->wnd > f->tx_fab - f->tx_ret)
		return fab_violation(f, "window returned beyond what was sent");
	f->tx_ret += h->wnd;
	fab_news(f);
	switch (h->type) {
	case ULS_FAB_DATA: {
		if (!fab_stream_admits(f, h->len))
			return;
		uint32_t at = (uint32_t)(f->rx_in & (f->rx_window - 1)), first = f->rx_window - at;
		if (first > h->len)
			first = h->len;
		memcpy(f->rxbuf + at, p, first);
		memcpy(f->rxbuf, p + first, h->len - first);
		f->rx_in += h->len;
		/* A peer asleep for space may wait for a send slot, which its provider frees
		 * when this side has taken the message (shm's long ones): its wake-up. */
		if (f->wake_want & ULS_FAB_WANT_SPACE)
			fab_wake_answer(f);
		return;
	}
	case ULS_FAB_CREDIT:
		return;
	case ULS_FAB_AVAIL:
		return fab_offer_arrival(f, p, h->len);
	case ULS_FAB_TAKEN:
		return fab_taken_arrival(f, p, h->len);
	case ULS_FAB_LEND:
		return fab_lend_arrival(f, p, h->len);
	case ULS_FAB_MOVED:
		return fab_moved_arrival(f, p, h->len);
	case ULS_FAB_RING:
		return fab_ring_arrival(f, p, h->len);
	case ULS_FAB_WROTE:
		fab_wrote_arrival(f, p, h->len);
		if (f->wake_want & ULS_FAB_WANT_SPACE)
			fab_wake_answer(f);
		return;
	case ULS_FAB_SWITCH: {
		struct uls_fab_switch sw;
		if (uls_fab_switch_parse(&sw, p, h->len) < 0 || f->peer_sw)
			return fab_violation(f, "switch");
		uint64_t pos = sw.pos;
		if (sw.flags & ULS_FAB_SWITCH_NONE)
			pos = UINT64_MAX;
		else if (pos < __atomic_load_n(&f->rx_tcp, __ATOMIC_RELAXED))
			return fab_violation(f, "switch behind the TCP bytes read");
		f->peer_sw = 1;
		f->peer_sw_pos = pos;
		if (f->hs == HS_SRV_ACCEPTED)
			fab_done(f);
		return;
	}
	case ULS_FAB_FIN: {
		struct uls_fab_fin fin;
		if (uls_fab_fin_parse(&fin, p, h->len) < 0 || !f->peer_sw ||
		    f->peer_sw_pos == UINT64_MAX || fin.pos != f->peer_sw_pos + f->rx_in ||
		    (f->fin && (f->peer_closed || !(fin.flags & ULS_FAB_FIN_CLOSE))))
			return fab_violation(f, "FIN"); /* a second one only says the close */
		f->fin = 1;
		f->fin_pos = fin.pos;
		f->peer_closed = (fin.flags & ULS_FAB_FIN_CLOSE) != 0;
		/* Its offers go with its memory: copied here now (fab_run_pulls). */
		if (f->peer_closed)
			fab_pull_later(f, 0);
		return;
	}
	case ULS_FAB_RESET:
		f->err = ECONNRESET;
		return;
	case ULS_FAB_REVERT:
		return revert_arrival(f, p, h->len);
	case ULS_FAB_SLEEP: {
		struct uls_fab_sleep s;
		if (uls_fab_sleep_parse(&s, p, h->len) < 0 || !f->peer_need_wake || !f->tx_sw ||
		    s.n != f->peer_sleeps + 1 || s.pos > f->tx_fab)
			return fab_violation(f, "SLEEP");
		f->peer_sleeps = s.n;
		f->wake_want = s.want;
		/* What it waits for may be on its way already: data past its position, a FIN;
		 * window this side owes goes back now, and the answer rides on it. */
		if ((s.want & ULS_FAB_WANT_DATA) && (s.pos < f->tx_fab || f->fin_sent))
			fab_wake_answer(f);
		else if ((s.want & ULS_FAB_WANT_SPACE) && f->rx_out > f->rx_ret)
			fab_send_credit(f);
		return;
	}
	default:
		return fab_violation(f, uls_fab_type_name(h->type));
	}
}

struct fab_held {
	struct uls_fab_hdr h;
	uint8_t p[];
};

void fab_held_free(struct fab_conn *f)
{
	if (!f->held)
		return;
	for (uint32_t i = 0; i < FAB_HOLD; i++)
		free(f->held[i]);
	free(f->held);
	f->held = NULL;
	f->held_n = f->held_bytes = 0;
}

/*
 * A message ahead of the next seq (9.6): a provider completed it before an earlier one.
 * It is copied and taken in turn, within FAB_HOLD messages and the connection's window:
 * beyond them, or twice the same seq, the peer broke the rules (9.11).
 */
static void hold_arrival(struct fab_conn *f, const struct uls_fab_hdr *h, const uint8_t *p)
{
	uint32_t ahead = h->seq - f->rx_seq, at = h->seq % FAB_HOLD;
	struct fab_held *m;

	if (ahead >= FAB_HOLD || (uint64_t)f->held_bytes + h->len > f->rx_window)
		return fab_violation(f, "sequence");
	if (!f->held && !(f->held = calloc(FAB_HOLD, sizeof(*f->held))))
		return fab_violation(f, "out of memory for a message ahead of its turn");
	if (f->held[at])
		return fab_violation(f, "sequence");
	if (!(m = malloc(sizeof(*m) + h->len)))
		return fab_violation(f, "out of memory for a message ahead of its turn");
	m->h = *h;
	memcpy(m->p, p, h->len);
	f->held[at] = m;
	f->held_n++;
	f->held_bytes += h->len;
}

/* A connection message, taken now if it is the next, then those held after it. */
static void conn_take(struct fab_conn *f, const struct uls_fab_hdr *h, const uint8_t *p)
{
	if (f->err)
		return;
	if (h->seq != f->rx_seq)
		return hold_arrival(f, h, p);
	conn_arrival(f, h, p);
	while (f->held_n && !f->err) {
		struct fab_held *m = f->held[f->rx_seq % FAB_HOLD];
		if (!m)
			return;
		f->held[f->rx_seq % FAB_HOLD] = NULL;
		f->held_n--;
		f->held_bytes -= m->h.len;
		conn_arrival(f, &m->h, m->p);
		free(m);
	}
}

/*
 * A connection's message from src (where the provider names sources, fab.ep.source): from
 * the connection's peer, or dropped (9.11). A sender with no entry in the address vector
 * is no peer of this process; one with an entry but another connection's tag cannot
 * reach that connection, nor end a closed one's lingering ring.
 */
static int from_peer(const struct fab_conn *f, fi_addr_t src)
{
	return !fab.ep.source || (src != FI_ADDR_NOTAVAIL && (!f || src == f->peer));
}

static void rx_done(struct fab_op *op, size_t len, fi_addr_t src)
{
	const uint8_t *slot = uls_fab_slot(op->pool, op->idx);
	struct uls_fab_hdr h;

	op->posted = 0;
	if (uls_fab_hdr_parse(&h, slot, len) == 0 &&
	    uls_fab_hdr_check(&h, op->cls, (uint32_t)op->pool->slot_size) == 0) {
		if (op->cls == FAB_CLASS_HS) {
			uls_dbg("fabric: %s arrived", uls_fab_type_name(h.type));
			fab_hs_arrival(&h, slot + FAB_HDR);
		} else {
			struct fab_conn *f = fab_by_tag(h.tag);
			if (!from_peer(f, src)) {
				uls_dbg("fabric: %s for a known tag from another source, dropped",
					uls_fab_type_name(h.type));
			} else if (f) {
				conn_take(f, &h, slot + FAB_HDR);
			} else {
				/* An unknown tag is a closed connection's late message: dropped
				 * (its lingering ring, the sender's, may go with it). */
				fab_ring_late(h.tag, h.type, fab.ep.source ? src : FI_ADDR_UNSPEC);
				fab_untaken_late(h.tag, h.type, slot + FAB_HDR, h.len);
			}
		}
	}
	if (op->cls != FAB_CLASS_CONN || later_max == 0)
		post_rx(op);
	else if ((later[later_n++] = op), later_n >= later_max)
		fab_repost();
}

/* RMA writes in flight (9.14): their operations, told apart by address. */
#define FAB_WRITES 64
static struct fab_op wr_ops[FAB_WRITES];
static uint64_t wr_busy; /* bit i: wr_ops[i] is posted */

int fab_write(struct fab_conn *f, const void *buf, size_t len, uint64_t addr, uint64_t key)
{
	if (wr_busy == ~0ull)
		return -EAGAIN;
	int i = __builtin_ctzll(~wr_busy);
	struct fab_op *op = &wr_ops[i];

	*op = (struct fab_op){.idx = (uint32_t)i, .len = (uint32_t)len, .tag = f->tag,
			      .dest = f->peer};
	ssize_t r = uls_fab_ep_write(&fab.ep, buf, len, f->peer, addr, key, &op->ctx);
	if (r != 0) {
		if (r != -FI_EAGAIN)
			uls_dbg("fabric: write of %zu bytes failed: %s", len, uls_fab_err((int)r));
		return r == -FI_EAGAIN ? -EAGAIN : -EIO;
	}
	wr_busy |= 1ull << i;
	f->tx_flight++;
	atomic_fetch_add(&fab.tx_posted, 1);
	return 0;
}

int fab_ctl_room(void)
{
	return fab.txp.nfree > 0;
}

static void tx_done(struct fab_op *op, int err)
{
	struct fab_conn *f = op->tag ? fab_by_tag(op->tag) : NULL;

	if (op->pool)
		uls_fab_pool_put(op->pool, op->idx);
	else
		wr_busy &= ~(1ull << op->idx);
	atomic_fetch_sub(&fab.tx_posted, 1);
	fab.tx_done++; /* a slot is free: senders waiting for one look again */
	if (f && f->tx_flight)
		f->tx_flight--;
	if (f)
		uls_bells_ring_others(&f->c->bells);
	if (!err)
		return;
	/* The pair failed (9.8): every connection to that peer ends. */
	fab_ring_pair_failed(op->dest);
	fab_untaken_pair_failed(op->dest);
	for (f = fab.conns; f; f = f->next)
		if (f->peer == op->dest && (f->hs == HS_DONE || f->hs == HS_SRV_ACCEPTED) &&
		    !f->err) {
			f->err = err == ETIMEDOUT ? ETIMEDOUT : ECONNRESET;
			fab_news(f);
		}
}

void fab_progress(void)
{
	fab_progress_at(0);
}

void fab_progress_at(uint64_t now)
{
	struct fi_cq_tagged_entry ev[16];
	fi_addr_t src[16];
	static int depth; /* fab.mu held: an answer sent from a dispatch does not recurse */

	if (fab.state <= 0 || fab.pid != uls_pid() || depth)
		return;
	depth = 1;
	int found = 0;
	for (int round = 0; round < 16; round++) {
		void *ectx = NULL;
		ssize_t n = uls_fab_ep_poll(&fab.ep, ev, 16, src, &ectx);
		if (n == 0)
			break;
		found = 1;
		if (n < 0) {
			struct fab_op *op = ectx;
			/* shm reports a failed read (the peer's memory gone) as an error without
			 * the operation's context: it is the one read in flight (fab_read). */
			if (!op && rd_state == RD_POSTED) {
				rd_state = (int)n;
				continue;
			}
			if (!op)
				break;
			if (op == &rd_op) {
				rd_state = (int)n;
			} else if (op->rx) {
				op->posted = 0;
				post_rx(op);
			} else {
				tx_done(op, (int)-n);
			}
			continue;
		}
		for (ssize_t i = 0; i < n; i++) {
			struct fab_op *op = ev[i].op_context;
			if (!op) /* none of ours: every operation here has a context */
				continue;
			if (op == &rd_op)
				rd_state = RD_DONE;
			else if (op->rx)
				rx_done(op, ev[i].len, src[i]);
			else
				tx_done(op, 0);
		}
		/* Fewer than asked: the queue is empty. Another read would cost the provider's
		 * progress again (a system call on tcp) and find nothing new but its own wake-up
		 * signal; the next call's read takes what comes meanwhile. */
		if (n < 16)
			break;
	}
	repost_all();
	if (!found && later_n)
		fab_repost();
	flush_deferred();
	depth = 0;
	fab.progressed_ns = now ? now : uls_now_ns();
	fab_run_pulls();
}

/* A ping-pong's send follows the receive's read by a microsecond or two. */
#define FAB_FRESH_NS 5000u

void fab_progress_fresh(void)
{
	if (uls_now_ns() - fab.progressed_ns >= FAB_FRESH_NS)
		fab_progress();
}

int fab_read(const struct iovec *local, size_t nl, const struct fi_rma_iov *remote, size_t nr,
	     fi_addr_t src)
{
	uint64_t until = 0;
	ssize_t r;

	if (rd_state == RD_POSTED) /* a read that never completed: none after it */
		return -EIO;
	rd_op = (struct fab_op){0};
	for (;;) {
		r = uls_fab_ep_read(&fab.ep, local, nl, remote, nr, src, &rd_op.ctx);
		if (r != -FI_EAGAIN)
			break;
		fab_progress();
		uint64_t now = uls_now_ns();
		if (!until)
			until = now + FAB_READ_NS;
		else if (now >= until)
			break;
	}
	if (r != 0)
		return r == -FI_EAGAIN ? -EAGAIN : -EIO;
	rd_state = RD_POSTED;
	/* The provider reads in this call (shm: process_vm_readv) and completes at once; the
	 * bound covers one that would wait for the peer, which no provider here does. */
	for (until = uls_now_ns() + FAB_READ_NS; rd_state == RD_POSTED;) {
		fab_progress();
		if (rd_state == RD_POSTED && uls_now_ns() >= until)
			return -ETIMEDOUT; /* rd_state stays posted: no later read */
	}
	r = rd_state;
	rd_state = RD_IDLE;
	return r == RD_DONE ? 0 : (int)(r < 0 ? r : -EIO);
}

void fab_flush(uint64_t ns)
{
	uint64_t end = 0;

	while (atomic_load(&fab.tx_posted)) {
		fab_progress();
		if (!atomic_load(&fab.tx_posted))
			return;
		uint64_t now = uls_now_ns();
		if (!end)
			end = now + ns;
		else if (now >= end)
			return;
	}
}

void fab_sleep_1ms(int may)
{
	struct pollfd p = {.fd = fab.ep.wait_fd, .events = POLLIN};

	if (may)
		uls_libc.poll(&p, 1, 1);
	else if (fab.ep.wait_fd < 0)
		uls_libc.poll(NULL, 0, 1);
}

_Atomic uint32_t fab_nap_ms;

uint64_t fab_nowake_nap(void)
{
	uint32_t ms = atomic_load(&fab_nap_ms);

	ms = fab_next_slice(ms);
	atomic_store(&fab_nap_ms, ms);
	return (uint64_t)ms * 1000000u;
}

int fab_trywait(void)
{
	struct fid *cq = &fab.ep.cq->fid;

	/* A fork child never touches the parent's objects (9.9): a trywait there would read
	 * the byte of the provider's signal pair that the parent's next trywait expects,
	 * and the parent would wait 10 s for it inside the provider. */
	if (fab.state <= 0 || fab.pid != uls_pid())
		return 0;
	fab_repost(); /* before a sleep */
	if (fab.ep.wait_fd < 0)
		return 0;
	for (int i = 0; i < 8; i++) {
		uls_inside_begin();
		int r = fi_trywait(fab.ep.fabric, &cq, 1);
		uls_inside_end();
		if (r == 0)
			return 1;
		fab_progress();
	}
	return 0;
}
