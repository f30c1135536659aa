/* SPDX-License-Identifier: MIT */
/* The fabric wire messages and their MACs (msg.h, docs/protocol.md 9.4, 9.5, 9.10). */
#include "msg.h"
#include "wire.h"

#include <errno.h>
#include <string.h>

#include "../../os/sha256.h"

/* Field offsets, as the tables of protocol.md give them. */
enum {
	H_TYPE = 0, H_FLAGS = 1, H_PCREDITS = 2, H_LEN = 4, H_TAG = 8, H_SEQ = 16, H_WND = 20,
};
enum {
	T_CLIENT = 0, T_SERVER = 16, T_CLIENT_PORT = 32, T_SERVER_PORT = 34,
};
enum {
	C_VERSION = 0, C_FLAGS = 2, C_SLOT = 4, C_TUPLE = 8, C_WINDOW = 44, C_NC = 48, C_NS = 64,
	C_TAG = 80, C_EP_ID = 88, C_GRANT = 96, C_ADDR_LEN = 98, C_RESERVED = 100, C_ADDR = 104,
	C_MAC = 360,
};
enum {
	K_TAG = 0, K_NEW_TAG = 8, K_EP_ID = 16, K_ADDR_LEN = 24, K_RESERVED = 26, K_REVERT = 32,
	K_ADDR = 64, K_PROOF = 320,
};
_Static_assert(H_WND + 4 == ULS_FAB_HDR_SIZE, "header layout");
_Static_assert(T_SERVER_PORT + 2 == ULS_FAB_TUPLE_SIZE, "4-tuple layout");
_Static_assert(C_TUPLE + ULS_FAB_TUPLE_SIZE == C_WINDOW, "CONNECT layout: tuple");
_Static_assert(C_ADDR + ULS_FAB_ADDR_MAX == C_MAC, "CONNECT layout: address");
_Static_assert(C_MAC == ULS_FAB_MAC_COVERS, "CONNECT layout: what the mac covers");
_Static_assert(C_MAC + ULS_FAB_MAC_SIZE == ULS_FAB_CONNECT_SIZE, "CONNECT layout: size");
_Static_assert(K_REVERT + ULS_FAB_REVERT_SIZE == K_ADDR, "TAKEOVER layout: REVERT fields");
_Static_assert(K_ADDR + ULS_FAB_ADDR_MAX == K_PROOF, "TAKEOVER layout: address");
_Static_assert(K_PROOF == ULS_FAB_PROOF_COVERS, "TAKEOVER layout: what the proof covers");
_Static_assert(K_PROOF + ULS_FAB_MAC_SIZE == ULS_FAB_TAKEOVER_SIZE, "TAKEOVER layout: size");
_Static_assert(ULS_FAB_SWITCH_SIZE == 16 && ULS_FAB_FIN_SIZE == 16 && ULS_FAB_SLEEP_SIZE == 16,
	       "SWITCH, FIN, SLEEP: a position and two words");

/* The labels of 9.4 and 9.10, in ASCII without terminator. */
static const char label_connect[] = "ulsock-fabric-1 connect";
static const char label_accept[] = "ulsock-fabric-1 accept";
static const char label_session[] = "ulsock-fabric-1 session";
static const char label_takeover[] = "ulsock-fabric-1 takeover";

/* Little-endian byte packing: the wire order is fixed whatever the host's. */

/*
 * The one copy out of untrusted memory: the length must be exactly the layout's, and the
 * decoding that follows reads only the private copy, so a peer rewriting its bytes
 * meanwhile cannot make two reads of one field disagree.
 */
static int copy_in(uint8_t *dst, size_t size, const void *buf, size_t len)
{
	if (len != size || (size > 0 && !buf))
		return -EMSGSIZE;
	memcpy(dst, buf, size);
	return 0;
}

/* Types */

struct type_info {
	const char *name;
	int class;
	int len; /* -1: variable (DATA) */
};

