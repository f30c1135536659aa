/* SPDX-License-Identifier: MIT */
/*
 * The fabric transport's wire messages (docs/protocol.md 9.4, 9.5, 9.10): the 24-byte
 * header, the payload of each type, and the MACs of the handshake and of TAKEOVER.
 *
 * Each structure here is the host form of a fixed-size wire layout. A pack writes exactly
 * the layout, integers little-endian whatever the host's order, reserved fields 0. A parse
 * takes (buffer, length) of memory the peer wrote: it checks the length first, copies the
 * bytes once into private memory (the peer may still be writing the slot), decodes from
 * that copy, and then checks what can be checked without connection state. It returns 0,
 * -EMSGSIZE when the length is not the layout's, or -EPROTO when a field is out of range
 * or a reserved one is not 0; after -EPROTO the structure holds the decoded fields, so a
 * server can still run 9.4's checks in their order before it DECLINEs. A structure that
 * parsed packs again to exactly the bytes it came from.
 *
 * Pure functions: no libfabric call, no allocation, no global state.
 */
#ifndef ULS_FAB_MSG_H
#define ULS_FAB_MSG_H

#include <stddef.h>
#include <stdint.h>

#define ULS_FAB_PROTO_VERSION 1
#define ULS_FAB_HDR_SIZE 24
#define ULS_FAB_ADDR_MAX 256  /* a fabric address field */
#define ULS_FAB_NONCE_SIZE 16 /* Nc, Ns */
#define ULS_FAB_MAC_SIZE 32   /* an HMAC-SHA-256: mac, Ks, proof */
#define ULS_FAB_TUPLE_SIZE 36 /* the 4-tuple of 9.2 */

/* Payload bytes of each fixed-size type (9.5). */
#define ULS_FAB_CONNECT_SIZE 392 /* CONNECT and ACCEPT */
#define ULS_FAB_DECLINE_SIZE 24  /* DECLINE and ABORT */
#define ULS_FAB_TAKEOVER_SIZE 352
#define ULS_FAB_SWITCH_SIZE 16
#define ULS_FAB_FIN_SIZE 16
#define ULS_FAB_SLEEP_SIZE 16
#define ULS_FAB_REVERT_SIZE 32
#define ULS_FAB_RESET_SIZE 8
#define ULS_FAB_AVAIL_SIZE 40
#define ULS_FAB_TAKEN_SIZE 8
#define ULS_FAB_RING_SIZE 24
#define ULS_FAB_WROTE_SIZE 8
#define ULS_FAB_LEND_SIZE 48
#define ULS_FAB_MOVED_SIZE 48

/* What the MACs cover: CONNECT's and ACCEPT's payload up to `mac`, TAKEOVER's up to
 * `proof` (9.4, 9.10). */
#define ULS_FAB_MAC_COVERS 360
#define ULS_FAB_PROOF_COVERS 320

enum uls_fab_type {
	/* handshake class */
	ULS_FAB_CONNECT = 0x01,
	ULS_FAB_ACCEPT = 0x02,
	ULS_FAB_DECLINE = 0x03,
	ULS_FAB_ABORT = 0x04,
	ULS_FAB_TAKEOVER = 0x05,
	/* connection class */
	ULS_FAB_DATA = 0x10,
	ULS_FAB_CREDIT = 0x11,
	ULS_FAB_SWITCH = 0x12,
	ULS_FAB_FIN = 0x13,
	ULS_FAB_SLEEP = 0x14,
	ULS_FAB_REVERT = 0x15, /* also handshake class, toward a TAKEOVER's sender */
	ULS_FAB_RESET = 0x16,
	ULS_FAB_AVAIL = 0x17, /* stream bytes the receiver reads from the sender's memory */
	ULS_FAB_TAKEN = 0x18, /* the answer to a FIN with CLOSE: everything before it came */
	ULS_FAB_RING = 0x19,  /* the receive ring the peer may write the stream into */
	ULS_FAB_WROTE = 0x1a, /* stream bytes the sender wrote into the receiver's ring */
	ULS_FAB_LEND = 0x1b,  /* an AVAIL of the program's own memory, for one send's time */
	ULS_FAB_MOVED = 0x1c, /* ...whose bytes the sender copied to an AVAIL's place */
};

