/* SPDX-License-Identifier: MIT */
/*
 * The fabric wire messages (src/transport/fabric/msg.h, docs/protocol.md 9.4, 9.5, 9.10):
 * the header's and CONNECT's bytes against hand-written expected bytes, so the layout of
 * protocol.md is pinned; round trips of every message; every kind of rejection; and the
 * MACs: known answers computed apart from this code (Python's hmac over the same bytes),
 * determinism, and that each byte they cover changes them and no other does.
 */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "os/sha256.h"
#include "transport/fabric/msg.h"

static const uint8_t key[32] = {
	0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
};

static void unhex(uint8_t *out, const char *hex, size_t n)
{
	CHECK_U64(strlen(hex), ==, 2 * n);
	for (size_t i = 0; i < n; i++) {
		unsigned int v;
		CHECK_EQ(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* Header */

static void header_layout(void)
{
	struct uls_fab_hdr h = {
		.type = ULS_FAB_DATA, .flags = 0, .pcredits = 0x0102, .len = 5,
		.tag = 0x1122334455667788ull, .seq = 0xa1a2a3a4, .wnd = 0xb1b2b3b4,
	};
	static const uint8_t want[ULS_FAB_HDR_SIZE] = {
		0x10, 0x00, 0x02, 0x01,                         /* type, flags, pcredits */
		0x05, 0x00, 0x00, 0x00,                         /* len */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* tag */
		0xa4, 0xa3, 0xa2, 0xa1,                         /* seq */
		0xb4, 0xb3, 0xb2, 0xb1,                         /* wnd */
	};
	uint8_t msg[ULS_FAB_HDR_SIZE + 5] = { 0 };
	struct uls_fab_hdr back;

	check_context("header layout");
	uls_fab_hdr_pack(&h, msg);
	CHECK_MEM(msg, want, sizeof(want));
	memset(&back, 0xee, sizeof(back));
	CHECK_EQ(uls_fab_hdr_parse(&back, msg, sizeof(msg)), 0);
	CHECK_EQ(back.type, h.type);
	CHECK_EQ(back.flags, 0);
	CHECK_U64(back.pcredits, ==, h.pcredits);
	CHECK_U64(back.len, ==, h.len);
	CHECK_U64(back.tag, ==, h.tag);
	CHECK_U64(back.seq, ==, h.seq);
	CHECK_U64(back.wnd, ==, h.wnd);
	CHECK_EQ(uls_fab_hdr_check(&back, ULS_FAB_CLASS_CONN, 8192), 0);

	/* The message must be exactly the header and its `len` payload bytes. */
	CHECK_EQ(uls_fab_hdr_parse(&back, msg, sizeof(msg) - 1), -EMSGSIZE);
	CHECK_EQ(uls_fab_hdr_parse(&back, msg, sizeof(msg) + 0), 0);
	CHECK_EQ(uls_fab_hdr_parse(&back, msg, ULS_FAB_HDR_SIZE), -EMSGSIZE);
	CHECK_EQ(uls_fab_hdr_parse(&back, msg, ULS_FAB_HDR_SIZE - 1), -EMSGSIZE);
	CHECK_EQ(uls_fab_hdr_parse(&back, NULL, 0), -EMSGSIZE);
	/* A len near 2^32 cannot wrap into a match. */
	h.len = 0xffffffff;
	uls_fab_hdr_pack(&h, msg);
	CHECK_EQ(uls_fab_hdr_parse(&back, msg, sizeof(msg)), -EMSGSIZE);
}

static int hdr(uint8_t type, uint32_t len, uint64_t tag, uint16_t pcredits, uint32_t wnd,
	       int class, uint32_t slot)
{
	struct uls_fab_hdr h = {
		.type = type, .len = len, .tag = tag, .pcredits = pcredits, .wnd = wnd, .seq = 7,
	};

	return uls_fab_hdr_check(&h, class, slot);
}

static void header_rules(void)
{
	const int HS = ULS_FAB_CLASS_HANDSHAKE, CO = ULS_FAB_CLASS_CONN, BOTH = HS | CO;
	static const uint8_t unknown[] = { 0x00, 0x06, 0x07, 0x0f, 0x1d, 0x20, 0x80, 0xff };
	static const uint8_t types[] = {
		ULS_FAB_CONNECT, ULS_FAB_ACCEPT, ULS_FAB_DECLINE, ULS_FAB_ABORT, ULS_FAB_TAKEOVER,
		ULS_FAB_CREDIT, ULS_FAB_SWITCH, ULS_FAB_FIN, ULS_FAB_SLEEP, ULS_FAB_REVERT,
		ULS_FAB_RESET, ULS_FAB_AVAIL, ULS_FAB_TAKEN, ULS_FAB_RING, ULS_FAB_WROTE,
		ULS_FAB_LEND, ULS_FAB_MOVED,
	};

	for (size_t i = 0; i < sizeof(unknown); i++) {
		check_context("unknown type %#x", unknown[i]);
		CHECK_EQ(uls_fab_type_class(unknown[i]), 0);
		CHECK_EQ(hdr(unknown[i], 0, 1, 0, 0, BOTH, 8192), -EPROTO);
	}
	/* Every fixed-size type: right length passes in its class only; +-1 fails. */
	for (size_t i = 0; i < sizeof(types); i++) {
		uint8_t t = types[i];
		int cls = uls_fab_type_class(t), len = uls_fab_payload_len(t);
		uint64_t tag = t == ULS_FAB_CONNECT || t == ULS_FAB_ABORT ||
				       t == ULS_FAB_TAKEOVER ? 0 : 42;

		check_context("type %s", uls_fab_type_name(t));
		CHECK(len >= 0);
		CHECK_EQ(hdr(t, (uint32_t)len, tag, 0, 0, cls, 8192), 0);
		CHECK_EQ(hdr(t, (uint32_t)len, tag, 0, 0, BOTH, 8192), 0);
		CHECK_EQ(hdr(t, (uint32_t)len + 1, tag, 0, 0, cls, 8192), -EPROTO);
		if (len > 0)
			CHECK_EQ(hdr(t, (uint32_t)len - 1, tag, 0, 0, cls, 8192), -EPROTO);
		if (cls != BOTH)
			CHECK_EQ(hdr(t, (uint32_t)len, tag, 0, 0, BOTH & ~cls, 8192), -EPROTO);
		/* flags: 0 in version 1, every bit. */
		for (int bit = 0; bit < 8; bit++) {
			struct uls_fab_hdr h = { .type = t, .len = (uint32_t)len, .tag = tag,
						 .flags = (uint8_t)(1 << bit) };
			CHECK_EQ(uls_fab_hdr_check(&h, cls, 8192), -EPROTO);
		}
		/* tag: 0 exactly where 9.5 says, either way in CREDIT. */
		if (t == ULS_FAB_CREDIT)
			CHECK_EQ(hdr(t, 0, 0, 5, 0, cls, 8192), 0);
		else
			CHECK_EQ(hdr(t, (uint32_t)len, tag ? 0 : 42, 0, 0, cls, 8192), -EPROTO);
	}

	check_context("DATA lengths");
	CHECK_EQ(hdr(ULS_FAB_DATA, 1, 9, 0, 0, CO, 8192), 0);
	/* Bulk slots (9.2): DATA only, up to their own size. */
	CHECK_EQ(hdr(ULS_FAB_DATA, 65536 - 24, 9, 0, 0, ULS_FAB_CLASS_BULK, 65536), 0);
	CHECK_EQ(hdr(ULS_FAB_DATA, 65536 - 23, 9, 0, 0, ULS_FAB_CLASS_BULK, 65536), -EPROTO);
	for (size_t i = 0; i < sizeof(types); i++) {
		uint8_t t = types[i];
		check_context("type %s in a bulk slot", uls_fab_type_name(t));
		CHECK_EQ(hdr(t, (uint32_t)uls_fab_payload_len(t), 42, 0, 0, ULS_FAB_CLASS_BULK,
			     65536), -EPROTO);
	}
	check_context("DATA lengths");
	CHECK_EQ(hdr(ULS_FAB_DATA, 8192 - 24, 9, 0, 0, CO, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_DATA, 8192 - 23, 9, 0, 0, CO, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_DATA, 0, 9, 0, 0, CO, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_DATA, 2048 - 24, 9, 0, 0, CO, 2048), 0);
	CHECK_EQ(hdr(ULS_FAB_DATA, 2048 - 23, 9, 0, 0, CO, 2048), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_DATA, 1, 9, 0, 0, CO, 24), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_DATA, 1, 9, 0, 0, CO, 0), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_DATA, 100, 9, 0, 0, HS, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_DATA, 100, 0, 0, 0, CO, 8192), -EPROTO);
	CHECK_EQ(uls_fab_payload_len(ULS_FAB_DATA), -1);

	check_context("credits and window");
	CHECK_EQ(hdr(ULS_FAB_DATA, 100, 9, 4096, 1 << 20, CO, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_CREDIT, 0, 0, 16, 0, CO, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_CREDIT, 0, 0, 16, 1, CO, 8192), -EPROTO); /* wnd without tag */
	CHECK_EQ(hdr(ULS_FAB_CREDIT, 0, 9, 16, 1, CO, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_ACCEPT, ULS_FAB_CONNECT_SIZE, 9, 1, 0, HS, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_ACCEPT, ULS_FAB_CONNECT_SIZE, 9, 0, 1, HS, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_CONNECT, ULS_FAB_CONNECT_SIZE, 0, 0, 1, BOTH, 8192), -EPROTO);
	/* REVERT: returns credits on a connection slot, nothing on a handshake one. */
	CHECK_EQ(hdr(ULS_FAB_REVERT, ULS_FAB_REVERT_SIZE, 9, 3, 100, CO, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_REVERT, ULS_FAB_REVERT_SIZE, 9, 3, 0, HS, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_REVERT, ULS_FAB_REVERT_SIZE, 9, 0, 100, HS, 8192), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_REVERT, ULS_FAB_REVERT_SIZE, 9, 0, 0, HS, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_REVERT, ULS_FAB_REVERT_SIZE, 0, 0, 0, HS, 8192), -EPROTO);
	/* No class at all takes nothing. */
	CHECK_EQ(hdr(ULS_FAB_RESET, ULS_FAB_RESET_SIZE, 9, 0, 0, 0, 8192), -EPROTO);
}