static const struct type_info *type_info(uint8_t type)
{
	static const struct type_info hs[] = {
		[ULS_FAB_CONNECT] = { "CONNECT", ULS_FAB_CLASS_HANDSHAKE, ULS_FAB_CONNECT_SIZE },
		[ULS_FAB_ACCEPT] = { "ACCEPT", ULS_FAB_CLASS_HANDSHAKE, ULS_FAB_CONNECT_SIZE },
		[ULS_FAB_DECLINE] = { "DECLINE", ULS_FAB_CLASS_HANDSHAKE, ULS_FAB_DECLINE_SIZE },
		[ULS_FAB_ABORT] = { "ABORT", ULS_FAB_CLASS_HANDSHAKE, ULS_FAB_DECLINE_SIZE },
		[ULS_FAB_TAKEOVER] = { "TAKEOVER", ULS_FAB_CLASS_HANDSHAKE, ULS_FAB_TAKEOVER_SIZE },
	};
	static const struct type_info conn[] = {
		[ULS_FAB_DATA - 0x10] = { "DATA", ULS_FAB_CLASS_CONN | ULS_FAB_CLASS_BULK, -1 },
		[ULS_FAB_CREDIT - 0x10] = { "CREDIT", ULS_FAB_CLASS_CONN, 0 },
		[ULS_FAB_SWITCH - 0x10] = { "SWITCH", ULS_FAB_CLASS_CONN, ULS_FAB_SWITCH_SIZE },
		[ULS_FAB_FIN - 0x10] = { "FIN", ULS_FAB_CLASS_CONN, ULS_FAB_FIN_SIZE },
		[ULS_FAB_SLEEP - 0x10] = { "SLEEP", ULS_FAB_CLASS_CONN, ULS_FAB_SLEEP_SIZE },
		/* Toward a TAKEOVER's sender, REVERT goes to its handshake slots (9.10). */
		[ULS_FAB_REVERT - 0x10] = { "REVERT", ULS_FAB_CLASS_CONN | ULS_FAB_CLASS_HANDSHAKE,
					    ULS_FAB_REVERT_SIZE },
		[ULS_FAB_RESET - 0x10] = { "RESET", ULS_FAB_CLASS_CONN, ULS_FAB_RESET_SIZE },
		[ULS_FAB_AVAIL - 0x10] = { "AVAIL", ULS_FAB_CLASS_CONN, ULS_FAB_AVAIL_SIZE },
		[ULS_FAB_TAKEN - 0x10] = { "TAKEN", ULS_FAB_CLASS_CONN, ULS_FAB_TAKEN_SIZE },
		[ULS_FAB_RING - 0x10] = { "RING", ULS_FAB_CLASS_CONN, ULS_FAB_RING_SIZE },
		[ULS_FAB_WROTE - 0x10] = { "WROTE", ULS_FAB_CLASS_CONN, ULS_FAB_WROTE_SIZE },
		[ULS_FAB_LEND - 0x10] = { "LEND", ULS_FAB_CLASS_CONN, ULS_FAB_LEND_SIZE },
		[ULS_FAB_MOVED - 0x10] = { "MOVED", ULS_FAB_CLASS_CONN, ULS_FAB_MOVED_SIZE },
	};

	if (type >= ULS_FAB_CONNECT && type <= ULS_FAB_TAKEOVER)
		return &hs[type];
	if (type >= ULS_FAB_DATA && type <= ULS_FAB_MOVED)
		return &conn[type - 0x10];
	return NULL;
}

int uls_fab_type_class(uint8_t type)
{
	const struct type_info *t = type_info(type);

	return t ? t->class : 0;
}

int uls_fab_payload_len(uint8_t type)
{
	const struct type_info *t = type_info(type);

	return t ? t->len : -1;
}

const char *uls_fab_type_name(uint8_t type)
{
	const struct type_info *t = type_info(type);

	return t ? t->name : "unknown";
}

const char *uls_fab_reason_name(uint32_t reason)
{
	static const char *const names[] = {
		[ULS_FAB_R_TUPLE] = "TUPLE",         [ULS_FAB_R_NONCE] = "NONCE",
		[ULS_FAB_R_KEY] = "KEY",             [ULS_FAB_R_MAC] = "MAC",
		[ULS_FAB_R_VERSION] = "VERSION",     [ULS_FAB_R_PARAMS] = "PARAMS",
		[ULS_FAB_R_RESOURCES] = "RESOURCES", [ULS_FAB_R_CLOSED] = "CLOSED",
		[ULS_FAB_R_TIMEOUT] = "TIMEOUT",
	};

	if (reason < ULS_FAB_R_TUPLE || reason > ULS_FAB_R_TIMEOUT)
		return "unknown";
	return names[reason];
}

/* Header */