/*
 * Receive slot classes, as bits: the values are the libfabric tags of 9.2, and a type may
 * belong to both (REVERT), as may a slot where only FI_MSG is granted.
 */
enum uls_fab_class {
	ULS_FAB_CLASS_HANDSHAKE = 1,
	ULS_FAB_CLASS_CONN = 2,
	ULS_FAB_CLASS_BULK = 4, /* DATA longer than a small slot's */
};

/* DECLINE and ABORT reasons (9.4). */
enum uls_fab_reason {
	ULS_FAB_R_TUPLE = 1,
	ULS_FAB_R_NONCE = 2,
	ULS_FAB_R_KEY = 3,
	ULS_FAB_R_MAC = 4,
	ULS_FAB_R_VERSION = 5,
	ULS_FAB_R_PARAMS = 6,
	ULS_FAB_R_RESOURCES = 7,
	ULS_FAB_R_CLOSED = 8,
	ULS_FAB_R_TIMEOUT = 9,
};

/* Flag bits of the payloads; every other bit is reserved and must be 0. */
#define ULS_FAB_CF_MAC 0x1u        /* CONNECT, ACCEPT: the sender has a key */
#define ULS_FAB_CF_NEED_WAKE 0x2u  /* CONNECT, ACCEPT: the sender has no CQ wait fd */
#define ULS_FAB_CF_READS 0x4u      /* CONNECT, ACCEPT: the sender reads and makes AVAILs */
#define ULS_FAB_CF_WRITES 0x8u     /* CONNECT, ACCEPT: the sender writes and takes writes */
#define ULS_FAB_CF_UNTAGGED 0x10u  /* CONNECT, ACCEPT: its connection slots are untagged */
#define ULS_FAB_SWITCH_NONE 0x1u   /* this direction stays on TCP */
#define ULS_FAB_FIN_CLOSE 0x1u     /* the last holder closed */
#define ULS_FAB_WANT_DATA 0x1u     /* SLEEP */
#define ULS_FAB_WANT_SPACE 0x2u    /* SLEEP */
#define ULS_FAB_REVERT_REQUEST 0x1u
#define ULS_FAB_REVERT_LEAVING 0x2u

/* CONNECT's and ACCEPT's ranges (9.4, 9.2). */
#define ULS_FAB_SLOT_MIN 2048u
#define ULS_FAB_SLOT_MAX 65536u
/* A side whose slot_size is larger has small slots of this size beside its bulk ones of
 * slot_size (9.2): DATA longer than fits a small one goes to the bulk ones. */
#define ULS_FAB_SMALL_SLOT 8192u
#define ULS_FAB_WINDOW_MIN 16384u
#define ULS_FAB_WINDOW_MAX 16777216u
#define ULS_FAB_GRANT_MAX 1024u
#define ULS_FAB_GRANT_NEW_PAIR 8u /* the least first grant that opens a pair */

struct uls_fab_hdr {
	uint8_t type;
	uint8_t flags;     /* 0 in version 1 */
	uint16_t pcredits; /* pair credits returned to the receiver */
	uint32_t len;      /* payload bytes after the header */
	uint64_t tag;      /* the receiver's; 0 where 9.5 says */
	uint32_t seq;
	uint32_t wnd;      /* connection window returned, bytes */
};

/* The 4-tuple (9.2): addresses as IPv6 in network order (IPv4 mapped), ports in host
 * order here and little-endian on the wire. */
struct uls_fab_tuple4 {
	uint8_t client[16];
	uint8_t server[16];
	uint16_t client_port;
	uint16_t server_port;
};

/* CONNECT and ACCEPT (9.4). */
struct uls_fab_connect {
	uint16_t version;
	uint16_t flags;       /* ULS_FAB_CF_* */
	uint32_t slot_size;   /* the sender's receive slots */
	struct uls_fab_tuple4 tuple; /* the sender's view */
	uint32_t conn_window; /* bytes the receiver may send before a window return */
	uint8_t nc[ULS_FAB_NONCE_SIZE];
	uint8_t ns[ULS_FAB_NONCE_SIZE];
	uint64_t tag;         /* the sender's own */
	uint64_t ep_id;
	uint16_t pair_grant;
	uint16_t addr_len;
	uint32_t reserved;    /* as received, for check; pack writes 0 */
	uint8_t addr[ULS_FAB_ADDR_MAX];
	uint8_t mac[ULS_FAB_MAC_SIZE];
};

