/* SPDX-License-Identifier: MIT */
/*
 * Setting a fabric connection up (docs/protocol.md 9.1 to 9.4): the gate each side applies
 * on its own, the client's exchange with the server host's directory, the server's
 * registration, and the handshake on the fabric, CONNECT, ACCEPT (or DECLINE, ABORT) and
 * the switch. Until both sides committed, every byte goes on TCP; a connection that does
 * not get through stays there, for a reason `ulsock stat` shows.
 */
#include "fabric_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../core/config.h"
#include "../../core/handshake.h"
#include "../../core/log.h"
#include "../../os/cpu.h"
#include "../../os/libc.h"
#include "policy.h"

/* How long a side waits for the other's next handshake message, ACCEPT or CONNECT
 * (ULSOCK_FABRIC_WAIT_MS, 10 s by default): long, because the peer's provider moves only
 * while its program calls in (a client that sleeps after connecting, as sockperf does for
 * 2 s, holds its CONNECT back until it wakes), and the wait costs little: the bytes go on
 * TCP meanwhile, and sleepers look at the handshake less often as it ages (fab_hs_nap_ms). */
static uint64_t hs_wait_ns(void)
{
	return (uint64_t)uls_cfg.fabric_wait_ms * 1000000ull;
}

/* The connection window: 512 KiB with bulk slots (eight of them in flight), 256 KiB with
 * small ones only (over rxm, whose connection the fresh machine saw reset in fabric_calls
 * big_send with 512 KiB: 64 eager messages in flight to a slow reader). */
#define WINDOW_BULK 524288u
#define WINDOW_SMALL 262144u
/* Where this side reads offers (9.6), whose bytes stay in the sender's memory: 2 MiB,
 * which a program's 1 MiB reads take in one go or two (txbuf and rxbuf are address space
 * that only used parts of make resident). */
#define WINDOW_READS 2097152u
/* Where this side takes writes (9.14): what the peer's kernel and this side's may hold
 * between them while this side's program makes no call. A write leaves with the sender's
 * call only as far as its socket takes it; the rest waits in its provider for its next
 * call, which a closing sender waits for 100 ms only (9.8). 512 KiB, as for bulk DATA;
 * more (1 and 2 MiB) measured no faster. */
#define WINDOW_WRITES 524288u


/* ------------------------------------------------------------------ the gate */

static pthread_once_t policy_once = PTHREAD_ONCE_INIT;
static struct uls_fab_policy policy;
uint8_t fab_key[ULS_FAB_KEY_MAX];
size_t fab_key_len;
static char key_why[64]; /* the key file was rejected: why */

/*
 * ULSOCK_FABRIC_KEY (protocol.md 9.1): a regular file, not a link, of the effective uid,
 * without group or other permissions, 32 to 1024 bytes. A rejected key keeps eligible
 * connections on TCP: never keyless in its place.
 */
static void key_load(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	ssize_t n = -1;

	if (fd < 0) {
		snprintf(key_why, sizeof(key_why), "%s", strerror(errno));
	} else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(key_why, sizeof(key_why), "not a regular file");
	} else if (st.st_uid != geteuid()) {
		snprintf(key_why, sizeof(key_why), "not owned by uid %u", (unsigned)geteuid());
	} else if (st.st_mode & 077) {
		snprintf(key_why, sizeof(key_why), "readable or writable by others (mode %03o)",
			 (unsigned)(st.st_mode & 0777));
	} else if (st.st_size < ULS_FAB_KEY_MIN || st.st_size > ULS_FAB_KEY_MAX ||
		   (n = read(fd, fab_key, ULS_FAB_KEY_MAX)) != st.st_size) {
		snprintf(key_why, sizeof(key_why), "not %d to %d bytes", ULS_FAB_KEY_MIN,
			 ULS_FAB_KEY_MAX);
	} else {
		fab_key_len = (size_t)n;
	}
	if (fd >= 0)
		uls_libc.close(fd);
	if (key_why[0])
		uls_warn("ULSOCK_FABRIC_KEY='%s': %s: connections stay on kernel TCP", path, key_why);
}

static void policy_load(void)
{
	char why[160];

	if (uls_fab_policy_parse(&policy, uls_cfg.fabric_peers, why, sizeof(why)) < 0)
		uls_warn("%s: the list is ignored, no connection uses the fabric", why);
	if (policy.n && uls_cfg.fabric_key)
		key_load(uls_cfg.fabric_key);
}