static void types_and_reasons(void)
{
	static const struct {
		uint8_t type;
		const char *name;
		int class, len;
	} t[] = {
		{ 0x01, "CONNECT", ULS_FAB_CLASS_HANDSHAKE, 392 },
		{ 0x02, "ACCEPT", ULS_FAB_CLASS_HANDSHAKE, 392 },
		{ 0x03, "DECLINE", ULS_FAB_CLASS_HANDSHAKE, 24 },
		{ 0x04, "ABORT", ULS_FAB_CLASS_HANDSHAKE, 24 },
		{ 0x05, "TAKEOVER", ULS_FAB_CLASS_HANDSHAKE, 352 },
		{ 0x10, "DATA", ULS_FAB_CLASS_CONN | ULS_FAB_CLASS_BULK, -1 },
		{ 0x11, "CREDIT", ULS_FAB_CLASS_CONN, 0 },
		{ 0x12, "SWITCH", ULS_FAB_CLASS_CONN, 16 },
		{ 0x13, "FIN", ULS_FAB_CLASS_CONN, 16 },
		{ 0x14, "SLEEP", ULS_FAB_CLASS_CONN, 16 },
		{ 0x15, "REVERT", ULS_FAB_CLASS_CONN | ULS_FAB_CLASS_HANDSHAKE, 32 },
		{ 0x16, "RESET", ULS_FAB_CLASS_CONN, 8 },
		{ 0x17, "AVAIL", ULS_FAB_CLASS_CONN, 40 },
		{ 0x18, "TAKEN", ULS_FAB_CLASS_CONN, 8 },
		{ 0x19, "RING", ULS_FAB_CLASS_CONN, 24 },
		{ 0x1a, "WROTE", ULS_FAB_CLASS_CONN, 8 },
		{ 0x1b, "LEND", ULS_FAB_CLASS_CONN, 48 },
		{ 0x1c, "MOVED", ULS_FAB_CLASS_CONN, 48 },
	};
	static const char *const reasons[] = {
		"TUPLE", "NONCE", "KEY", "MAC", "VERSION",
		"PARAMS", "RESOURCES", "CLOSED", "TIMEOUT",
	};
	int known = 0;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		check_context("type %#x", t[i].type);
		CHECK(strcmp(uls_fab_type_name(t[i].type), t[i].name) == 0);
		CHECK_EQ(uls_fab_type_class(t[i].type), t[i].class);
		CHECK_EQ(uls_fab_payload_len(t[i].type), t[i].len);
	}
	for (int v = 0; v < 256; v++)
		known += uls_fab_type_class((uint8_t)v) != 0;
	CHECK_EQ(known, 18);
	CHECK(strcmp(uls_fab_type_name(0x1d), "unknown") == 0);
	for (uint32_t r = 1; r <= 9; r++) {
		check_context("reason %u", r);
		CHECK(strcmp(uls_fab_reason_name(r), reasons[r - 1]) == 0);
	}
	CHECK(strcmp(uls_fab_reason_name(0), "unknown") == 0);
	CHECK(strcmp(uls_fab_reason_name(10), "unknown") == 0);
	CHECK(strcmp(uls_fab_reason_name(0xffffffff), "unknown") == 0);
	CHECK_EQ(ULS_FAB_R_TUPLE, 1);
	CHECK_EQ(ULS_FAB_R_TIMEOUT, 9);
}

/* CONNECT and ACCEPT */

/* The CONNECT of connect_layout(), also the input of the MAC known answers. */
static struct uls_fab_connect sample_connect(void)
{
	struct uls_fab_connect c;

	memset(&c, 0, sizeof(c));
	c.version = 1;
	c.flags = ULS_FAB_CF_MAC | ULS_FAB_CF_NEED_WAKE;
	c.slot_size = 8192;
	c.tuple.client[10] = c.tuple.client[11] = 0xff;
	c.tuple.client[12] = 10;
	c.tuple.client[15] = 1;
	c.tuple.server[10] = c.tuple.server[11] = 0xff;
	c.tuple.server[12] = 10;
	c.tuple.server[15] = 2;
	c.tuple.client_port = 40000;
	c.tuple.server_port = 5201;
	c.conn_window = 256 * 1024;
	for (int i = 0; i < 16; i++) {
		c.nc[i] = (uint8_t)(0xc0 + i);
		c.ns[i] = (uint8_t)(0xd0 + i);
		c.addr[i] = (uint8_t)(0x20 + i);
	}
	c.tag = 0x0102030405060708ull;
	c.ep_id = 0xf0e0d0c0b0a09080ull;
	c.pair_grant = 64;
	c.addr_len = 16;
	return c;
}