/* DECLINE (nonce = Nc) and ABORT (nonce = Ns). */
struct uls_fab_decline {
	uint32_t reason; /* enum uls_fab_reason */
	uint8_t nonce[ULS_FAB_NONCE_SIZE];
};

struct uls_fab_switch {
	uint64_t pos;
	uint32_t flags; /* ULS_FAB_SWITCH_NONE */
};

struct uls_fab_fin {
	uint64_t pos;    /* end of the direction */
	uint32_t sleeps; /* SLEEPs the sender sent */
	uint32_t flags;  /* ULS_FAB_FIN_CLOSE */
};

struct uls_fab_sleep {
	uint64_t pos;  /* the sleeper's received position */
	uint32_t want; /* ULS_FAB_WANT_*, at least one */
	uint32_t n;    /* the sleeper's count, from 1 */
};

struct uls_fab_revert {
	uint32_t flags; /* ULS_FAB_REVERT_* */
	uint64_t fabric_end;
	uint64_t tcp_pos;
	uint64_t rx_consumed;
};

struct uls_fab_reset {
	uint32_t reason;
};

/*
 * AVAIL (9.6): the next len bytes of the sender's stream lie at addr in its memory,
 * registered under key, and the 8 bytes at guard_addr (same key) hold guard while they
 * do. TAKEN answers a FIN with CLOSE (9.8): every byte before fabric position pos
 * arrived, offered bytes copied out of the sender's memory.
 */
struct uls_fab_avail {
	uint32_t len;
	uint64_t addr;
	uint64_t key;
	uint64_t guard_addr;
	uint64_t guard;
};

struct uls_fab_taken {
	uint64_t pos;
};

/*
 * LEND (9.6): as AVAIL, but the bytes lie in the sending program's own buffer for as long
 * as its send waits, and the guard word is registered apart, under guard_key. MOVED: the
 * lent bytes of the stream from fabric position pos on (len of them) now lie at addr
 * under key, guarded as an AVAIL's (guard at guard_addr, same key).
 */
struct uls_fab_lend {
	uint32_t len;
	uint64_t addr;
	uint64_t key;
	uint64_t guard_addr;
	uint64_t guard_key;
	uint64_t guard;
};

struct uls_fab_moved {
	uint64_t pos;
	uint32_t len;
	uint64_t addr;
	uint64_t key;
	uint64_t guard_addr;
	uint64_t guard;
};

/*
 * RING (9.14): the sender's receive ring for this connection, registered for the peer's
 * RMA writes under key: the byte at fabric position p of the peer's stream goes to
 * addr + p % len, len being the window the sender announced. WROTE: the next len bytes of
 * the sender's stream were written into the receiver's ring, before this message.
 */
struct uls_fab_ring {
	uint64_t addr;
	uint64_t key;
	uint32_t len;
};

struct uls_fab_wrote {
	uint32_t len;
};

/* TAKEOVER (9.10), from a non-owner C of side A to B's handshake slots. */
struct uls_fab_takeover {
	uint64_t tag;     /* B's tag of the connection */
	uint64_t new_tag; /* C's, for B's answers */
	uint64_t ep_id;   /* C's */
	uint16_t addr_len;
	struct uls_fab_revert revert; /* REQUEST|LEAVING, from the shared state */
	uint8_t addr[ULS_FAB_ADDR_MAX]; /* C's */
	uint8_t proof[ULS_FAB_MAC_SIZE];
};

/* Types: the class bits of a type (0: unknown type), the exact payload length of a
 * fixed-size type (-1: DATA, whose length varies, or unknown), a name for log lines. */
int uls_fab_type_class(uint8_t type);
int uls_fab_payload_len(uint8_t type);
const char *uls_fab_type_name(uint8_t type);
/* "TUPLE" .. "TIMEOUT", as `ulsock stat` prints them; "unknown" for other values. */
const char *uls_fab_reason_name(uint32_t reason);

/* A new pair needs a first grant of at least ULS_FAB_GRANT_NEW_PAIR (9.4, 9.6). */
static inline int uls_fab_grant_opens_pair(uint16_t grant)
{
	return grant >= ULS_FAB_GRANT_NEW_PAIR;
}