/* Loopback, link-local or multicast: never a fabric peer (9.1). */
static int special_addr(const struct sockaddr_storage *sa)
{
	if (sa->ss_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
		return (a >> 24) == 127 || (a >> 16) == 0xa9fe || (a >> 28) == 0xe || a == 0;
	}
	const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (IN6_IS_ADDR_V4MAPPED(a)) {
		struct sockaddr_storage v4 = {.ss_family = AF_INET};
		memcpy(&((struct sockaddr_in *)&v4)->sin_addr, &a->s6_addr[12], 4);
		return special_addr(&v4);
	}
	return IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_MULTICAST(a) ||
	       IN6_IS_ADDR_UNSPECIFIED(a);
}

/*
 * NOT_MINE with the list empty (nothing of the fabric happens at all), for a peer that is
 * never one, or for the directory port; DECLINED for a peer the list does not take.
 */
static enum uls_tp_answer gate(const struct sockaddr_storage *peer, uint16_t server_port,
			       char *why, size_t wlen)
{
	if (!uls_cfg.fabric_peers || !*uls_cfg.fabric_peers)
		return ULS_TP_NOT_MINE;
	pthread_once(&policy_once, policy_load);
	if (policy.n == 0 || special_addr(peer) || server_port == uls_cfg.fabric_port ||
	    uls_addr_port((const struct sockaddr *)peer) == uls_cfg.fabric_port)
		return ULS_TP_NOT_MINE;
	if (!uls_fab_policy_allows(&policy, (const struct sockaddr *)peer, server_port)) {
		snprintf(why, wlen, "fabric: peer not allow-listed");
		return ULS_TP_DECLINED;
	}
	if (key_why[0]) {
		snprintf(why, wlen, "fabric: key file rejected (%s)", key_why);
		return ULS_TP_DECLINED;
	}
	return ULS_TP_TAKEN;
}

/* A fab_conn for c, in the process's list; a server's with the Ns and view of its
 * registration reg, which a CONNECT may name as soon as it is listed (fab.mu held). */
static struct fab_conn *bind_conn(struct uls_conn *c, int fd, enum fab_hs hs,
				  const struct uls_fab_reg *reg)
{
	struct fab_conn *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->c = c;
	f->fd = fd;
	f->hs = hs;
	f->hs_since = uls_now_ns();
	f->dq.fd = -1;
	f->peer_sw_pos = UINT64_MAX;
	if (reg) {
		memcpy(f->ns, reg->where.ns, sizeof(f->ns));
		f->tuple = reg->tuple;
		f->hs_deadline = f->hs_since + hs_wait_ns();
	}
	pthread_mutex_init(&f->tx_mu, NULL);
	pthread_mutex_init(&f->rx_mu, NULL);
	memcpy(c->tp_state, &f, sizeof(f));
	c->tp = &uls_fabric_transport;
	atomic_store(&c->path, ULS_PATH_PENDING);
	f->next = fab.conns;
	fab.conns = f;
	fab.nconns++;
	return f;
}

enum uls_tp_answer fab_connect(struct uls_conn *c, int fd, const struct sockaddr *dst,
				      const struct uls_conn_hints *hints, char *why, size_t wlen)
{
	(void)hints;
	enum uls_tp_answer a =
		gate(&c->peer_sa, uls_addr_port((struct sockaddr *)&c->peer_sa), why, wlen);

	(void)dst;
	if (a != ULS_TP_TAKEN)
		return a;
	pthread_mutex_lock(&fab.mu);
	struct fab_conn *f = bind_conn(c, fd, HS_CLI_CONNECTING, NULL);
	pthread_mutex_unlock(&fab.mu);
	if (!f) {
		snprintf(why, wlen, "fabric: no fabric (out of memory)");
		return ULS_TP_DECLINED;
	}
	return ULS_TP_TAKEN;
}

/* Forgets f: off the process's lists (fab.mu held). */
void fab_unlist(struct fab_conn *f)
{
	for (struct fab_conn **p = &fab.conns; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			fab.nconns--;
			break;
		}
	if (f->tag) {
		if (fab_fin_untaken(f))
			fab_untaken_note(f);
		fab_tag_del(f);
	}
	f->tag = 0;
}

void fab_connect_failed(struct uls_conn *c)
{
	struct fab_conn *f = fab_of(c);

	pthread_mutex_lock(&fab.mu);
	fab_unlist(f);
	pthread_mutex_unlock(&fab.mu);
}