void uls_fab_hdr_pack(const struct uls_fab_hdr *h, uint8_t out[ULS_FAB_HDR_SIZE])
{
	out[H_TYPE] = h->type;
	out[H_FLAGS] = h->flags;
	put16(out + H_PCREDITS, h->pcredits);
	put32(out + H_LEN, h->len);
	put64(out + H_TAG, h->tag);
	put32(out + H_SEQ, h->seq);
	put32(out + H_WND, h->wnd);
}

int uls_fab_hdr_parse(struct uls_fab_hdr *h, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_HDR_SIZE];

	if (len < ULS_FAB_HDR_SIZE || copy_in(b, sizeof(b), buf, sizeof(b)) != 0)
		return -EMSGSIZE;
	h->type = b[H_TYPE];
	h->flags = b[H_FLAGS];
	h->pcredits = get16(b + H_PCREDITS);
	h->len = get32(b + H_LEN);
	h->tag = get64(b + H_TAG);
	h->seq = get32(b + H_SEQ);
	h->wnd = get32(b + H_WND);
	/* A provider delivers whole messages: the payload is exactly what the header says. */
	return (uint64_t)len - ULS_FAB_HDR_SIZE == h->len ? 0 : -EMSGSIZE;
}

/* 9.5's tag column: 0 in CONNECT, ABORT and TAKEOVER, either in CREDIT (a pair-only one
 * is 0), the receiver's own (never 0) in the rest. */
static int tag_ok(const struct uls_fab_hdr *h)
{
	switch (h->type) {
	case ULS_FAB_CONNECT:
	case ULS_FAB_ABORT:
	case ULS_FAB_TAKEOVER:
		return h->tag == 0;
	case ULS_FAB_CREDIT:
		return 1;
	default:
		return h->tag != 0;
	}
}

int uls_fab_hdr_check(const struct uls_fab_hdr *h, int class_of_slot, uint32_t rx_slot_size)
{
	const struct type_info *t = type_info(h->type);

	if (!t || !(t->class & class_of_slot) || h->flags != 0 || !tag_ok(h))
		return -EPROTO;
	if (t->len >= 0 ? h->len != (uint32_t)t->len
			: h->len < 1 || rx_slot_size <= ULS_FAB_HDR_SIZE ||
				  h->len > rx_slot_size - ULS_FAB_HDR_SIZE)
		return -EPROTO;
	/*
	 * Credits and window travel only between the two ends of a connection: a handshake
	 * message (any source, unauthenticated header) must not move a pair's credits, and
	 * with tag 0 there is no connection whose window it could return.
	 */
	int handshake = t->class == ULS_FAB_CLASS_HANDSHAKE ||
			class_of_slot == ULS_FAB_CLASS_HANDSHAKE;
	if (handshake && (h->pcredits != 0 || h->wnd != 0))
		return -EPROTO;
	if (h->tag == 0 && h->wnd != 0)
		return -EPROTO;
	return 0;
}

/* 4-tuple */

void uls_fab_tuple_pack(const struct uls_fab_tuple4 *t, uint8_t out[ULS_FAB_TUPLE_SIZE])
{
	memcpy(out + T_CLIENT, t->client, sizeof(t->client));
	memcpy(out + T_SERVER, t->server, sizeof(t->server));
	put16(out + T_CLIENT_PORT, t->client_port);
	put16(out + T_SERVER_PORT, t->server_port);
}

void uls_fab_tuple_unpack(struct uls_fab_tuple4 *t, const uint8_t in[ULS_FAB_TUPLE_SIZE])
{
	memcpy(t->client, in + T_CLIENT, sizeof(t->client));
	memcpy(t->server, in + T_SERVER, sizeof(t->server));
	t->client_port = get16(in + T_CLIENT_PORT);
	t->server_port = get16(in + T_SERVER_PORT);
}

/* CONNECT and ACCEPT */

void uls_fab_connect_pack(const struct uls_fab_connect *c, uint8_t out[ULS_FAB_CONNECT_SIZE])
{
	put16(out + C_VERSION, c->version);
	put16(out + C_FLAGS, c->flags);
	put32(out + C_SLOT, c->slot_size);
	uls_fab_tuple_pack(&c->tuple, out + C_TUPLE);
	put32(out + C_WINDOW, c->conn_window);
	memcpy(out + C_NC, c->nc, sizeof(c->nc));
	memcpy(out + C_NS, c->ns, sizeof(c->ns));
	put64(out + C_TAG, c->tag);
	put64(out + C_EP_ID, c->ep_id);
	put16(out + C_GRANT, c->pair_grant);
	put16(out + C_ADDR_LEN, c->addr_len);
	put32(out + C_RESERVED, 0);
	memcpy(out + C_ADDR, c->addr, sizeof(c->addr));
	memcpy(out + C_MAC, c->mac, sizeof(c->mac));
}