/*
 * The header. Parse takes the whole message as received: it needs at least the header
 * and exactly `len` payload bytes after it (-EMSGSIZE otherwise). Check applies 9.11's
 * header rules that need no connection state, for a message that arrived in a slot of
 * class_of_slot (one or both ULS_FAB_CLASS_* bits) with receive slots of rx_slot_size
 * bytes: a known type of that class, flags 0, the type's payload length (DATA: 1 to
 * rx_slot_size - 24), and 9.5's tag rules (0 in CONNECT, ABORT and TAKEOVER, non-zero but
 * in CREDIT); pcredits and wnd 0 in the handshake class (its header is authenticated by
 * nothing and its slots are not the pair's), and wnd 0 with tag 0 (no connection to
 * return it to). Returns 0 or -EPROTO.
 */
void uls_fab_hdr_pack(const struct uls_fab_hdr *h, uint8_t out[ULS_FAB_HDR_SIZE]);
int uls_fab_hdr_parse(struct uls_fab_hdr *h, const void *buf, size_t len);
int uls_fab_hdr_check(const struct uls_fab_hdr *h, int class_of_slot, uint32_t rx_slot_size);

void uls_fab_tuple_pack(const struct uls_fab_tuple4 *t, uint8_t out[ULS_FAB_TUPLE_SIZE]);
void uls_fab_tuple_unpack(struct uls_fab_tuple4 *t, const uint8_t in[ULS_FAB_TUPLE_SIZE]);

/*
 * CONNECT and ACCEPT. Check says why a decoded payload is out of 9.4's ranges: 0 when it
 * is not, ULS_FAB_R_VERSION for a version other than 1, ULS_FAB_R_MAC for a non-zero
 * `mac` without the MAC flag, ULS_FAB_R_PARAMS for the rest (flags beyond bits 0-2,
 * slot_size, conn_window, pair_grant 1 to 1024, addr_len 1 to 256, reserved, tag 0).
 * Parse applies it (-EPROTO when it fails).
 */
void uls_fab_connect_pack(const struct uls_fab_connect *c, uint8_t out[ULS_FAB_CONNECT_SIZE]);
int uls_fab_connect_parse(struct uls_fab_connect *c, const void *buf, size_t len);
int uls_fab_connect_check(const struct uls_fab_connect *c);

/* DECLINE and ABORT: reason 1 to 9, reserved 0. */
void uls_fab_decline_pack(const struct uls_fab_decline *d, uint8_t out[ULS_FAB_DECLINE_SIZE]);
int uls_fab_decline_parse(struct uls_fab_decline *d, const void *buf, size_t len);

/* SWITCH, FIN, SLEEP (want 1 to 3, n from 1), REVERT, RESET: unknown flags and reserved
 * fields must be 0. */
void uls_fab_switch_pack(const struct uls_fab_switch *s, uint8_t out[ULS_FAB_SWITCH_SIZE]);
int uls_fab_switch_parse(struct uls_fab_switch *s, const void *buf, size_t len);
void uls_fab_fin_pack(const struct uls_fab_fin *f, uint8_t out[ULS_FAB_FIN_SIZE]);
int uls_fab_fin_parse(struct uls_fab_fin *f, const void *buf, size_t len);
void uls_fab_sleep_pack(const struct uls_fab_sleep *s, uint8_t out[ULS_FAB_SLEEP_SIZE]);
int uls_fab_sleep_parse(struct uls_fab_sleep *s, const void *buf, size_t len);
void uls_fab_revert_pack(const struct uls_fab_revert *r, uint8_t out[ULS_FAB_REVERT_SIZE]);
int uls_fab_revert_parse(struct uls_fab_revert *r, const void *buf, size_t len);
void uls_fab_reset_pack(const struct uls_fab_reset *r, uint8_t out[ULS_FAB_RESET_SIZE]);
int uls_fab_reset_parse(struct uls_fab_reset *r, const void *buf, size_t len);
/* AVAIL: len 1 or more, reserved 0, guard non-zero; TAKEN: any position. */
void uls_fab_avail_pack(const struct uls_fab_avail *a, uint8_t out[ULS_FAB_AVAIL_SIZE]);
int uls_fab_avail_parse(struct uls_fab_avail *a, const void *buf, size_t len);
void uls_fab_taken_pack(const struct uls_fab_taken *t, uint8_t out[ULS_FAB_TAKEN_SIZE]);
int uls_fab_taken_parse(struct uls_fab_taken *t, const void *buf, size_t len);
/* LEND and MOVED: len 1 or more, reserved 0, guard non-zero. */
void uls_fab_lend_pack(const struct uls_fab_lend *l, uint8_t out[ULS_FAB_LEND_SIZE]);
int uls_fab_lend_parse(struct uls_fab_lend *l, const void *buf, size_t len);
void uls_fab_moved_pack(const struct uls_fab_moved *m, uint8_t out[ULS_FAB_MOVED_SIZE]);
int uls_fab_moved_parse(struct uls_fab_moved *m, const void *buf, size_t len);
/* RING: len a power of two from ULS_FAB_WINDOW_MIN to ULS_FAB_WINDOW_MAX, reserved 0;
 * WROTE: len 1 or more, reserved 0. */