/* Opens the endpoint where this connection's own address is: 0, or -1 with why. */
static int need_endpoint(struct uls_conn *c, char *why, size_t wlen)
{
	int r = fab_open_at(&c->local_sa);

	if (r < 0)
		snprintf(why, wlen, "fabric: no fabric (%.60s)", fab.why);
	return r;
}

enum uls_tp_answer fab_accept(struct uls_conn *c, int fd, char *why, size_t wlen)
{
	struct uls_fab_reg reg;
	struct fab_conn *f;
	enum uls_tp_answer a =
		gate(&c->peer_sa, uls_addr_port((struct sockaddr *)&c->local_sa), why, wlen);
	int r;

	if (a != ULS_TP_TAKEN)
		return a;
	if ((r = uls_fab_reg_from_socket(&reg, fd)) < 0) {
		snprintf(why, wlen, "fabric: not registered (%s)", strerror(-r));
		return ULS_TP_DECLINED;
	}
	pthread_mutex_lock(&fab.mu);
	r = need_endpoint(c, why, wlen);
	if (r == 0) {
		getrandom(reg.where.ns, sizeof(reg.where.ns), 0);
		reg.where.addr_len = (uint16_t)fab.ep.addr_len;
		memcpy(reg.where.addr, fab.ep.addr, fab.ep.addr_len);
		snprintf(reg.where.provider, sizeof(reg.where.provider), "%s", fab.ep.prov);
		snprintf(reg.where.fabric, sizeof(reg.where.fabric), "%s", fab.ep.fabric_name);
		reg.where.flags = fab_key_len ? ULS_FAB_FLAG_KEY : 0;
		/* Listed before the REG leaves: the client's CONNECT may follow the OFFER at
		 * once, and another thread's progress may take it before this call returns
		 * (it used to find no Ns, and the client waited 10 s for an ACCEPT). */
		f = bind_conn(c, fd, HS_SRV_REG, &reg);
		if (!f) {
			snprintf(why, wlen, "fabric: no fabric (out of memory)");
			r = -1;
		}
	}
	pthread_mutex_unlock(&fab.mu);
	if (r < 0)
		return ULS_TP_DECLINED;
	char said[64];
	if (uls_fab_dir_register(&reg, uls_cfg.fabric_port, said, sizeof(said)) < 0) {
		snprintf(why, wlen, "fabric: not registered (%s)", said);
		/* No CONNECT can name an Ns the directory never had: back to how it was. */
		uls_fabric_transport.destroy(c);
		c->tp = &uls_kernel_transport;
		atomic_store(&c->path, ULS_PATH_PENDING);
		return ULS_TP_DECLINED;
	}
	pthread_mutex_lock(&fab.mu);
	/* A server busy accepting answers the CONNECTs of its earlier connections here too. */
	fab_progress();
	pthread_mutex_unlock(&fab.mu);
	return ULS_TP_TAKEN;
}

int fab_adopt(struct uls_conn *c, int fd)
{
	(void)c;
	(void)fd;
	return 0;
}

/* ------------------------------------------------------------------ the handshake */

/* Stays on TCP for why (fab.mu held). The conn learns it at its next call (fab_step). */
static void hs_fail(struct fab_conn *f, const char *fmt, const char *detail)
{
	fab_news(f);
	f->hs = HS_FAILED;
	snprintf(f->why, sizeof(f->why), fmt, detail);
	if (f->tag)
		fab_tag_del(f);
	f->tag = 0;
}

/* "fabric: declined (REASON)", or the table's own words for a tuple or key reason. */
static void hs_declined(struct fab_conn *f, uint32_t reason)
{
	if (reason == ULS_FAB_R_TUPLE)
		hs_fail(f, "fabric: 4-tuple mismatch%s", "");
	else if (reason == ULS_FAB_R_KEY || reason == ULS_FAB_R_MAC)
		hs_fail(f, "fabric: key mismatch%s", "");
	else
		hs_fail(f, "fabric: declined (%s)", uls_fab_reason_name(reason));
}

/*
 * Does this side sleep on wake-up bytes (9.7, NEED_WAKE)? Where the CQ has no wait
 * descriptor, on shm, where they are tested. udp;ofi_rxd keeps the 1..64 ms slices: a
 * writer blocked on a full window stalls there now and then, with or without SLEEP
 * (fabric_calls poll_full with the efficient profile: the data stops after the first
 * bulk message for 10 s), and SLEEP did not make it rarer.
 */
