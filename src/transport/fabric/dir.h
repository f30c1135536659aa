/* SPDX-License-Identifier: MIT */
/*
 * The fabric transport's directory protocol (docs/protocol.md 9.3): the messages that
 * fabricd, the client's side connection and a registering server exchange, and the
 * library's two roles in it.
 *
 * The codec packs and parses the five fixed-size messages. Every parse takes the bytes as
 * they came from the network or the unix socket: the size is checked first, then the
 * header (magic, version, type, length), then each field, reserved ones included, and
 * any failure returns -EBADMSG without touching more than the output structure. Strings
 * are kept NUL-padded in their fixed arrays, so a parsed one is always terminated.
 *
 * The client side is a non-blocking state machine the transport steps from its own calls
 * and sleeps (struct uls_fab_dirq); the server side sends one REG per accepted socket
 * over a per-process unix connection, never waiting (uls_fab_dir_register).
 *
 * fabricd builds only the codec (ULS_FAB_DIR_CODEC_ONLY), without the library's own
 * descriptors and real-libc table.
 */
#ifndef ULS_FAB_DIR_H
#define ULS_FAB_DIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define ULS_FAB_DIR_MAGIC 0x44464C55u /* "ULFD" little-endian */
#define ULS_FAB_DIR_VERSION 1
#define ULS_FAB_DIR_PORT 62840 /* ULSOCK_FABRIC_PORT's default */

enum uls_fab_dir_type {
	ULS_FAB_DIR_BANNER = 1,
	ULS_FAB_DIR_HELLO = 2,
	ULS_FAB_DIR_OFFER = 3,
	ULS_FAB_DIR_NO = 4,
	ULS_FAB_DIR_REG = 5,
};

/* Whole-message lengths, header included. */
#define ULS_FAB_DIR_HDR_LEN 8
#define ULS_FAB_BANNER_LEN 32
#define ULS_FAB_HELLO_LEN 64
#define ULS_FAB_OFFER_LEN 384
#define ULS_FAB_NO_LEN 16
#define ULS_FAB_REG_LEN 440
#define ULS_FAB_DIR_MAX_LEN ULS_FAB_REG_LEN

enum uls_fab_no_reason {
	ULS_FAB_NO_NOT_REGISTERED = 1,
	ULS_FAB_NO_TUPLE_MISMATCH = 2,
	ULS_FAB_NO_BUSY = 3,
	ULS_FAB_NO_VERSION = 4,
};

#define ULS_FAB_TUPLE_LEN 36
#define ULS_FAB_NONCE_LEN 16
#define ULS_FAB_ADDR_MAX 256
#define ULS_FAB_PROVIDER_LEN 32
#define ULS_FAB_FABRIC_LEN 64
#define ULS_FAB_FLAG_KEY 1u /* OFFER and REG: that side has a key */

/* Client address at 0, server address at 16 (IPv4 as ::ffff:a.b.c.d), ports at 32, 34. */
struct uls_fab_tuple {
	uint8_t b[ULS_FAB_TUPLE_LEN];
};

struct uls_fab_banner {
	uint8_t nd[ULS_FAB_NONCE_LEN];
	uint8_t min_version, max_version;
};

struct uls_fab_hello {
	uint8_t nd[ULS_FAB_NONCE_LEN];
	struct uls_fab_tuple tuple; /* the client's view */
};

/* What a registered server offers; OFFER carries it from the REG, field for field. */
struct uls_fab_where {
	uint8_t ns[ULS_FAB_NONCE_LEN];
	uint32_t flags;
	uint16_t addr_len;
	char provider[ULS_FAB_PROVIDER_LEN];
	char fabric[ULS_FAB_FABRIC_LEN];
	uint8_t addr[ULS_FAB_ADDR_MAX];
};

struct uls_fab_reg {
	struct uls_fab_tuple tuple; /* the server's view */
	uint16_t family;            /* 4 or 6: the socket's */
	uint64_t inode, cookie;
	struct uls_fab_where where; /* flags: only ULS_FAB_FLAG_KEY */
};

/*
 * The header of buf (at least 8 bytes): 0 with *type and *len (the type's whole length)
 * when magic, version and length agree with a known type, else -EBADMSG.
 */
int uls_fab_dir_header(const void *buf, size_t n, uint8_t *type, size_t *len);

/*
 * Each pack writes its message's whole length into out (sized by the caller) and returns
 * that length, or -EINVAL for a field it cannot encode (a string too long or not printable,
 * addr_len over 256, an unknown flag or family). Each parse takes exactly the message's
 * length and returns 0, or -EBADMSG for anything 9.3 calls malformed.
 */
int uls_fab_banner_pack(void *out, const struct uls_fab_banner *m);
int uls_fab_banner_parse(const void *buf, size_t n, struct uls_fab_banner *m);
int uls_fab_hello_pack(void *out, const struct uls_fab_hello *m);
int uls_fab_hello_parse(const void *buf, size_t n, struct uls_fab_hello *m);
int uls_fab_offer_pack(void *out, const struct uls_fab_where *m);
int uls_fab_offer_parse(const void *buf, size_t n, struct uls_fab_where *m);
int uls_fab_no_pack(void *out, uint32_t reason);
int uls_fab_no_parse(const void *buf, size_t n, uint32_t *reason);
int uls_fab_reg_pack(void *out, const struct uls_fab_reg *m);
int uls_fab_reg_parse(const void *buf, size_t n, struct uls_fab_reg *m);