void uls_fab_ring_pack(const struct uls_fab_ring *r, uint8_t out[ULS_FAB_RING_SIZE]);
int uls_fab_ring_parse(struct uls_fab_ring *r, const void *buf, size_t len);
void uls_fab_wrote_pack(const struct uls_fab_wrote *w, uint8_t out[ULS_FAB_WROTE_SIZE]);
int uls_fab_wrote_parse(struct uls_fab_wrote *w, const void *buf, size_t len);

/* TAKEOVER: tag and new_tag non-zero, addr_len 1 to 256, reserved 0, the REVERT fields
 * with flags exactly REQUEST|LEAVING. */
void uls_fab_takeover_pack(const struct uls_fab_takeover *t,
			   uint8_t out[ULS_FAB_TAKEOVER_SIZE]);
int uls_fab_takeover_parse(struct uls_fab_takeover *t, const void *buf, size_t len);

/*
 * The MACs of 9.4 and 9.10 over packed payloads (already copied out of the slot). Key K
 * is the key file's bytes; klen 0 means no key, and then CONNECT's and ACCEPT's `mac` is
 * 32 zero bytes while Ks is still derived, with the empty key. The _ok functions compare
 * in constant time and return 1 when the payload's own `mac` or `proof` is right; whether
 * the MAC flag matches the receiver's key (KEY) is the caller's check, made before.
 */
void uls_fab_connect_mac(const void *key, size_t klen,
			 const uint8_t payload[ULS_FAB_CONNECT_SIZE],
			 uint8_t mac[ULS_FAB_MAC_SIZE]);
void uls_fab_accept_mac(const void *key, size_t klen, const uint8_t payload[ULS_FAB_CONNECT_SIZE],
			const uint8_t connect_mac[ULS_FAB_MAC_SIZE], uint8_t mac[ULS_FAB_MAC_SIZE]);
int uls_fab_connect_mac_ok(const void *key, size_t klen,
			   const uint8_t payload[ULS_FAB_CONNECT_SIZE]);
int uls_fab_accept_mac_ok(const void *key, size_t klen, const uint8_t payload[ULS_FAB_CONNECT_SIZE],
			  const uint8_t connect_mac[ULS_FAB_MAC_SIZE]);
/* Ks = HMAC-SHA-256(K, "ulsock-fabric-1 session" ‖ Nc ‖ Ns ‖ tag_c ‖ tag_s), the tags as
 * 8 little-endian bytes each. */
void uls_fab_session_secret(const void *key, size_t klen, const uint8_t nc[ULS_FAB_NONCE_SIZE],
			    const uint8_t ns[ULS_FAB_NONCE_SIZE], uint64_t tag_c, uint64_t tag_s,
			    uint8_t ks[ULS_FAB_MAC_SIZE]);
void uls_fab_takeover_proof(const uint8_t ks[ULS_FAB_MAC_SIZE],
			    const uint8_t payload[ULS_FAB_TAKEOVER_SIZE],
			    uint8_t proof[ULS_FAB_MAC_SIZE]);
int uls_fab_takeover_proof_ok(const uint8_t ks[ULS_FAB_MAC_SIZE],
			      const uint8_t payload[ULS_FAB_TAKEOVER_SIZE]);

#endif