static int wakes_here(void)
{
	return fab.ep.wait_fd < 0 && strcmp(fab.ep.prov, "shm") == 0;
}

/* Sends CONNECT (tag 0) or ACCEPT (the client's tag) for f, with its MAC under a key. */
static int send_hello(struct fab_conn *f, int type)
{
	struct uls_fab_connect m = {
		.version = ULS_FAB_PROTO_VERSION,
		.flags = (fab_key_len ? ULS_FAB_CF_MAC : 0) |
			 (wakes_here() ? ULS_FAB_CF_NEED_WAKE : 0) |
			 (fab.ep.reads ? ULS_FAB_CF_READS : 0) |
			 (fab.ep.writes ? ULS_FAB_CF_WRITES : 0) |
			 (fab.untagged ? ULS_FAB_CF_UNTAGGED : 0),
		.slot_size = fab_slot_size(),
		.conn_window = f->rx_window,
		.tag = f->tag,
		.ep_id = fab.ep_id,
		.pair_grant = ULS_FAB_GRANT_NEW_PAIR,
		.addr_len = (uint16_t)fab.ep.addr_len,
	};
	struct uls_fab_hdr h = {.type = (uint8_t)type, .len = ULS_FAB_CONNECT_SIZE,
				.tag = type == ULS_FAB_CONNECT ? 0 : f->peer_tag};
	uint8_t msg[FAB_HDR + ULS_FAB_CONNECT_SIZE], *p = msg + FAB_HDR;

	uls_fab_tuple_unpack(&m.tuple, f->tuple.b);
	memcpy(m.nc, f->nc, sizeof(m.nc));
	memcpy(m.ns, f->ns, sizeof(m.ns));
	memcpy(m.addr, fab.ep.addr, fab.ep.addr_len);
	uls_fab_hdr_pack(&h, msg);
	uls_fab_connect_pack(&m, p);
	if (type == ULS_FAB_CONNECT) {
		uls_fab_connect_mac(fab_key, fab_key_len, p, p + ULS_FAB_MAC_COVERS);
		memcpy(f->connect_mac, p + ULS_FAB_MAC_COVERS, ULS_FAB_MAC_SIZE);
	} else {
		uls_fab_accept_mac(fab_key, fab_key_len, p, f->connect_mac, p + ULS_FAB_MAC_COVERS);
	}
	return fab_send(NULL, f->peer, FAB_CLASS_HS, msg, sizeof(msg));
}

/* A tag this process receives on, unused. */
static uint64_t new_tag(void)
{
	uint64_t t;

	do
		t = fab_random64();
	while (fab_by_tag(t));
	return t;
}

static int rx_setup(struct fab_conn *f)
{
	f->rx_window = fab.ep.reads    ? WINDOW_READS
		       : fab.ep.writes ? WINDOW_WRITES
		       : fab.rxb.nslots ? WINDOW_BULK
					: WINDOW_SMALL;
	f->rxbuf = malloc(f->rx_window);
	return f->rxbuf ? 0 : -1;
}

/* DECLINE (to tag, with Nc) or ABORT (tag 0, with Ns). */
static void send_short(fi_addr_t dest, int type, uint64_t tag, uint32_t reason,
		       const uint8_t *nonce)
{
	struct uls_fab_decline d = {.reason = reason};
	struct uls_fab_hdr h = {.type = (uint8_t)type, .len = ULS_FAB_DECLINE_SIZE, .tag = tag};
	uint8_t m[FAB_HDR + ULS_FAB_DECLINE_SIZE];

	memcpy(d.nonce, nonce, sizeof(d.nonce));
	uls_fab_hdr_pack(&h, m);
	uls_fab_decline_pack(&d, m + FAB_HDR);
	fab_send(NULL, dest, FAB_CLASS_HS, m, sizeof(m));
}