static int pow2(uint32_t v)
{
	return v != 0 && (v & (v - 1)) == 0;
}

int uls_fab_connect_check(const struct uls_fab_connect *c)
{
	if (c->version != ULS_FAB_PROTO_VERSION)
		return ULS_FAB_R_VERSION;
	if ((c->flags & ~(ULS_FAB_CF_MAC | ULS_FAB_CF_NEED_WAKE | ULS_FAB_CF_READS |
			  ULS_FAB_CF_WRITES | ULS_FAB_CF_UNTAGGED)) != 0 ||
	    !pow2(c->slot_size) || c->slot_size < ULS_FAB_SLOT_MIN ||
	    c->slot_size > ULS_FAB_SLOT_MAX || c->conn_window < ULS_FAB_WINDOW_MIN ||
	    c->conn_window > ULS_FAB_WINDOW_MAX || c->pair_grant < 1 ||
	    c->pair_grant > ULS_FAB_GRANT_MAX || c->addr_len < 1 ||
	    c->addr_len > ULS_FAB_ADDR_MAX || c->reserved != 0 || c->tag == 0)
		return ULS_FAB_R_PARAMS;
	if (!(c->flags & ULS_FAB_CF_MAC) && !all_zero(c->mac, sizeof(c->mac)))
		return ULS_FAB_R_MAC;
	return 0;
}

int uls_fab_connect_parse(struct uls_fab_connect *c, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_CONNECT_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	c->version = get16(b + C_VERSION);
	c->flags = get16(b + C_FLAGS);
	c->slot_size = get32(b + C_SLOT);
	uls_fab_tuple_unpack(&c->tuple, b + C_TUPLE);
	c->conn_window = get32(b + C_WINDOW);
	memcpy(c->nc, b + C_NC, sizeof(c->nc));
	memcpy(c->ns, b + C_NS, sizeof(c->ns));
	c->tag = get64(b + C_TAG);
	c->ep_id = get64(b + C_EP_ID);
	c->pair_grant = get16(b + C_GRANT);
	c->addr_len = get16(b + C_ADDR_LEN);
	c->reserved = get32(b + C_RESERVED);
	memcpy(c->addr, b + C_ADDR, sizeof(c->addr));
	memcpy(c->mac, b + C_MAC, sizeof(c->mac));
	return uls_fab_connect_check(c) == 0 ? 0 : -EPROTO;
}

/* DECLINE and ABORT */

void uls_fab_decline_pack(const struct uls_fab_decline *d, uint8_t out[ULS_FAB_DECLINE_SIZE])
{
	put32(out, d->reason);
	put32(out + 4, 0);
	memcpy(out + 8, d->nonce, sizeof(d->nonce));
}

int uls_fab_decline_parse(struct uls_fab_decline *d, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_DECLINE_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	d->reason = get32(b);
	memcpy(d->nonce, b + 8, sizeof(d->nonce));
	if (get32(b + 4) != 0 || d->reason < ULS_FAB_R_TUPLE || d->reason > ULS_FAB_R_TIMEOUT)
		return -EPROTO;
	return 0;
}

/* SWITCH, FIN, SLEEP share one shape: a position, then two 32-bit words. */

static void pack_pos(uint8_t out[16], uint64_t pos, uint32_t a, uint32_t b)
{
	put64(out, pos);
	put32(out + 8, a);
	put32(out + 12, b);
}

static int parse_pos(const void *buf, size_t len, uint64_t *pos, uint32_t *a, uint32_t *b)
{
	uint8_t m[16];

	if (copy_in(m, sizeof(m), buf, len) != 0)
		return -EMSGSIZE;
	*pos = get64(m);
	*a = get32(m + 8);
	*b = get32(m + 12);
	return 0;
}

void uls_fab_switch_pack(const struct uls_fab_switch *s, uint8_t out[ULS_FAB_SWITCH_SIZE])
{
	pack_pos(out, s->pos, s->flags, 0);
}