static void connect_layout(void)
{
	static const uint8_t head[104] = {
		0x01, 0x00,             /* version 1 */
		0x03, 0x00,             /* flags MAC | NEED_WAKE */
		0x00, 0x20, 0x00, 0x00, /* slot_size 8192 */
		/* 4-tuple at 8: ::ffff:10.0.0.1, ::ffff:10.0.0.2, ports 40000, 5201 */
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2,
		0x40, 0x9c, 0x51, 0x14,
		0x00, 0x00, 0x04, 0x00, /* conn_window at 44: 256 KiB */
		/* Nc at 48, Ns at 64 */
		0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd,
		0xce, 0xcf,
		0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd,
		0xde, 0xdf,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* tag at 80 */
		0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0, /* ep_id at 88 */
		0x40, 0x00,             /* pair_grant 64 at 96 */
		0x10, 0x00,             /* addr_len 16 at 98 */
		0x00, 0x00, 0x00, 0x00, /* reserved at 100 */
	};
	struct uls_fab_connect c = sample_connect(), back;
	uint8_t p[ULS_FAB_CONNECT_SIZE];

	check_context("CONNECT layout");
	for (int i = 0; i < 32; i++)
		c.mac[i] = (uint8_t)(0x60 + i);
	memset(p, 0xaa, sizeof(p));
	uls_fab_connect_pack(&c, p);
	CHECK_MEM(p, head, sizeof(head));
	for (int i = 0; i < 256; i++) {
		check_context("CONNECT layout: address byte %d", i);
		CHECK_EQ(p[104 + i], i < 16 ? 0x20 + i : 0);
	}
	for (int i = 0; i < 32; i++) {
		check_context("CONNECT layout: mac byte %d", i);
		CHECK_EQ(p[360 + i], 0x60 + i);
	}
	check_context("CONNECT round trip");
	memset(&back, 0x55, sizeof(back));
	CHECK_EQ(uls_fab_connect_parse(&back, p, sizeof(p)), 0);
	/* The structure has no padding (msg.h orders it as the wire does): compare it whole. */
	CHECK_U64(sizeof(back), ==, ULS_FAB_CONNECT_SIZE);
	CHECK_MEM(&back, &c, sizeof(c));
}

/* Packs c, overwrites nothing, parses: returns parse's result and check's reason. */
static int connect_reason(const struct uls_fab_connect *c, int *reason)
{
	uint8_t p[ULS_FAB_CONNECT_SIZE];
	struct uls_fab_connect back;

	uls_fab_connect_pack(c, p);
	int rc = uls_fab_connect_parse(&back, p, sizeof(p));
	*reason = uls_fab_connect_check(&back);
	return rc;
}