/*
 * The 4-tuple of a connection from its client's and its server's address (AF_INET or
 * AF_INET6). Returns 0, or -EAFNOSUPPORT.
 */
int uls_fab_tuple_make(struct uls_fab_tuple *t, const struct sockaddr *client,
		       const struct sockaddr *server);

/* The address at off (0 client, 16 server) of t as a sockaddr_in6 (port included). */
void uls_fab_tuple_addr(const struct uls_fab_tuple *t, int server, struct sockaddr_in6 *out);

#ifndef ULS_FAB_DIR_CODEC_ONLY

/*
 * How long the client waits for each step, and keeps a failing server address. The
 * banner's wait is fabricd's time to accept, which a loaded server host stretches: with
 * 50 ms, each of six runs of the fabric tests beside a CPU load (load average 6 on 2
 * vCPUs) failed a test or more on "no banner in time", cached 30 s for later
 * connections. A silent stranger on the port costs the side connection 1 s (the
 * program's bytes go on TCP meanwhile). The answer's wait is longer than fabricd's for a
 * REG (3 s, fabricd.c), so that a late NOT_REGISTERED is not taken for a host without
 * fabricd (cached).
 */
#define ULS_FAB_DIRQ_CONNECT_NS 200000000ull
#define ULS_FAB_DIRQ_BANNER_NS 1000000000ull
#define ULS_FAB_DIRQ_ANSWER_NS 5000000000ull
#define ULS_FAB_DIRQ_CACHE_NS 30000000000ull

enum uls_fab_dirq_state {
	ULS_FAB_DIRQ_IDLE,
	ULS_FAB_DIRQ_CONNECTING,
	ULS_FAB_DIRQ_BANNER, /* reading the 32 bytes; nothing sent */
	ULS_FAB_DIRQ_HELLO,  /* sending HELLO */
	ULS_FAB_DIRQ_ANSWER, /* reading OFFER or NO */
	ULS_FAB_DIRQ_DONE,
	ULS_FAB_DIRQ_FAILED,
};

/*
 * One client's exchange with the server host's fabricd. Its fd is one of the library's own
 * descriptors, recorded at &q->fd: the structure must not move between start and fini.
 */
struct uls_fab_dirq {
	int fd;
	int state;
	short events;              /* what step waits for on fd: POLLOUT or POLLIN */
	uint64_t deadline_ns;      /* CLOCK_MONOTONIC; the step fails past it */
	int pid;                   /* the process that opened fd */
	uint8_t server[16];        /* the server's address, mapped, for the cache */
	struct uls_fab_tuple tuple; /* the client's view of the program's connection */
	uint8_t nd[ULS_FAB_NONCE_LEN];
	uint8_t buf[ULS_FAB_OFFER_LEN];
	size_t got, sent;
	struct uls_fab_where offer; /* DONE: the OFFER */
	char why[80];               /* FAILED: a reason of 9.1's table, without "fabric: " */
};

/*
 * Starts the exchange for the program's connection from local to peer (getsockname and
 * getpeername of the client's socket): a non-blocking side connection from local's
 * address (port 0) to (peer's address, port). Returns what uls_fab_dirq_step returns; a
 * server address that failed within 30 s fails at once ("no directory answer (cached)").
 */
int uls_fab_dirq_start(struct uls_fab_dirq *q, const struct sockaddr *local,
		       const struct sockaddr *peer, uint16_t port, uint64_t now_ns);

/*
 * Advances with non-blocking calls only. Returns 1 (DONE: q->offer), -1 (FAILED: q->why,
 * fd closed) or 0 (wait for q->events on q->fd, at most until q->deadline_ns).
 */
int uls_fab_dirq_step(struct uls_fab_dirq *q, uint64_t now_ns);

/* Closes what is still open; q may be idle, done or failed. */
void uls_fab_dirq_fini(struct uls_fab_dirq *q);

/* Forgets every cached failure (tests). */
void uls_fab_dirq_cache_clear(void);

/*
 * Fills a REG's tuple (the server's view), family, inode and cookie from an accepted TCP
 * socket; where is left for the caller. Returns 0 or -errno.
 */
int uls_fab_reg_from_socket(struct uls_fab_reg *r, int fd);

/*
 * Sends r to the fabricd of directory port port, without waiting: on the process's unix
 * connection to "\0ulsock-fabricd.<port>", opened on first use and again after a fork or
 * a change of effective uid, and kept only if fabricd runs as root or as this uid.
 * Returns 0 when sent, else -errno with why (wlen bytes) saying what was not done.
 */
int uls_fab_dir_register(const struct uls_fab_reg *r, uint16_t port, char *why, size_t wlen);

#endif /* ULS_FAB_DIR_CODEC_ONLY */

#endif