int uls_fab_switch_parse(struct uls_fab_switch *s, const void *buf, size_t len)
{
	uint32_t reserved;

	if (parse_pos(buf, len, &s->pos, &s->flags, &reserved) != 0)
		return -EMSGSIZE;
	return (s->flags & ~ULS_FAB_SWITCH_NONE) != 0 || reserved != 0 ? -EPROTO : 0;
}

void uls_fab_fin_pack(const struct uls_fab_fin *f, uint8_t out[ULS_FAB_FIN_SIZE])
{
	pack_pos(out, f->pos, f->sleeps, f->flags);
}

int uls_fab_fin_parse(struct uls_fab_fin *f, const void *buf, size_t len)
{
	if (parse_pos(buf, len, &f->pos, &f->sleeps, &f->flags) != 0)
		return -EMSGSIZE;
	return (f->flags & ~ULS_FAB_FIN_CLOSE) != 0 ? -EPROTO : 0;
}

void uls_fab_sleep_pack(const struct uls_fab_sleep *s, uint8_t out[ULS_FAB_SLEEP_SIZE])
{
	pack_pos(out, s->pos, s->want, s->n);
}

int uls_fab_sleep_parse(struct uls_fab_sleep *s, const void *buf, size_t len)
{
	if (parse_pos(buf, len, &s->pos, &s->want, &s->n) != 0)
		return -EMSGSIZE;
	/* A sleeper waits for data, space or both, and counts its SLEEPs from 1 (9.7). */
	if (s->want == 0 || (s->want & ~(ULS_FAB_WANT_DATA | ULS_FAB_WANT_SPACE)) != 0 ||
	    s->n == 0)
		return -EPROTO;
	return 0;
}

/* REVERT, RESET */

void uls_fab_revert_pack(const struct uls_fab_revert *r, uint8_t out[ULS_FAB_REVERT_SIZE])
{
	put32(out, r->flags);
	put32(out + 4, 0);
	put64(out + 8, r->fabric_end);
	put64(out + 16, r->tcp_pos);
	put64(out + 24, r->rx_consumed);
}

int uls_fab_revert_parse(struct uls_fab_revert *r, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_REVERT_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	r->flags = get32(b);
	r->fabric_end = get64(b + 8);
	r->tcp_pos = get64(b + 16);
	r->rx_consumed = get64(b + 24);
	if ((r->flags & ~(ULS_FAB_REVERT_REQUEST | ULS_FAB_REVERT_LEAVING)) != 0 ||
	    get32(b + 4) != 0)
		return -EPROTO;
	return 0;
}

void uls_fab_reset_pack(const struct uls_fab_reset *r, uint8_t out[ULS_FAB_RESET_SIZE])
{
	put32(out, r->reason);
	put32(out + 4, 0);
}

int uls_fab_reset_parse(struct uls_fab_reset *r, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_RESET_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	r->reason = get32(b);
	return get32(b + 4) != 0 ? -EPROTO : 0;
}

/* AVAIL, TAKEN */

void uls_fab_avail_pack(const struct uls_fab_avail *a, uint8_t out[ULS_FAB_AVAIL_SIZE])
{
	put32(out, a->len);
	put32(out + 4, 0);
	put64(out + 8, a->addr);
	put64(out + 16, a->key);
	put64(out + 24, a->guard_addr);
	put64(out + 32, a->guard);
}

int uls_fab_avail_parse(struct uls_fab_avail *a, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_AVAIL_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	a->len = get32(b);
	a->addr = get64(b + 8);
	a->key = get64(b + 16);
	a->guard_addr = get64(b + 24);
	a->guard = get64(b + 32);
	return a->len == 0 || get32(b + 4) != 0 || a->guard == 0 ? -EPROTO : 0;
}

void uls_fab_taken_pack(const struct uls_fab_taken *t, uint8_t out[ULS_FAB_TAKEN_SIZE])
{
	put64(out, t->pos);
}

int uls_fab_taken_parse(struct uls_fab_taken *t, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_TAKEN_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	t->pos = get64(b);
	return 0;
}

/* LEND, MOVED */

void uls_fab_lend_pack(const struct uls_fab_lend *l, uint8_t out[ULS_FAB_LEND_SIZE])
{
	put32(out, l->len);
	put32(out + 4, 0);
	put64(out + 8, l->addr);
	put64(out + 16, l->key);
	put64(out + 24, l->guard_addr);
	put64(out + 32, l->guard_key);
	put64(out + 40, l->guard);
}