/* Server: a CONNECT, checked in 9.4's order; the first failure is DECLINEd. */
static void on_connect(const uint8_t *p, uint32_t len)
{
	struct uls_fab_connect m;
	struct fab_conn *f;
	uint8_t tuple[ULS_FAB_TUPLE_SIZE];
	fi_addr_t from;
	int parsed = uls_fab_connect_parse(&m, p, len), reason;

	if (parsed == -EMSGSIZE)
		return;
	for (f = fab.conns; f; f = f->next)
		if (f->hs == HS_SRV_REG && memcmp(f->ns, m.ns, sizeof(m.ns)) == 0)
			break;
	/* An unknown, used or stale Ns gets no answer and no address entry. */
	if (!f || uls_now_ns() > f->hs_deadline) {
		uls_dbg("fabric: a CONNECT for %s Ns: no answer", f ? "a stale" : "an unknown");
		return;
	}
	uls_fab_tuple_pack(&m.tuple, tuple);
	if (!m.tag || m.addr_len == 0 || m.addr_len > ULS_FAB_ADDR_MAX ||
	    fab_peer_addr(m.addr, m.addr_len, &from) < 0) {
		hs_fail(f, "fabric: declined (%s)", "PARAMS");
		return;
	}
	if (atomic_load(&f->c->closed) || uls_conn_maybe_shared(f->c))
		reason = ULS_FAB_R_CLOSED; /* closed, or another process holds it now (fork) */
	else if (memcmp(tuple, f->tuple.b, sizeof(tuple)) != 0)
		reason = ULS_FAB_R_TUPLE;
	else if (!(m.flags & ULS_FAB_CF_MAC) != !fab_key_len)
		reason = ULS_FAB_R_KEY;
	else if (fab_key_len && !uls_fab_connect_mac_ok(fab_key, fab_key_len, p))
		reason = ULS_FAB_R_MAC;
	else if (parsed < 0)
		reason = uls_fab_connect_check(&m);
	else if ((m.flags & ULS_FAB_CF_UNTAGGED) && !fab.ep.msg)
		reason = ULS_FAB_R_PARAMS; /* its connection slots are out of this side's reach */
	else if (rx_setup(f) < 0)
		reason = ULS_FAB_R_RESOURCES;
	else
		reason = 0;
	if (reason) {
		send_short(from, ULS_FAB_DECLINE, m.tag, (uint32_t)reason, m.nc);
		hs_declined(f, (uint32_t)reason);
		return;
	}
	f->peer = from;
	f->peer_tag = m.tag;
	f->peer_slot = m.slot_size;
	f->peer_window = m.conn_window;
	f->need_wake = wakes_here();
	f->peer_need_wake = (m.flags & ULS_FAB_CF_NEED_WAKE) != 0;
	f->peer_untagged = (m.flags & ULS_FAB_CF_UNTAGGED) != 0;
	f->reads = fab.ep.reads && (m.flags & ULS_FAB_CF_READS);
	f->writes = fab.ep.writes && (m.flags & ULS_FAB_CF_WRITES);
	if (!(f->txbuf = malloc(f->peer_window + FAB_GUARD))) {
		send_short(from, ULS_FAB_DECLINE, m.tag, ULS_FAB_R_RESOURCES, m.nc);
		hs_declined(f, ULS_FAB_R_RESOURCES);
		return;
	}
	memcpy(f->nc, m.nc, sizeof(f->nc));
	memcpy(f->connect_mac, m.mac, sizeof(f->connect_mac));
	f->tag = new_tag();
	fab_tag_add(f);
	if (send_hello(f, ULS_FAB_ACCEPT) < 0) {
		hs_fail(f, "fabric: declined (%s)", "RESOURCES");
		return;
	}
	/* From here the client's SWITCH must be honoured, however late (9.4). */
	f->hs = HS_SRV_ACCEPTED;
	f->hs_deadline = uls_now_ns() + hs_wait_ns();
	fab_news(f);
	uls_dbg("fabric: fd=%d CONNECT taken, ACCEPT sent %llu ms into the handshake", f->fd,
		fab_hs_age_ms(f, uls_now_ns()));
}