#define CONNECT_IS(field, value, want_reason)                                              \
	do {                                                                               \
		struct uls_fab_connect c_ = sample_connect();                              \
		int r_;                                                                    \
		c_.field = value;                                                          \
		check_context("CONNECT %s = %llu", #field, (unsigned long long)(value));   \
		CHECK_EQ(connect_reason(&c_, &r_), (want_reason) ? -EPROTO : 0);           \
		CHECK_EQ(r_, want_reason);                                                 \
	} while (0)

static void connect_ranges(void)
{
	const int P = ULS_FAB_R_PARAMS;
	uint8_t p[ULS_FAB_CONNECT_SIZE + 1] = { 0 };
	struct uls_fab_connect c = sample_connect();

	CONNECT_IS(version, 1, 0);
	CONNECT_IS(version, 0, ULS_FAB_R_VERSION);
	CONNECT_IS(version, 2, ULS_FAB_R_VERSION);
	CONNECT_IS(version, 0x100, ULS_FAB_R_VERSION);
	CONNECT_IS(flags, 0, 0);
	CONNECT_IS(flags, ULS_FAB_CF_MAC, 0);
	CONNECT_IS(flags, ULS_FAB_CF_NEED_WAKE, 0);
	CONNECT_IS(flags, ULS_FAB_CF_READS | ULS_FAB_CF_NEED_WAKE, 0);
	CONNECT_IS(flags, ULS_FAB_CF_WRITES | ULS_FAB_CF_MAC, 0);
	CONNECT_IS(flags, ULS_FAB_CF_UNTAGGED | ULS_FAB_CF_READS, 0);
	for (int bit = 5; bit < 16; bit++)
		CONNECT_IS(flags, 1u << bit | ULS_FAB_CF_MAC, P);
	for (uint32_t s = 2048; s <= 65536; s *= 2)
		CONNECT_IS(slot_size, s, 0);
	CONNECT_IS(slot_size, 0, P);
	CONNECT_IS(slot_size, 1024, P);
	CONNECT_IS(slot_size, 2047, P);
	CONNECT_IS(slot_size, 3072, P);
	CONNECT_IS(slot_size, 65535, P);
	CONNECT_IS(slot_size, 131072, P);
	CONNECT_IS(slot_size, 0x80000000u, P);
	CONNECT_IS(conn_window, 16384, 0);
	CONNECT_IS(conn_window, 16777216, 0);
	CONNECT_IS(conn_window, 100000, 0); /* any byte count in range, not only powers */
	CONNECT_IS(conn_window, 16383, P);
	CONNECT_IS(conn_window, 16777217, P);
	CONNECT_IS(conn_window, 0, P);
	CONNECT_IS(pair_grant, 1, 0);
	CONNECT_IS(pair_grant, 1024, 0);
	CONNECT_IS(pair_grant, 0, P);
	CONNECT_IS(pair_grant, 1025, P);
	CONNECT_IS(pair_grant, 0xffff, P);
	CONNECT_IS(addr_len, 1, 0);
	CONNECT_IS(addr_len, 256, 0);
	CONNECT_IS(addr_len, 0, P);
	CONNECT_IS(addr_len, 257, P);
	CONNECT_IS(addr_len, 0xffff, P);
	CONNECT_IS(tag, 0, P);
	CONNECT_IS(tag, ~0ull, 0);
	CONNECT_IS(ep_id, 0, 0);

	check_context("CONNECT reserved");
	for (int i = 100; i < 104; i++) {
		struct uls_fab_connect back;

		uls_fab_connect_pack(&c, p);
		p[i] = 1;
		CHECK_EQ(uls_fab_connect_parse(&back, p, ULS_FAB_CONNECT_SIZE), -EPROTO);
		CHECK_EQ(uls_fab_connect_check(&back), P);
		/* The rest is still decoded, for the server's checks in their order. */
		CHECK_U64(back.tag, ==, c.tag);
		CHECK_MEM(back.ns, c.ns, 16);
	}

	check_context("CONNECT mac without the MAC flag");
	c.flags = 0;
	CHECK_EQ(connect_reason(&c, &(int){ 0 }), 0);
	for (int i = 0; i < 32; i++) {
		int r;
		c.mac[i] = 0x80;
		CHECK_EQ(connect_reason(&c, &r), -EPROTO);
		CHECK_EQ(r, ULS_FAB_R_MAC);
		c.mac[i] = 0;
	}
	/* Version first: a version 2 message is VERSION whatever else it holds. */
	c.version = 2;
	c.slot_size = 3;
	CHECK_EQ(uls_fab_connect_check(&c), ULS_FAB_R_VERSION);

	check_context("CONNECT length");
	CHECK_EQ(uls_fab_connect_parse(&c, p, ULS_FAB_CONNECT_SIZE - 1), -EMSGSIZE);
	CHECK_EQ(uls_fab_connect_parse(&c, p, ULS_FAB_CONNECT_SIZE + 1), -EMSGSIZE);
	CHECK_EQ(uls_fab_connect_parse(&c, p, 0), -EMSGSIZE);
	CHECK_EQ(uls_fab_connect_parse(&c, NULL, ULS_FAB_CONNECT_SIZE), -EMSGSIZE);

	check_context("grant for a new pair");
	CHECK_EQ(uls_fab_grant_opens_pair(7), 0);
	CHECK_EQ(uls_fab_grant_opens_pair(8), 1);
	CHECK_EQ(uls_fab_grant_opens_pair(1024), 1);
	CHECK_EQ(uls_fab_grant_opens_pair(0), 0);
}

/* The fixed-size payloads */

/* A packed payload that parsed: its length must be exact, and packing the result again
 * must give the same bytes. */
typedef int (*parse_fn)(void *out, const void *buf, size_t len);

/* The parsers behind one pointer type (a call through a cast pointer would be undefined). */
static int parse_switch(void *o, const void *b, size_t l)
{
	return uls_fab_switch_parse(o, b, l);
}

static int parse_fin(void *o, const void *b, size_t l)
{
	return uls_fab_fin_parse(o, b, l);
}

static int parse_sleep(void *o, const void *b, size_t l)
{
	return uls_fab_sleep_parse(o, b, l);
}

static int parse_reset(void *o, const void *b, size_t l)
{
	return uls_fab_reset_parse(o, b, l);
}

static int parse_avail(void *o, const void *b, size_t l)
{
	return uls_fab_avail_parse(o, b, l);
}

static int parse_ring(void *o, const void *b, size_t l)
{
	return uls_fab_ring_parse(o, b, l);
}

static int parse_wrote(void *o, const void *b, size_t l)
{
	return uls_fab_wrote_parse(o, b, l);
}

static int parse_taken(void *o, const void *b, size_t l)
{
	return uls_fab_taken_parse(o, b, l);
}

static int parse_lend(void *o, const void *b, size_t l)
{
	return uls_fab_lend_parse(o, b, l);
}

static int parse_moved(void *o, const void *b, size_t l)
{
	return uls_fab_moved_parse(o, b, l);
}

static int parse_decline(void *o, const void *b, size_t l)
{
	return uls_fab_decline_parse(o, b, l);
}

static int parse_revert(void *o, const void *b, size_t l)
{
	return uls_fab_revert_parse(o, b, l);
}

static int parse_takeover(void *o, const void *b, size_t l)
{
	return uls_fab_takeover_parse(o, b, l);
}

static void lengths_exact(parse_fn parse, void *out, const uint8_t *p, size_t size)
{
	uint8_t big[512];

	memcpy(big, p, size);
	memset(big + size, 0, sizeof(big) - size);
	CHECK_EQ(parse(out, big, size), 0);
	CHECK_EQ(parse(out, big, size + 1), -EMSGSIZE);
	CHECK_EQ(parse(out, big, size - 1), -EMSGSIZE);
	CHECK_EQ(parse(out, big, 0), -EMSGSIZE);
	CHECK_EQ(parse(out, NULL, 0), -EMSGSIZE);
}

/* p with byte i set to v must parse with result want. */
static void poke(parse_fn parse, void *out, const uint8_t *p, size_t size, size_t i, uint8_t v,
		 int want)
{
	uint8_t q[512];

	memcpy(q, p, size);
	q[i] = v;
	check_context("byte %zu = %#x", i, v);
	CHECK_EQ(parse(out, q, size), want);
}

static void small_payloads(void)
{
	struct uls_fab_switch sw = { .pos = 0x0102030405060708ull, .flags = ULS_FAB_SWITCH_NONE },
			      sw2;
	struct uls_fab_fin fin = { .pos = ~0ull - 5, .sleeps = 0x11223344, .flags = 1 }, fin2;
	struct uls_fab_sleep sl = { .pos = 77, .want = 3, .n = 0xfffffffe }, sl2;
	struct uls_fab_reset rs = { .reason = 0xdeadbeef }, rs2;
	struct uls_fab_decline de = { .reason = ULS_FAB_R_TIMEOUT }, de2;
	uint8_t p[32];

	check_context("SWITCH");
	memset(&sw2, 0, sizeof(sw2));
	uls_fab_switch_pack(&sw, p);
	static const uint8_t sw_bytes[16] = { 8, 7, 6, 5, 4, 3, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0 };
	CHECK_MEM(p, sw_bytes, 16);
	lengths_exact(parse_switch, &sw2, p, 16);
	CHECK_U64(sw2.pos, ==, sw.pos);
	CHECK_U64(sw2.flags, ==, sw.flags);
	for (int i = 8; i < 16; i++)
		poke(parse_switch, &sw2, p, 16, (size_t)i, i == 8 ? 0 : 2,
		     i == 8 ? 0 : -EPROTO);

	check_context("FIN");
	uls_fab_fin_pack(&fin, p);
	static const uint8_t fin_bytes[16] = { 0xfa, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					       0x44, 0x33, 0x22, 0x11, 1, 0, 0, 0 };
	CHECK_MEM(p, fin_bytes, 16);
	lengths_exact(parse_fin, &fin2, p, 16);
	CHECK_U64(fin2.pos, ==, fin.pos);
	CHECK_U64(fin2.sleeps, ==, fin.sleeps);
	CHECK_U64(fin2.flags, ==, fin.flags);
	poke(parse_fin, &fin2, p, 16, 12, 0, 0);
	poke(parse_fin, &fin2, p, 16, 12, 3, -EPROTO);
	poke(parse_fin, &fin2, p, 16, 15, 0x80, -EPROTO);
	poke(parse_fin, &fin2, p, 16, 8, 0xff, 0); /* sleeps: any count */

	check_context("SLEEP");
	uls_fab_sleep_pack(&sl, p);
	static const uint8_t sl_bytes[16] = { 77, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0,
					      0xfe, 0xff, 0xff, 0xff };
	CHECK_MEM(p, sl_bytes, 16);
	lengths_exact(parse_sleep, &sl2, p, 16);
	CHECK_U64(sl2.pos, ==, 77);
	CHECK_U64(sl2.want, ==, 3);
	CHECK_U64(sl2.n, ==, 0xfffffffe);
	poke(parse_sleep, &sl2, p, 16, 8, 1, 0);
	poke(parse_sleep, &sl2, p, 16, 8, 2, 0);
	poke(parse_sleep, &sl2, p, 16, 8, 0, -EPROTO);
	poke(parse_sleep, &sl2, p, 16, 8, 4, -EPROTO);
	poke(parse_sleep, &sl2, p, 16, 11, 1, -EPROTO);
	sl.n = 0;
	uls_fab_sleep_pack(&sl, p);
	CHECK_EQ(uls_fab_sleep_parse(&sl2, p, 16), -EPROTO);

	check_context("RESET");
	uls_fab_reset_pack(&rs, p);
	static const uint8_t rs_bytes[8] = { 0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0 };
	CHECK_MEM(p, rs_bytes, 8);
	lengths_exact(parse_reset, &rs2, p, 8);
	CHECK_U64(rs2.reason, ==, rs.reason);
	for (int i = 4; i < 8; i++)
		poke(parse_reset, &rs2, p, 8, (size_t)i, 1, -EPROTO);

	check_context("DECLINE");
	for (int i = 0; i < 16; i++)
		de.nonce[i] = (uint8_t)(0x30 + i);
	uls_fab_decline_pack(&de, p);
	static const uint8_t de_bytes[24] = { 9, 0, 0, 0, 0, 0, 0, 0, 0x30, 0x31, 0x32, 0x33,
					      0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b,
					      0x3c, 0x3d, 0x3e, 0x3f };
	CHECK_MEM(p, de_bytes, 24);
	lengths_exact(parse_decline, &de2, p, 24);
	CHECK_U64(de2.reason, ==, 9);
	CHECK_MEM(de2.nonce, de.nonce, 16);
	for (int r = 1; r <= 9; r++)
		poke(parse_decline, &de2, p, 24, 0, (uint8_t)r, 0);
	poke(parse_decline, &de2, p, 24, 0, 0, -EPROTO);
	poke(parse_decline, &de2, p, 24, 0, 10, -EPROTO);
	poke(parse_decline, &de2, p, 24, 3, 1, -EPROTO);
	for (int i = 4; i < 8; i++)
		poke(parse_decline, &de2, p, 24, (size_t)i, 1, -EPROTO);
}

static struct uls_fab_takeover sample_takeover(void)
{
	struct uls_fab_takeover t;

	memset(&t, 0, sizeof(t));
	t.tag = 0x1112131415161718ull;
	t.new_tag = 0x2122232425262728ull;
	t.ep_id = 0xf0e0d0c0b0a09080ull;
	t.addr_len = 16;
	t.revert.flags = ULS_FAB_REVERT_REQUEST | ULS_FAB_REVERT_LEAVING;
	t.revert.fabric_end = 1000;
	t.revert.tcp_pos = 2000;
	t.revert.rx_consumed = 500;
	for (int i = 0; i < 16; i++)
		t.addr[i] = (uint8_t)(0x20 + i);
	return t;
}

/* Field by field: the structure has padding, which a parse leaves as it was. */
static void same_revert(const struct uls_fab_revert *a, const struct uls_fab_revert *b)
{
	CHECK_U64(a->flags, ==, b->flags);
	CHECK_U64(a->fabric_end, ==, b->fabric_end);
	CHECK_U64(a->tcp_pos, ==, b->tcp_pos);
	CHECK_U64(a->rx_consumed, ==, b->rx_consumed);
}

static void revert_and_takeover(void)
{
	struct uls_fab_revert r = { .flags = 2, .fabric_end = 1, .tcp_pos = 2,
				    .rx_consumed = ~0ull },
			      r2;
	struct uls_fab_takeover t = sample_takeover(), t2;
	uint8_t p[ULS_FAB_TAKEOVER_SIZE];
	static const uint8_t r_bytes[32] = {
		2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	};

	check_context("REVERT");
	uls_fab_revert_pack(&r, p);
	CHECK_MEM(p, r_bytes, 32);
	memset(&r2, 0, sizeof(r2));
	lengths_exact(parse_revert, &r2, p, 32);
	same_revert(&r2, &r);
	for (int f = 0; f < 4; f++)
		poke(parse_revert, &r2, p, 32, 0, (uint8_t)f, 0);
	poke(parse_revert, &r2, p, 32, 0, 4, -EPROTO);
	poke(parse_revert, &r2, p, 32, 3, 0x80, -EPROTO);
	for (int i = 4; i < 8; i++)
		poke(parse_revert, &r2, p, 32, (size_t)i, 1, -EPROTO);

	check_context("TAKEOVER");
	for (int i = 0; i < 32; i++)
		t.proof[i] = (uint8_t)(0x90 + i);
	uls_fab_takeover_pack(&t, p);
	static const uint8_t t_head[32] = {
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* B's tag */
		0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, /* new_tag */
		0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0, /* ep_id */
		0x10, 0x00, 0, 0, 0, 0, 0, 0,                   /* addr_len, reserved */
	};
	CHECK_MEM(p, t_head, 32);
	CHECK_EQ(p[32], 3); /* REVERT's flags: REQUEST|LEAVING */
	CHECK_EQ(p[40], 1000 & 0xff);
	CHECK_EQ(p[64], 0x20);
	CHECK_EQ(p[64 + 255], 0);
	CHECK_EQ(p[320], 0x90);
	CHECK_EQ(p[351], 0x90 + 31);
	memset(&t2, 0, sizeof(t2));
	lengths_exact(parse_takeover, &t2, p, ULS_FAB_TAKEOVER_SIZE);
	CHECK_U64(t2.tag, ==, t.tag);
	CHECK_U64(t2.new_tag, ==, t.new_tag);
	CHECK_U64(t2.ep_id, ==, t.ep_id);
	CHECK_U64(t2.addr_len, ==, t.addr_len);
	same_revert(&t2.revert, &t.revert);
	CHECK_MEM(t2.addr, t.addr, sizeof(t.addr));
	CHECK_MEM(t2.proof, t.proof, sizeof(t.proof));

	check_context("TAKEOVER rejections");
	for (int i = 26; i < 32; i++)
		poke(parse_takeover, &t2, p, sizeof(p), (size_t)i, 1, -EPROTO);
	for (int i = 36; i < 40; i++) /* REVERT's reserved */
		poke(parse_takeover, &t2, p, sizeof(p), (size_t)i, 1, -EPROTO);
	for (int f = 0; f < 8; f++)
		poke(parse_takeover, &t2, p, sizeof(p), 32, (uint8_t)f,
		     f == 3 ? 0 : -EPROTO);
	struct uls_fab_takeover bad = sample_takeover();
	bad.tag = 0;
	uls_fab_takeover_pack(&bad, p);
	CHECK_EQ(uls_fab_takeover_parse(&t2, p, sizeof(p)), -EPROTO);
	bad = sample_takeover();
	bad.new_tag = 0;
	uls_fab_takeover_pack(&bad, p);
	CHECK_EQ(uls_fab_takeover_parse(&t2, p, sizeof(p)), -EPROTO);
	for (uint32_t len = 0; len <= 300; len++) {
		bad = sample_takeover();
		bad.addr_len = (uint16_t)len;
		uls_fab_takeover_pack(&bad, p);
		check_context("TAKEOVER addr_len %u", len);
		CHECK_EQ(uls_fab_takeover_parse(&t2, p, sizeof(p)),
			 len >= 1 && len <= 256 ? 0 : -EPROTO);
	}
}

static void put_le(uint8_t *p, uint32_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Random structures: whatever parses packs back to the bytes it came from. */
static void random_round_trips(void)
{
	uint64_t seed = 94;
	uint8_t p[ULS_FAB_CONNECT_SIZE], q[ULS_FAB_CONNECT_SIZE];
	int accepted = 0;

	for (int n = 0; n < 20000; n++) {
		struct uls_fab_connect c;

		check_context("random CONNECT %d", n);
		for (size_t i = 0; i < sizeof(p); i++)
			p[i] = (uint8_t)check_rand(&seed);
		/* Mostly valid fields, so that both outcomes are exercised. */
		if (n % 2) {
			p[0] = 1, p[1] = 0, p[2] &= 3, p[3] = 0;
			put_le(p + 4, 2048u << (n % 6), 4);            /* slot_size */
			put_le(p + 44, 16384u + (uint32_t)n * 97, 4);  /* conn_window */
			put_le(p + 96, 1 + (uint32_t)n % 1024, 2);     /* pair_grant */
			put_le(p + 98, 1 + (uint32_t)n % 256, 2);      /* addr_len */
			memset(p + 100, 0, 4);
			if (!(p[2] & 1))
				memset(p + 360, 0, 32);
		}
		int rc = uls_fab_connect_parse(&c, p, sizeof(p));
		CHECK(rc == 0 || rc == -EPROTO);
		if (rc == 0) {
			accepted++;
			uls_fab_connect_pack(&c, q);
			CHECK_MEM(q, p, sizeof(p));
		}
	}
	CHECK_INT(accepted, >, 1000);
}

/* MACs */

static void connect_macs(void)
{
	struct uls_fab_connect c = sample_connect();
	uint8_t p[ULS_FAB_CONNECT_SIZE], m[32], m2[32], want[32], acc[32];
	uint8_t msg[23 + 360 + 32];

	uls_fab_connect_pack(&c, p);

	check_context("CONNECT mac known answer");
	uls_fab_connect_mac(key, sizeof(key), p, m);
	unhex(want, "25a45532b608f52c0192acac1a586ed626157639d87e7eb0972c56f30a62990a", 32);
	CHECK_MEM(m, want, 32);
	/* The same from the label as 9.4 writes it, through the HMAC directly. */
	memcpy(msg, "ulsock-fabric-1 connect", 23);
	memcpy(msg + 23, p, 360);
	uls_hmac_sha256(key, sizeof(key), msg, 23 + 360, m2);
	CHECK_MEM(m2, m, 32);
	uls_fab_connect_mac(key, sizeof(key), p, m2);
	CHECK_MEM(m2, m, 32); /* deterministic */

	check_context("ACCEPT mac known answer");
	uls_fab_accept_mac(key, sizeof(key), p, m, acc);
	unhex(want, "12a5cb4e8e919258d60d5d23d91f4c9fca30f73f10998a04af077b410f6f5787", 32);
	CHECK_MEM(acc, want, 32);
	CHECK(memcmp(acc, m, 32) != 0);

	/* Every covered byte changes both MACs; the mac field itself changes neither. */
	for (int i = 0; i < ULS_FAB_CONNECT_SIZE; i++) {
		uint8_t q[ULS_FAB_CONNECT_SIZE], mq[32], aq[32];

		check_context("CONNECT byte %d flipped", i);
		memcpy(q, p, sizeof(q));
		q[i] ^= (uint8_t)(1 << (i % 8));
		uls_fab_connect_mac(key, sizeof(key), q, mq);
		uls_fab_accept_mac(key, sizeof(key), q, m, aq);
		if (i < ULS_FAB_MAC_COVERS) {
			CHECK(memcmp(mq, m, 32) != 0);
			CHECK(memcmp(aq, acc, 32) != 0);
		} else {
			CHECK_MEM(mq, m, 32);
			CHECK_MEM(aq, acc, 32);
		}
	}
	for (int i = 0; i < 32; i++) {
		uint8_t cm[32], aq[32];

		check_context("CONNECT's mac byte %d flipped under ACCEPT", i);
		memcpy(cm, m, 32);
		cm[i] ^= 0x01;
		uls_fab_accept_mac(key, sizeof(key), p, cm, aq);
		CHECK(memcmp(aq, acc, 32) != 0);
	}

	check_context("mac checks");
	memcpy(p + 360, m, 32);
	CHECK_EQ(uls_fab_connect_mac_ok(key, sizeof(key), p), 1);
	CHECK_EQ(uls_fab_connect_mac_ok(key, sizeof(key) - 1, p), 0);
	CHECK_EQ(uls_fab_connect_mac_ok(NULL, 0, p), 0);
	uint8_t other[32];
	memcpy(other, key, 32);
	other[31] ^= 0x80;
	CHECK_EQ(uls_fab_connect_mac_ok(other, sizeof(other), p), 0);
	for (int i = 0; i < ULS_FAB_CONNECT_SIZE; i++) {
		check_context("signed CONNECT byte %d flipped", i);
		p[i] ^= 0x10;
		CHECK_EQ(uls_fab_connect_mac_ok(key, sizeof(key), p), 0);
		p[i] ^= 0x10;
	}
	/* The MAC in place: the output may be the payload's own field. */
	memset(p + 360, 0, 32);
	uls_fab_connect_mac(key, sizeof(key), p, p + 360);
	CHECK_MEM(p + 360, m, 32);
	uls_fab_accept_mac(key, sizeof(key), p, m, p + 360);
	CHECK_EQ(uls_fab_accept_mac_ok(key, sizeof(key), p, m), 1);
	CHECK_EQ(uls_fab_accept_mac_ok(key, sizeof(key), p, acc), 0);
	CHECK_EQ(uls_fab_connect_mac_ok(key, sizeof(key), p), 0); /* labels differ */

	check_context("no key");
	uls_fab_connect_mac(NULL, 0, p, m2);
	CHECK(uls_sha256_equal(m2, (const uint8_t[32]){ 0 }));
	uls_fab_accept_mac(NULL, 0, p, m, m2);
	CHECK(uls_sha256_equal(m2, (const uint8_t[32]){ 0 }));
	memset(p + 360, 0, 32);
	CHECK_EQ(uls_fab_connect_mac_ok(NULL, 0, p), 1);
	CHECK_EQ(uls_fab_accept_mac_ok(NULL, 0, p, (const uint8_t[32]){ 0 }), 1);
	CHECK_EQ(uls_fab_connect_mac_ok(key, sizeof(key), p), 0);
	p[391] = 1;
	CHECK_EQ(uls_fab_connect_mac_ok(NULL, 0, p), 0);
}

static void session_and_takeover(void)
{
	struct uls_fab_connect c = sample_connect();
	const uint64_t tag_c = 0x0102030405060708ull, tag_s = 0x1112131415161718ull;
	uint8_t ks[32], ks0[32], k2[32], want[32], p[ULS_FAB_TAKEOVER_SIZE], proof[32];
	uint8_t nc[16], ns[16];

	check_context("Ks known answers");
	uls_fab_session_secret(key, sizeof(key), c.nc, c.ns, tag_c, tag_s, ks);
	unhex(want, "4cdfa88f3b873cfc67f2cf218e4833bdbdefa585ac8be2a0d39ceb4b40ad896b", 32);
	CHECK_MEM(ks, want, 32);
	uls_fab_session_secret(NULL, 0, c.nc, c.ns, tag_c, tag_s, ks0);
	unhex(want, "691998afd52b4a2b96acbe6b9e0ce652a9684c323e5201b298702d6f20a6845a", 32);
	CHECK_MEM(ks0, want, 32);

	check_context("Ks inputs");
	uls_fab_session_secret(key, sizeof(key), c.nc, c.ns, tag_s, tag_c, k2);
	CHECK(memcmp(k2, ks, 32) != 0); /* the tags' order matters */
	uls_fab_session_secret(key, sizeof(key), c.ns, c.nc, tag_c, tag_s, k2);
	CHECK(memcmp(k2, ks, 32) != 0);
	for (int i = 0; i < 16; i++) {
		check_context("Ks nonce byte %d", i);
		memcpy(nc, c.nc, 16);
		memcpy(ns, c.ns, 16);
		nc[i] ^= 1;
		uls_fab_session_secret(key, sizeof(key), nc, ns, tag_c, tag_s, k2);
		CHECK(memcmp(k2, ks, 32) != 0);
		nc[i] ^= 1;
		ns[i] ^= 1;
		uls_fab_session_secret(key, sizeof(key), nc, ns, tag_c, tag_s, k2);
		CHECK(memcmp(k2, ks, 32) != 0);
	}
	for (int b = 0; b < 64; b++) {
		check_context("Ks tag bit %d", b);
		uls_fab_session_secret(key, sizeof(key), c.nc, c.ns, tag_c ^ 1ull << b, tag_s, k2);
		CHECK(memcmp(k2, ks, 32) != 0);
		uls_fab_session_secret(key, sizeof(key), c.nc, c.ns, tag_c, tag_s ^ 1ull << b, k2);
		CHECK(memcmp(k2, ks, 32) != 0);
	}

	check_context("TAKEOVER proof known answer");
	struct uls_fab_takeover t = sample_takeover();
	uls_fab_takeover_pack(&t, p);
	uls_fab_takeover_proof(ks, p, proof);
	unhex(want, "c48b6624d2e8214ff0fd78ddb8d09282c3330b7026b042ca431e5af69fd26983", 32);
	CHECK_MEM(proof, want, 32);
	uls_fab_takeover_proof(ks, p, p + ULS_FAB_PROOF_COVERS);
	CHECK_EQ(uls_fab_takeover_proof_ok(ks, p), 1);
	CHECK_EQ(uls_fab_takeover_proof_ok(ks0, p), 0);
	for (int i = 0; i < ULS_FAB_TAKEOVER_SIZE; i++) {
		uint8_t pq[32];

		check_context("TAKEOVER byte %d flipped", i);
		p[i] ^= 0x04;
		CHECK_EQ(uls_fab_takeover_proof_ok(ks, p), 0);
		uls_fab_takeover_proof(ks, p, pq);
		if (i < ULS_FAB_PROOF_COVERS)
			CHECK(memcmp(pq, proof, 32) != 0);
		else
			CHECK_MEM(pq, proof, 32);
		p[i] ^= 0x04;
	}
	for (int i = 0; i < 32; i++) {
		check_context("Ks byte %d flipped", i);
		memcpy(k2, ks, 32);
		k2[i] ^= 0x40;
		CHECK_EQ(uls_fab_takeover_proof_ok(k2, p), 0);
	}
}

/* AVAIL and TAKEN (9.6): exact layout, lengths, the rules (len and guard non-zero,
 * reserved 0), and the round trip. */
static void offers_layout(void)
{
	struct uls_fab_avail a = {.len = 0x10000, .addr = 0x7f0011223344ull, .key = 0x0102030405060708ull,
				  .guard_addr = 0x7f0011233344ull, .guard = 0xa5a5a5a55a5a5a5aull}, a2;
	struct uls_fab_taken t = {.pos = 0x1122334455667788ull}, t2;
	uint8_t p[ULS_FAB_AVAIL_SIZE], q[ULS_FAB_AVAIL_SIZE];
	static const uint8_t a_bytes[40] = {
		0, 0, 1, 0, 0, 0, 0, 0,
		0x44, 0x33, 0x22, 0x11, 0x00, 0x7f, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1,
		0x44, 0x33, 0x23, 0x11, 0x00, 0x7f, 0, 0,
		0x5a, 0x5a, 0x5a, 0x5a, 0xa5, 0xa5, 0xa5, 0xa5,
	};

	check_context("AVAIL");
	uls_fab_avail_pack(&a, p);
	CHECK_MEM(p, a_bytes, 40);
	lengths_exact(parse_avail, &a2, p, 40);
	CHECK_U64(a2.len, ==, a.len);
	CHECK_U64(a2.addr, ==, a.addr);
	CHECK_U64(a2.key, ==, a.key);
	CHECK_U64(a2.guard_addr, ==, a.guard_addr);
	CHECK_U64(a2.guard, ==, a.guard);
	uls_fab_avail_pack(&a2, q);
	CHECK_MEM(q, p, 40);
	for (int i = 4; i < 8; i++)
		poke(parse_avail, &a2, p, 40, (size_t)i, 1, -EPROTO); /* reserved */
	a.len = 0;
	uls_fab_avail_pack(&a, q);
	CHECK_EQ(uls_fab_avail_parse(&a2, q, 40), -EPROTO);
	a.len = 1;
	a.guard = 0;
	uls_fab_avail_pack(&a, q);
	CHECK_EQ(uls_fab_avail_parse(&a2, q, 40), -EPROTO);
	a.guard = 1;
	a.len = 0xffffffffu;
	uls_fab_avail_pack(&a, q);
	CHECK_EQ(uls_fab_avail_parse(&a2, q, 40), 0); /* the window check is the receiver's */

	check_context("TAKEN");
	uls_fab_taken_pack(&t, p);
	static const uint8_t t_bytes[8] = { 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11 };
	CHECK_MEM(p, t_bytes, 8);
	lengths_exact(parse_taken, &t2, p, 8);
	CHECK_U64(t2.pos, ==, t.pos);
	CHECK_EQ(hdr(ULS_FAB_AVAIL, ULS_FAB_AVAIL_SIZE, 9, 0, 0, ULS_FAB_CLASS_CONN, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_AVAIL, ULS_FAB_AVAIL_SIZE, 9, 0, 0, ULS_FAB_CLASS_HANDSHAKE, 8192),
		 -EPROTO);
}

/* LEND and MOVED (9.6): exact layout, lengths, the rules (len and guard non-zero,
 * reserved 0), and the round trip. */
static void lends_layout(void)
{
	struct uls_fab_lend l = {.len = 0x100000, .addr = 0x7f0011223344ull,
				 .key = 0x0102030405060708ull, .guard_addr = 0x7f0011233344ull,
				 .guard_key = 0x1112131415161718ull, .guard = 0xa5a5a5a55a5a5a5aull}, l2;
	struct uls_fab_moved m = {.pos = 0x1122334455667788ull, .len = 0x100000,
				  .addr = 0x7f0011223344ull, .key = 0x0102030405060708ull,
				  .guard_addr = 0x7f0011233344ull, .guard = 0xa5a5a5a55a5a5a5aull}, m2;
	uint8_t p[48], q[48];
	static const uint8_t l_bytes[48] = {
		0, 0, 0x10, 0, 0, 0, 0, 0,
		0x44, 0x33, 0x22, 0x11, 0x00, 0x7f, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1,
		0x44, 0x33, 0x23, 0x11, 0x00, 0x7f, 0, 0,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
		0x5a, 0x5a, 0x5a, 0x5a, 0xa5, 0xa5, 0xa5, 0xa5,
	};
	static const uint8_t m_bytes[48] = {
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		0, 0, 0x10, 0, 0, 0, 0, 0,
		0x44, 0x33, 0x22, 0x11, 0x00, 0x7f, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1,
		0x44, 0x33, 0x23, 0x11, 0x00, 0x7f, 0, 0,
		0x5a, 0x5a, 0x5a, 0x5a, 0xa5, 0xa5, 0xa5, 0xa5,
	};

	check_context("LEND");
	uls_fab_lend_pack(&l, p);
	CHECK_MEM(p, l_bytes, 48);
	lengths_exact(parse_lend, &l2, p, 48);
	CHECK_U64(l2.len, ==, l.len);
	CHECK_U64(l2.addr, ==, l.addr);
	CHECK_U64(l2.key, ==, l.key);
	CHECK_U64(l2.guard_addr, ==, l.guard_addr);
	CHECK_U64(l2.guard_key, ==, l.guard_key);
	CHECK_U64(l2.guard, ==, l.guard);
	uls_fab_lend_pack(&l2, q);
	CHECK_MEM(q, p, 48);
	for (int i = 4; i < 8; i++)
		poke(parse_lend, &l2, p, 48, (size_t)i, 1, -EPROTO); /* reserved */
	l.len = 0;
	uls_fab_lend_pack(&l, q);
	CHECK_EQ(uls_fab_lend_parse(&l2, q, 48), -EPROTO);
	l.len = 1;
	l.guard = 0;
	uls_fab_lend_pack(&l, q);
	CHECK_EQ(uls_fab_lend_parse(&l2, q, 48), -EPROTO);

	check_context("MOVED");
	uls_fab_moved_pack(&m, p);
	CHECK_MEM(p, m_bytes, 48);
	lengths_exact(parse_moved, &m2, p, 48);
	CHECK_U64(m2.pos, ==, m.pos);
	CHECK_U64(m2.len, ==, m.len);
	CHECK_U64(m2.addr, ==, m.addr);
	CHECK_U64(m2.key, ==, m.key);
	CHECK_U64(m2.guard_addr, ==, m.guard_addr);
	CHECK_U64(m2.guard, ==, m.guard);
	uls_fab_moved_pack(&m2, q);
	CHECK_MEM(q, p, 48);
	for (int i = 12; i < 16; i++)
		poke(parse_moved, &m2, p, 48, (size_t)i, 1, -EPROTO); /* reserved */
	m.len = 0;
	uls_fab_moved_pack(&m, q);
	CHECK_EQ(uls_fab_moved_parse(&m2, q, 48), -EPROTO);
	m.len = 1;
	m.guard = 0;
	uls_fab_moved_pack(&m, q);
	CHECK_EQ(uls_fab_moved_parse(&m2, q, 48), -EPROTO);
	CHECK_EQ(hdr(ULS_FAB_LEND, ULS_FAB_LEND_SIZE, 9, 0, 0, ULS_FAB_CLASS_CONN, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_MOVED, ULS_FAB_MOVED_SIZE, 9, 0, 0, ULS_FAB_CLASS_HANDSHAKE, 8192),
		 -EPROTO);
}

/* RING and WROTE (9.14): exact layout, lengths, the rules (RING's len a power of two
 * within the window's range, WROTE's non-zero, reserved 0), and the round trip. */
static void writes_layout(void)
{
	struct uls_fab_ring r = {.addr = 0x7f0011223344ull, .key = 0x0102030405060708ull,
				 .len = 1u << 21}, r2;
	struct uls_fab_wrote w = {.len = 0x10000}, w2;
	uint8_t p[ULS_FAB_RING_SIZE], q[ULS_FAB_RING_SIZE];
	static const uint8_t r_bytes[24] = {
		0x44, 0x33, 0x22, 0x11, 0x00, 0x7f, 0, 0,
		8, 7, 6, 5, 4, 3, 2, 1,
		0, 0, 0x20, 0, 0, 0, 0, 0,
	};
	static const uint8_t w_bytes[8] = { 0, 0, 1, 0, 0, 0, 0, 0 };

	check_context("RING");
	uls_fab_ring_pack(&r, p);
	CHECK_MEM(p, r_bytes, 24);
	lengths_exact(parse_ring, &r2, p, 24);
	CHECK_U64(r2.addr, ==, r.addr);
	CHECK_U64(r2.key, ==, r.key);
	CHECK_U64(r2.len, ==, r.len);
	uls_fab_ring_pack(&r2, q);
	CHECK_MEM(q, p, 24);
	for (int i = 20; i < 24; i++)
		poke(parse_ring, &r2, p, 24, (size_t)i, 1, -EPROTO); /* reserved */
	static const uint32_t bad[] = { 0, 1, ULS_FAB_WINDOW_MIN / 2, ULS_FAB_WINDOW_MIN + 1,
					3u << 20, ULS_FAB_WINDOW_MAX * 2 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r.len = bad[i];
		uls_fab_ring_pack(&r, q);
		CHECK_EQ(uls_fab_ring_parse(&r2, q, 24), -EPROTO);
	}
	r.len = ULS_FAB_WINDOW_MIN;
	uls_fab_ring_pack(&r, q);
	CHECK_EQ(uls_fab_ring_parse(&r2, q, 24), 0);
	r.len = ULS_FAB_WINDOW_MAX;
	uls_fab_ring_pack(&r, q);
	CHECK_EQ(uls_fab_ring_parse(&r2, q, 24), 0);

	check_context("WROTE");
	uls_fab_wrote_pack(&w, p);
	CHECK_MEM(p, w_bytes, 8);
	lengths_exact(parse_wrote, &w2, p, 8);
	CHECK_U64(w2.len, ==, w.len);
	for (int i = 4; i < 8; i++)
		poke(parse_wrote, &w2, p, 8, (size_t)i, 1, -EPROTO); /* reserved */
	w.len = 0;
	uls_fab_wrote_pack(&w, q);
	CHECK_EQ(uls_fab_wrote_parse(&w2, q, 8), -EPROTO);
	w.len = 0xffffffffu;
	uls_fab_wrote_pack(&w, q);
	CHECK_EQ(uls_fab_wrote_parse(&w2, q, 8), 0); /* the window check is the receiver's */
	CHECK_EQ(hdr(ULS_FAB_WROTE, ULS_FAB_WROTE_SIZE, 9, 0, 0, ULS_FAB_CLASS_CONN, 8192), 0);
	CHECK_EQ(hdr(ULS_FAB_RING, ULS_FAB_RING_SIZE, 9, 0, 0, ULS_FAB_CLASS_HANDSHAKE, 8192),
		 -EPROTO);
}

int main(void)
{
	header_layout();
	header_rules();
	types_and_reasons();
	connect_layout();
	connect_ranges();
	small_payloads();
	offers_layout();
	lends_layout();
	writes_layout();
	revert_and_takeover();
	random_round_trips();
	connect_macs();
	session_and_takeover();
	return CHECK_PASS;
}