int uls_fab_lend_parse(struct uls_fab_lend *l, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_LEND_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	l->len = get32(b);
	l->addr = get64(b + 8);
	l->key = get64(b + 16);
	l->guard_addr = get64(b + 24);
	l->guard_key = get64(b + 32);
	l->guard = get64(b + 40);
	return l->len == 0 || get32(b + 4) != 0 || l->guard == 0 ? -EPROTO : 0;
}

void uls_fab_moved_pack(const struct uls_fab_moved *m, uint8_t out[ULS_FAB_MOVED_SIZE])
{
	put64(out, m->pos);
	put32(out + 8, m->len);
	put32(out + 12, 0);
	put64(out + 16, m->addr);
	put64(out + 24, m->key);
	put64(out + 32, m->guard_addr);
	put64(out + 40, m->guard);
}

int uls_fab_moved_parse(struct uls_fab_moved *m, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_MOVED_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	m->pos = get64(b);
	m->len = get32(b + 8);
	m->addr = get64(b + 16);
	m->key = get64(b + 24);
	m->guard_addr = get64(b + 32);
	m->guard = get64(b + 40);
	return m->len == 0 || get32(b + 12) != 0 || m->guard == 0 ? -EPROTO : 0;
}

/* RING, WROTE */

void uls_fab_ring_pack(const struct uls_fab_ring *r, uint8_t out[ULS_FAB_RING_SIZE])
{
	put64(out, r->addr);
	put64(out + 8, r->key);
	put32(out + 16, r->len);
	put32(out + 20, 0);
}

int uls_fab_ring_parse(struct uls_fab_ring *r, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_RING_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	r->addr = get64(b);
	r->key = get64(b + 8);
	r->len = get32(b + 16);
	return !pow2(r->len) || r->len < ULS_FAB_WINDOW_MIN || r->len > ULS_FAB_WINDOW_MAX ||
		       get32(b + 20) != 0
		   ? -EPROTO
		   : 0;
}

void uls_fab_wrote_pack(const struct uls_fab_wrote *w, uint8_t out[ULS_FAB_WROTE_SIZE])
{
	put32(out, w->len);
	put32(out + 4, 0);
}

int uls_fab_wrote_parse(struct uls_fab_wrote *w, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_WROTE_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	w->len = get32(b);
	return w->len == 0 || get32(b + 4) != 0 ? -EPROTO : 0;
}

/* TAKEOVER */

void uls_fab_takeover_pack(const struct uls_fab_takeover *t, uint8_t out[ULS_FAB_TAKEOVER_SIZE])
{
	put64(out + K_TAG, t->tag);
	put64(out + K_NEW_TAG, t->new_tag);
	put64(out + K_EP_ID, t->ep_id);
	put16(out + K_ADDR_LEN, t->addr_len);
	memset(out + K_RESERVED, 0, K_REVERT - K_RESERVED);
	uls_fab_revert_pack(&t->revert, out + K_REVERT);
	memcpy(out + K_ADDR, t->addr, sizeof(t->addr));
	memcpy(out + K_PROOF, t->proof, sizeof(t->proof));
}

int uls_fab_takeover_parse(struct uls_fab_takeover *t, const void *buf, size_t len)
{
	uint8_t b[ULS_FAB_TAKEOVER_SIZE];

	if (copy_in(b, sizeof(b), buf, len) != 0)
		return -EMSGSIZE;
	t->tag = get64(b + K_TAG);
	t->new_tag = get64(b + K_NEW_TAG);
	t->ep_id = get64(b + K_EP_ID);
	t->addr_len = get16(b + K_ADDR_LEN);
	int rc = uls_fab_revert_parse(&t->revert, b + K_REVERT, ULS_FAB_REVERT_SIZE);
	memcpy(t->addr, b + K_ADDR, sizeof(t->addr));
	memcpy(t->proof, b + K_PROOF, sizeof(t->proof));
	if (rc != 0 || t->revert.flags != (ULS_FAB_REVERT_REQUEST | ULS_FAB_REVERT_LEAVING) ||
	    t->tag == 0 || t->new_tag == 0 || t->addr_len < 1 || t->addr_len > ULS_FAB_ADDR_MAX ||
	    !all_zero(b + K_RESERVED, K_REVERT - K_RESERVED))
		return -EPROTO;
	return 0;
}

/* MACs */