/* Client: an ACCEPT for the connection of tag, checked; ABORT when it fails. */
static void on_accept(uint64_t tag, const uint8_t *p, uint32_t len)
{
	struct fab_conn *f = fab_by_tag(tag);
	struct uls_fab_connect m;
	uint8_t tuple[ULS_FAB_TUPLE_SIZE];
	fi_addr_t from;

	if (!f || f->hs != HS_CLI_SENT)
		return;
	int bad = uls_fab_connect_parse(&m, p, len) < 0 || memcmp(m.nc, f->nc, 16) ||
		  memcmp(m.ns, f->ns, 16);
	if (!bad) {
		uls_fab_tuple_pack(&m.tuple, tuple);
		bad = memcmp(tuple, f->tuple.b, sizeof(tuple)) ||
		      fab_peer_addr(m.addr, m.addr_len, &from) < 0 || from != f->peer ||
		      !(m.flags & ULS_FAB_CF_MAC) != !fab_key_len ||
		      ((m.flags & ULS_FAB_CF_UNTAGGED) && !fab.ep.msg) ||
		      (fab_key_len &&
		       !uls_fab_accept_mac_ok(fab_key, fab_key_len, p, f->connect_mac));
	}
	if (!bad && !(f->txbuf = malloc((size_t)m.conn_window + FAB_GUARD)))
		bad = 1;
	if (bad) {
		send_short(f->peer, ULS_FAB_ABORT, 0, ULS_FAB_R_PARAMS, f->ns);
		hs_fail(f, "fabric: declined (%s)", "ACCEPT not valid");
		return;
	}
	f->peer_tag = m.tag;
	f->peer_slot = m.slot_size;
	f->peer_window = m.conn_window;
	f->need_wake = wakes_here();
	f->peer_need_wake = (m.flags & ULS_FAB_CF_NEED_WAKE) != 0;
	f->peer_untagged = (m.flags & ULS_FAB_CF_UNTAGGED) != 0;
	f->reads = fab.ep.reads && (m.flags & ULS_FAB_CF_READS);
	f->writes = fab.ep.writes && (m.flags & ULS_FAB_CF_WRITES);
	f->hs = HS_CLI_ACCEPTED;
	fab_news(f);
	uls_dbg("fabric: fd=%d ACCEPT taken %llu ms into the handshake", f->fd,
		fab_hs_age_ms(f, uls_now_ns()));
}

/* Client: a DECLINE of its CONNECT (the nonce proves it answers this one). */
static void on_decline(uint64_t tag, const uint8_t *p, uint32_t len)
{
	struct fab_conn *f = fab_by_tag(tag);
	struct uls_fab_decline d;

	if (f && f->hs == HS_CLI_SENT && uls_fab_decline_parse(&d, p, len) == 0 &&
	    memcmp(d.nonce, f->nc, sizeof(d.nonce)) == 0)
		hs_declined(f, d.reason);
}

/* Server: the client gave up after ACCEPT, before switching. */
static void on_abort(const uint8_t *p, uint32_t len)
{
	struct uls_fab_decline d;

	if (uls_fab_decline_parse(&d, p, len) < 0)
		return;
	for (struct fab_conn *f = fab.conns; f; f = f->next)
		if (f->hs == HS_SRV_ACCEPTED && !f->peer_sw &&
		    memcmp(f->ns, d.nonce, sizeof(d.nonce)) == 0) {
			hs_fail(f, "fabric: declined (%s)", "ABORT");
			return;
		}
}

void fab_hs_arrival(const struct uls_fab_hdr *h, const uint8_t *p)
{
	switch (h->type) {
	case ULS_FAB_CONNECT:
		return on_connect(p, h->len);
	case ULS_FAB_ACCEPT:
		return on_accept(h->tag, p, h->len);
	case ULS_FAB_DECLINE:
		return on_decline(h->tag, p, h->len);
	case ULS_FAB_ABORT:
		return on_abort(p, h->len);
	default: /* TAKEOVER, REVERT: not in this version */
		return;
	}
}

/* Client: the directory's OFFER came: CONNECT (fab.mu held). */
static void send_connect(struct fab_conn *f)
{
	const struct uls_fab_where *o = &f->dq.offer;

	if (strcmp(o->provider, fab.ep.prov) != 0) {
		hs_fail(f, "fabric: no fabric (the server's provider is %.40s)", o->provider);
		return;
	}
	if (!(o->flags & ULS_FAB_FLAG_KEY) != !fab_key_len) {
		hs_fail(f, "fabric: key mismatch%s", "");
		return;
	}
	if (fab_peer_addr(o->addr, o->addr_len, &f->peer) < 0 || rx_setup(f) < 0) {
		hs_fail(f, "fabric: no fabric (%s)", "the server's address");
		return;
	}
	memcpy(f->ns, o->ns, 16);
	getrandom(f->nc, sizeof(f->nc), 0);
	f->tag = new_tag();
	fab_tag_add(f);
	if (send_hello(f, ULS_FAB_CONNECT) < 0) {
		hs_fail(f, "fabric: no fabric (%s)", "CONNECT not sent");
		return;
	}
	f->hs = HS_CLI_SENT;
	f->hs_deadline = uls_now_ns() + hs_wait_ns();
	uls_dbg("fabric: fd=%d CONNECT sent", f->fd);
}

