/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the fabric wire messages (src/transport/fabric/msg.h): everything
 * a fabric peer, or anyone who can reach a handshake slot, can make this process parse.
 *
 * The input is taken three ways:
 * (a) as one whole message, as a receive slot holds it: the header parser, then 9.11's
 *     header check under every slot class and three slot sizes, then the payload parser
 *     of the header's type on the rest;
 * (b) as a bare payload, through every payload parser;
 * (c) as a payload behind the first 24 bytes, through every payload parser again, so the
 *     seeds of (a) reach the parsers of the other types too.
 * Each parser must stay within the length it was given (ASan sees the input's exact
 * heap block), return 0, -EMSGSIZE or -EPROTO, and whatever it accepts must pack back to
 * exactly the bytes it came from. A header the check accepts must be self-consistent
 * (known type of the slot's class, the type's length). The MACs are run over accepted
 * CONNECTs and TAKEOVERs: a payload signed in place must verify, and not after one flip.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/fabric/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant aborts, which libFuzzer reports with the input that broke it. */
static void must(int ok, const char *expr, int line)
{
	if (!ok) {
		fprintf(stderr, "fuzz_fabric_msg.c:%d: assertion failed: %s\n", line, expr);
		abort();
	}
}

#define FUZZ_ASSERT(c) must(!!(c), #c, __LINE__)

static const uint8_t fuzz_key[40] = "a 40-byte key for the fuzzer's MAC check";

static void parsed(int rc, const void *packed, const uint8_t *p, size_t len)
{
	FUZZ_ASSERT(rc == 0 || rc == -EMSGSIZE || rc == -EPROTO);
	if (rc == 0)
		FUZZ_ASSERT(memcmp(packed, p, len) == 0);
}

/* A signed copy verifies, and stops verifying when any covered byte changes. */
static void connect_macs(const uint8_t *p)
{
	uint8_t q[ULS_FAB_CONNECT_SIZE], cm[ULS_FAB_MAC_SIZE];

	memcpy(q, p, sizeof(q));
	uls_fab_connect_mac(fuzz_key, sizeof(fuzz_key), q, q + ULS_FAB_MAC_COVERS);
	FUZZ_ASSERT(uls_fab_connect_mac_ok(fuzz_key, sizeof(fuzz_key), q));
	memcpy(cm, q + ULS_FAB_MAC_COVERS, sizeof(cm));
	uls_fab_accept_mac(fuzz_key, sizeof(fuzz_key), q, cm, q + ULS_FAB_MAC_COVERS);
	FUZZ_ASSERT(uls_fab_accept_mac_ok(fuzz_key, sizeof(fuzz_key), q, cm));
	q[p[0] % ULS_FAB_MAC_COVERS] ^= 1;
	FUZZ_ASSERT(!uls_fab_accept_mac_ok(fuzz_key, sizeof(fuzz_key), q, cm));
}

static void takeover_proof(const struct uls_fab_takeover *t, const uint8_t *p)
{
	uint8_t q[ULS_FAB_TAKEOVER_SIZE], ks[ULS_FAB_MAC_SIZE];

	uls_fab_session_secret(NULL, 0, p, p + 16, t->tag, t->new_tag, ks);
	memcpy(q, p, sizeof(q));
	uls_fab_takeover_proof(ks, q, q + ULS_FAB_PROOF_COVERS);
	FUZZ_ASSERT(uls_fab_takeover_proof_ok(ks, q));
	q[p[1] % ULS_FAB_PROOF_COVERS] ^= 0x80;
	FUZZ_ASSERT(!uls_fab_takeover_proof_ok(ks, q));
}