/* HMAC(K, label ‖ a ‖ b), b optional: the shape of every MAC of 9.4 and 9.10. */
static void mac3(const void *key, size_t klen, const char *label, size_t label_len,
		 const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
		 uint8_t out[ULS_FAB_MAC_SIZE])
{
	struct uls_hmac_sha256 h;

	uls_hmac_sha256_init(&h, key, klen);
	uls_hmac_sha256_update(&h, label, label_len);
	uls_hmac_sha256_update(&h, a, alen);
	if (blen > 0)
		uls_hmac_sha256_update(&h, b, blen);
	uls_hmac_sha256_final(&h, out);
}

void uls_fab_connect_mac(const void *key, size_t klen,
			 const uint8_t payload[ULS_FAB_CONNECT_SIZE], uint8_t mac[ULS_FAB_MAC_SIZE])
{
	uint8_t m[ULS_FAB_MAC_SIZE] = { 0 };

	/* Computed aside: mac may be the payload's own field, which follows what it covers. */
	if (klen > 0)
		mac3(key, klen, label_connect, sizeof(label_connect) - 1, payload,
		     ULS_FAB_MAC_COVERS, NULL, 0, m);
	memcpy(mac, m, sizeof(m));
}

void uls_fab_accept_mac(const void *key, size_t klen, const uint8_t payload[ULS_FAB_CONNECT_SIZE],
			const uint8_t connect_mac[ULS_FAB_MAC_SIZE], uint8_t mac[ULS_FAB_MAC_SIZE])
{
	uint8_t m[ULS_FAB_MAC_SIZE] = { 0 };

	if (klen > 0)
		mac3(key, klen, label_accept, sizeof(label_accept) - 1, payload,
		     ULS_FAB_MAC_COVERS, connect_mac, ULS_FAB_MAC_SIZE, m);
	memcpy(mac, m, sizeof(m));
}

int uls_fab_connect_mac_ok(const void *key, size_t klen,
			   const uint8_t payload[ULS_FAB_CONNECT_SIZE])
{
	uint8_t m[ULS_FAB_MAC_SIZE];

	uls_fab_connect_mac(key, klen, payload, m);
	return uls_sha256_equal(m, payload + C_MAC);
}

int uls_fab_accept_mac_ok(const void *key, size_t klen, const uint8_t payload[ULS_FAB_CONNECT_SIZE],
			  const uint8_t connect_mac[ULS_FAB_MAC_SIZE])
{
	uint8_t m[ULS_FAB_MAC_SIZE];

	uls_fab_accept_mac(key, klen, payload, connect_mac, m);
	return uls_sha256_equal(m, payload + C_MAC);
}

void uls_fab_session_secret(const void *key, size_t klen, const uint8_t nc[ULS_FAB_NONCE_SIZE],
			    const uint8_t ns[ULS_FAB_NONCE_SIZE], uint64_t tag_c, uint64_t tag_s,
			    uint8_t ks[ULS_FAB_MAC_SIZE])
{
	uint8_t in[2 * ULS_FAB_NONCE_SIZE + 16];

	memcpy(in, nc, ULS_FAB_NONCE_SIZE);
	memcpy(in + ULS_FAB_NONCE_SIZE, ns, ULS_FAB_NONCE_SIZE);
	put64(in + 2 * ULS_FAB_NONCE_SIZE, tag_c);
	put64(in + 2 * ULS_FAB_NONCE_SIZE + 8, tag_s);
	mac3(key, klen, label_session, sizeof(label_session) - 1, in, sizeof(in), NULL, 0, ks);
}

void uls_fab_takeover_proof(const uint8_t ks[ULS_FAB_MAC_SIZE],
			    const uint8_t payload[ULS_FAB_TAKEOVER_SIZE],
			    uint8_t proof[ULS_FAB_MAC_SIZE])
{
	uint8_t m[ULS_FAB_MAC_SIZE];

	mac3(ks, ULS_FAB_MAC_SIZE, label_takeover, sizeof(label_takeover) - 1, payload,
	     ULS_FAB_PROOF_COVERS, NULL, 0, m);
	memcpy(proof, m, sizeof(m));
}

int uls_fab_takeover_proof_ok(const uint8_t ks[ULS_FAB_MAC_SIZE],
			      const uint8_t payload[ULS_FAB_TAKEOVER_SIZE])
{
	uint8_t m[ULS_FAB_MAC_SIZE];

	uls_fab_takeover_proof(ks, payload, m);
	return uls_sha256_equal(m, payload + K_PROOF);
}