/* Client: the program's connection is up; the directory is asked (fab.mu held). */
static void start_dir(struct fab_conn *f, int fd)
{
	socklen_t len = sizeof(f->c->local_sa);
	struct uls_fab_tuple t;
	char why[96];

	if (getsockname(fd, (struct sockaddr *)&f->c->local_sa, &len) < 0 ||
	    uls_fab_tuple_make(&t, (struct sockaddr *)&f->c->local_sa,
			       (struct sockaddr *)&f->c->peer_sa) < 0) {
		hs_fail(f, "fabric: no fabric (%s)", "no local address");
		return;
	}
	f->tuple = t;
	if (need_endpoint(f->c, why, sizeof(why)) < 0) {
		hs_fail(f, "%.78s", why);
		return;
	}
	f->hs = HS_CLI_DIR;
	if (uls_fab_dirq_start(&f->dq, (struct sockaddr *)&f->c->local_sa,
			       (struct sockaddr *)&f->c->peer_sa, uls_cfg.fabric_port,
			       uls_now_ns()) < 0)
		hs_fail(f, "fabric: %.70s", f->dq.why);
}

/* The client's connect completed? (non-blocking: the program has not asked yet) */
static int connected_now(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	return getpeername(fd, (struct sockaddr *)&ss, &len) == 0;
}

/* Advances the handshake (fab.mu held); 1 when it is settled (done or failed). */
static int step_locked(struct fab_conn *f, int fd)
{
	uint64_t now = uls_now_ns();

	if (f->orphan && f->hs != HS_DONE && f->hs != HS_FAILED)
		hs_fail(f, "fabric: declined (%s)", "the socket moved to a forked child first");
	switch (f->hs) {
	case HS_CLI_CONNECTING:
		if (connected_now(fd))
			start_dir(f, fd);
		else
			return 0;
		if (f->hs != HS_CLI_DIR)
			return 1;
		/* fall through */
	case HS_CLI_DIR: {
		int r = uls_fab_dirq_step(&f->dq, now);
		if (r < 0)
			hs_fail(f, "fabric: %.70s", f->dq.why);
		if (r == 1) {
			uls_dbg("fabric: fd=%d the directory answered %llu ms into the handshake",
				f->fd, fab_hs_age_ms(f, now));
			uls_fab_dirq_fini(&f->dq);
			send_connect(f);
		}
		return f->hs == HS_FAILED;
	}
	case HS_CLI_SENT:
		fab_progress();
		if (f->hs == HS_CLI_SENT && now > f->hs_deadline) {
			send_short(f->peer, ULS_FAB_ABORT, 0, ULS_FAB_R_TIMEOUT, f->ns);
			hs_fail(f, "fabric: no answer on the fabric%s", "");
		}
		return f->hs != HS_CLI_SENT;
	case HS_SRV_REG:
		fab_progress();
		if (f->hs == HS_SRV_REG && now > f->hs_deadline)
			hs_fail(f, "fabric: no answer on the fabric%s", "");
		return f->hs != HS_SRV_REG;
	case HS_SRV_ACCEPTED:
		fab_progress();
		return f->hs != HS_SRV_ACCEPTED;
	default:
		return 1;
	}
}

void fab_maybe_switch(struct fab_conn *f)
{
	if (f->tx_sw || f->tx_never || f->hs != HS_DONE || atomic_load(&f->c->shut_wr))
		return;
	pthread_mutex_lock(&fab.mu);
	if (!f->err && fab_send_switch(f, f->tx_tcp) == 0) {
		f->tx_sw = 1;
		f->tx_sw_pos = f->tx_tcp;
	}
	pthread_mutex_unlock(&fab.mu);
}

/*
 * The peer moved the connection back (9.10): once what a leaving peer had not read has
 * gone again on TCP and its fabric stream has been read to its end, the connection is
 * kernel TCP's. Resends here only when no send is under way (it does them itself).
 */