/* The parser of one type over (p, len); the packed result, when it parsed, must be p. */
static void payload(uint8_t type, const uint8_t *p, size_t len)
{
	uint8_t out[ULS_FAB_CONNECT_SIZE];
	int rc;

	switch (type) {
	case ULS_FAB_CONNECT:
	case ULS_FAB_ACCEPT: {
		struct uls_fab_connect c;
		rc = uls_fab_connect_parse(&c, p, len);
		if (rc != -EMSGSIZE)
			FUZZ_ASSERT((rc == 0) == (uls_fab_connect_check(&c) == 0));
		if (rc == 0) {
			uls_fab_connect_pack(&c, out);
			FUZZ_ASSERT(c.addr_len >= 1 && c.addr_len <= ULS_FAB_ADDR_MAX);
			connect_macs(p);
		}
		break;
	}
	case ULS_FAB_DECLINE:
	case ULS_FAB_ABORT: {
		struct uls_fab_decline d;
		if ((rc = uls_fab_decline_parse(&d, p, len)) == 0) {
			uls_fab_decline_pack(&d, out);
			FUZZ_ASSERT(strcmp(uls_fab_reason_name(d.reason), "unknown") != 0);
		}
		break;
	}
	case ULS_FAB_TAKEOVER: {
		struct uls_fab_takeover t;
		if ((rc = uls_fab_takeover_parse(&t, p, len)) == 0) {
			uls_fab_takeover_pack(&t, out);
			takeover_proof(&t, p);
		}
		break;
	}
	case ULS_FAB_SWITCH: {
		struct uls_fab_switch s;
		if ((rc = uls_fab_switch_parse(&s, p, len)) == 0)
			uls_fab_switch_pack(&s, out);
		break;
	}
	case ULS_FAB_FIN: {
		struct uls_fab_fin f;
		if ((rc = uls_fab_fin_parse(&f, p, len)) == 0)
			uls_fab_fin_pack(&f, out);
		break;
	}
	case ULS_FAB_SLEEP: {
		struct uls_fab_sleep s;
		if ((rc = uls_fab_sleep_parse(&s, p, len)) == 0)
			uls_fab_sleep_pack(&s, out);
		break;
	}
	case ULS_FAB_REVERT: {
		struct uls_fab_revert r;
		if ((rc = uls_fab_revert_parse(&r, p, len)) == 0)
			uls_fab_revert_pack(&r, out);
		break;
	}
	case ULS_FAB_RESET: {
		struct uls_fab_reset r;
		if ((rc = uls_fab_reset_parse(&r, p, len)) == 0)
			uls_fab_reset_pack(&r, out);
		break;
	}
	case ULS_FAB_AVAIL: {
		struct uls_fab_avail a;
		if ((rc = uls_fab_avail_parse(&a, p, len)) == 0) {
			uls_fab_avail_pack(&a, out);
			FUZZ_ASSERT(a.len != 0 && a.guard != 0);
		}
		break;
	}
	case ULS_FAB_TAKEN: {
		struct uls_fab_taken t;
		if ((rc = uls_fab_taken_parse(&t, p, len)) == 0)
			uls_fab_taken_pack(&t, out);
		break;
	}
	case ULS_FAB_LEND: {
		struct uls_fab_lend l;
		if ((rc = uls_fab_lend_parse(&l, p, len)) == 0) {
			uls_fab_lend_pack(&l, out);
			FUZZ_ASSERT(l.len != 0 && l.guard != 0);
		}
		break;
	}
	case ULS_FAB_MOVED: {
		struct uls_fab_moved m;
		if ((rc = uls_fab_moved_parse(&m, p, len)) == 0) {
			uls_fab_moved_pack(&m, out);
			FUZZ_ASSERT(m.len != 0 && m.guard != 0);
		}
		break;
	}
	case ULS_FAB_RING: {
		struct uls_fab_ring r;
		if ((rc = uls_fab_ring_parse(&r, p, len)) == 0) {
			uls_fab_ring_pack(&r, out);
			FUZZ_ASSERT(r.len >= ULS_FAB_WINDOW_MIN && (r.len & (r.len - 1)) == 0);
		}
		break;
	}
	case ULS_FAB_WROTE: {
		struct uls_fab_wrote w;
		if ((rc = uls_fab_wrote_parse(&w, p, len)) == 0) {
			uls_fab_wrote_pack(&w, out);
			FUZZ_ASSERT(w.len != 0);
		}
		break;
	}
	default:
		return; /* DATA and CREDIT have no payload structure */
	}
	if (rc == 0)
		FUZZ_ASSERT(len == (size_t)uls_fab_payload_len(type));
	parsed(rc, out, p, len);
}

static void every_parser(const uint8_t *p, size_t len)
{
	static const uint8_t types[] = {
		ULS_FAB_CONNECT, ULS_FAB_DECLINE, ULS_FAB_TAKEOVER, ULS_FAB_SWITCH,
		ULS_FAB_FIN, ULS_FAB_SLEEP, ULS_FAB_REVERT, ULS_FAB_RESET, ULS_FAB_AVAIL,
		ULS_FAB_TAKEN, ULS_FAB_RING, ULS_FAB_WROTE, ULS_FAB_LEND, ULS_FAB_MOVED,
	};

	for (size_t i = 0; i < sizeof(types); i++)
		payload(types[i], p, len);
}

static void message(const uint8_t *data, size_t size)
{
	static const int classes[] = {
		ULS_FAB_CLASS_HANDSHAKE, ULS_FAB_CLASS_CONN,
		ULS_FAB_CLASS_HANDSHAKE | ULS_FAB_CLASS_CONN,
	};
	static const uint32_t slots[] = { ULS_FAB_SLOT_MIN, 8192, ULS_FAB_SLOT_MAX };
	uint8_t again[ULS_FAB_HDR_SIZE];
	struct uls_fab_hdr h;
	int any = 0;

	int rc = uls_fab_hdr_parse(&h, data, size);
	FUZZ_ASSERT(rc == 0 || rc == -EMSGSIZE);
	if (size < ULS_FAB_HDR_SIZE)
		return;
	uls_fab_hdr_pack(&h, again);
	FUZZ_ASSERT(memcmp(again, data, sizeof(again)) == 0);
	if (rc != 0)
		return;
	for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++) {
		for (size_t s = 0; s < sizeof(slots) / sizeof(slots[0]); s++) {
			if (uls_fab_hdr_check(&h, classes[c], slots[s]) != 0)
				continue;
			int fixed = uls_fab_payload_len(h.type);
			FUZZ_ASSERT(uls_fab_type_class(h.type) & classes[c]);
			FUZZ_ASSERT(h.flags == 0);
			if (fixed >= 0)
				FUZZ_ASSERT(h.len == (uint32_t)fixed);
			else
				FUZZ_ASSERT(h.len >= 1 && h.len <= slots[s] - ULS_FAB_HDR_SIZE);
			any = 1;
		}
	}
	if (any)
		payload(h.type, data + ULS_FAB_HDR_SIZE, size - ULS_FAB_HDR_SIZE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	message(data, size);
	every_parser(data, size);
	if (size >= ULS_FAB_HDR_SIZE)
		every_parser(data + ULS_FAB_HDR_SIZE, size - ULS_FAB_HDR_SIZE);
	return 0;
}