static void peer_left(struct fab_conn *f, int fd)
{
	if (f->resend_pending && pthread_mutex_trylock(&f->tx_mu) == 0) {
		fab_resend(f, uls_conn_fd(f->c, fd), 1);
		pthread_mutex_unlock(&f->tx_mu);
	}
	pthread_mutex_lock(&fab.mu);
	int done = !f->resend_pending && !f->rev &&
		   (!f->peer_sw || f->peer_sw_pos == UINT64_MAX ||
		    f->peer_sw_pos + f->rx_out >= f->peer_fab_end) &&
		   fab_wakes_skipped(f, uls_conn_fd(f->c, fd));
	pthread_mutex_unlock(&fab.mu);
	if (done)
		uls_conn_set_kernel(f->c, fd, "moved back to kernel TCP (the peer asked)");
}

void fab_step(struct fab_conn *f, int fd)
{
	int settled, failed;

	if (atomic_load(&f->c->path) == ULS_PATH_KERNEL)
		return;
	if (__builtin_expect(f->announced, 1)) {
		if (__builtin_expect(f->peer_rev, 0))
			peer_left(f, fd);
		return;
	}
	pthread_mutex_lock(&fab.mu);
	settled = step_locked(f, fd);
	if (f->hs == HS_CLI_ACCEPTED)
		fab_done(f);
	failed = f->hs == HS_FAILED;
	pthread_mutex_unlock(&fab.mu);
	if (!settled)
		return;
	if (failed) {
		uls_fab_dirq_fini(&f->dq);
		char why[sizeof(f->why)];
		memcpy(why, f->why, sizeof(why));
		uls_conn_set_kernel(f->c, fd, why);
		return;
	}
	if (f->hs != HS_DONE)
		return;
	f->announced = 1;
	uls_conn_log_path(f->c, fd);
	/* The client switches its direction at once where no send is under way; so does a
	 * server whose peer sleeps on wake-up bytes (9.7), which it may ask for only once
	 * this side's stream is on the fabric (a server that only reads never sends). */
	if ((f->c->role == ULS_CLIENT || f->peer_need_wake) &&
	    pthread_mutex_trylock(&f->tx_mu) == 0) {
		fab_maybe_switch(f);
		pthread_mutex_unlock(&f->tx_mu);
	}
}

/*
 * A connect that completed at once: the handshake gets a short while here (after the
 * endpoint is open: the first connection loads libfabric), so that on a quiet network
 * most connections switch before their first byte. One that needs longer goes on in the
 * program's calls, its bytes on TCP meanwhile: a server that does not answer (it forked
 * the socket away and sits in accept) costs no time in connect().
 */
#define CONNECT_WAIT_NS 50000000ull

void fab_connected(struct uls_conn *c, int fd)
{
	struct fab_conn *f = fab_of(c);
	uint64_t until = 0;

	while (!f->announced && atomic_load(&c->path) != ULS_PATH_KERNEL) {
		fab_step(f, fd);
		if (f->announced || atomic_load(&c->path) == ULS_PATH_KERNEL)
			break;
		uint64_t now = uls_now_ns();
		if (!until && fab.state > 0)
			until = now + CONNECT_WAIT_NS;
		if (!until || now >= until)
			break;
		struct pollfd p[2];
		int n = 0;
		pthread_mutex_lock(&fab.mu);
		if (f->hs == HS_CLI_DIR && f->dq.fd >= 0)
			p[n++] = (struct pollfd){.fd = f->dq.fd, .events = f->dq.events};
		if (fab_trywait())
			p[n++] = (struct pollfd){.fd = fab.ep.wait_fd, .events = POLLIN};
		pthread_mutex_unlock(&fab.mu);
		uls_libc.poll(p, (nfds_t)n, 1);
	}
}

int fab_abandon(struct fab_conn *f)
{
	switch (f->hs) {
	case HS_CLI_CONNECTING:
	case HS_CLI_DIR:
	case HS_SRV_REG: /* a CONNECT that still comes meets an unknown Ns: no answer */
		break;
	case HS_CLI_SENT:
	case HS_CLI_ACCEPTED:
	case HS_DONE:
		/* The server switches only after the client's SWITCH: before it, ABORT. */
		if (f->c->role != ULS_CLIENT || f->tx_sw || f->peer_sw)
			return -EBUSY;
		send_short(f->peer, ULS_FAB_ABORT, 0, ULS_FAB_R_CLOSED, f->ns);
		break;
	case HS_FAILED:
		return 0;
	default:
		return -EBUSY;
	}
	uls_fab_dirq_fini(&f->dq);
	hs_fail(f, "%s", "fabric: moved back to kernel TCP before the switch");
	return 0;
}
