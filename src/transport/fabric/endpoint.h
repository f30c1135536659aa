/* SPDX-License-Identifier: MIT */
/*
 * A process's reliable-datagram endpoint on a fabric (docs/protocol.md, 9.2): one
 * FI_EP_RDM endpoint with its address vector and one completion queue, opened with
 * manual progress (only this process's own calls move data: no helper thread) and, where
 * the provider offers one, a wait descriptor that a sleeper polls in the kernel.
 *
 * The calls return libfabric's convention (0, a count, or a negative FI_ errno) and run
 * under the re-entry guard. One thread at a time per endpoint (FI_THREAD_DOMAIN): the
 * caller serialises.
 */
#ifndef ULS_FAB_ENDPOINT_H
#define ULS_FAB_ENDPOINT_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_rma.h>

#define ULS_FAB_ADDR_MAX 256

struct uls_fab_ep {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	int wait_fd; /* the CQ's wait descriptor, or -1: the provider has none */
	int reads;   /* RMA reads of a peer's registered memory (uls_fab_ep_read) */
	int writes;  /* RMA writes into it, ordered before later sends (uls_fab_ep_write) */
	int source;  /* each message's source is reported (FI_SOURCE: uls_fab_ep_poll) */
	int msg;     /* untagged messages too (FI_MSG: uls_fab_ep_send, uls_fab_ep_recv) */
	size_t inject_size; /* the longest send the provider copies in the call itself */
	size_t addr_len;
	uint8_t addr[ULS_FAB_ADDR_MAX]; /* this endpoint's address (fi_getname) */
	char prov[32];                 /* the provider, as fi_info names it */
	char fabric_name[64];
};

/*
 * Opens an endpoint on provider prov ("tcp;ofi_rxm"; NULL: libfabric's first that fits)
 * at node, an address of this host (NULL: the provider's choice). Returns 0, or -1 with
 * why (wlen bytes); e is then closed. Loads libfabric first (lib.h).
 */
int uls_fab_ep_open(struct uls_fab_ep *e, const char *prov, const char *node, char *why,
		    size_t wlen);
/* Closes what uls_fab_ep_open opened; e may be half open or closed already. */
void uls_fab_ep_close(struct uls_fab_ep *e);

/* Adds a peer's address (len bytes) to the address vector: 0 and *out, or -FI_errno. */
int uls_fab_ep_insert(struct uls_fab_ep *e, const void *addr, size_t len, fi_addr_t *out);

/*
 * A tagged send of len bytes from buf to dest, and a tagged receive into buf from src
 * (FI_ADDR_UNSPEC: any) of a message whose tag matches tag outside ignore. desc is the
 * buffer's registration descriptor (a pool's, pool.h; NULL where none is needed). ctx is
 * the operation's struct fi_context, returned in its completion. -FI_EAGAIN: no room
 * now; read completions (uls_fab_ep_poll) and try again.
 */
ssize_t uls_fab_ep_tsend(struct uls_fab_ep *e, const void *buf, size_t len, void *desc,
			 fi_addr_t dest, uint64_t tag, struct fi_context *ctx);
ssize_t uls_fab_ep_trecv(struct uls_fab_ep *e, void *buf, size_t len, void *desc,
			 fi_addr_t src, uint64_t tag, uint64_t ignore, struct fi_context *ctx);
/* The same, untagged (where e->msg is set): a provider keeps untagged receives in a queue
 * of their own, matched by source alone. */
ssize_t uls_fab_ep_send(struct uls_fab_ep *e, const void *buf, size_t len, void *desc,
			fi_addr_t dest, struct fi_context *ctx);
/* A send of at most e->inject_size bytes that the provider copies before it returns: no
 * completion follows, and buf is free at once. tagged: with tag, else untagged. */
ssize_t uls_fab_ep_inject(struct uls_fab_ep *e, const void *buf, size_t len, fi_addr_t dest,
			  int tagged, uint64_t tag);
ssize_t uls_fab_ep_recv(struct uls_fab_ep *e, void *buf, size_t len, void *desc,
			fi_addr_t src, struct fi_context *ctx);

/*
 * Registers len bytes at buf for the peer's reads or writes (access: FI_REMOTE_READ,
 * FI_REMOTE_WRITE): 0 with *mr, the key to give the peer and the RMA address of buf (its
 * virtual address, or 0 where the provider counts from the region's start), or
 * -FI_errno. want_key is the key asked for where the provider takes the caller's (a
 * random one: a peer must not guess another connection's). uls_fab_ep_mr_close undoes it.
 */
int uls_fab_ep_mr_reg(struct uls_fab_ep *e, void *buf, size_t len, uint64_t access,
		      uint64_t want_key, struct fid_mr **mr, uint64_t *key, uint64_t *addr);
void uls_fab_ep_mr_close(struct fid_mr *mr);

/*
 * One RMA read of nr pieces of src's registered memory into nl local pieces of the same
 * total length, which need no registration where e->reads is set (at most 4 of each).
 * -FI_EAGAIN: no room now.
 */
ssize_t uls_fab_ep_read(struct uls_fab_ep *e, const struct iovec *local, size_t nl,
			const struct fi_rma_iov *remote, size_t nr, fi_addr_t src,
			struct fi_context *ctx);

/*
 * One RMA write of len bytes at buf (no registration needed where e->writes is set) into
 * dest's registered memory at addr under key. A send to dest posted after it is
 * delivered after its bytes are placed (FI_ORDER_SAW, which e->writes requires).
 * -FI_EAGAIN: no room now.
 */
ssize_t uls_fab_ep_write(struct uls_fab_ep *e, const void *buf, size_t len, fi_addr_t dest,
			 uint64_t addr, uint64_t key, struct fi_context *ctx);

/*
 * Reads up to n completions into out, which also progresses the endpoint: the count, 0
 * when there is none, the negative errno of an error completion (its operation's
 * context in *err_ctx), or another -FI_errno. Where e->source is set and src is not NULL,
 * src[i] is the address of completion i's sender for a receive: its entry in the address
 * vector, or FI_ADDR_NOTAVAIL for a sender that has none (for a send, meaningless).
 */
ssize_t uls_fab_ep_poll(struct uls_fab_ep *e, struct fi_cq_tagged_entry *out, size_t n,
			fi_addr_t *src,
			void **err_ctx);

/*
 * Sleeps in the kernel until a completion may be there, at most timeout_ms (-1: no
 * limit): 1 when one may be, 0 at the timeout, or -FI_errno. Without a wait descriptor
 * (e->wait_fd < 0) it returns -FI_ENOSYS at once: the caller needs another wake-up.
 */
int uls_fab_ep_wait(struct uls_fab_ep *e, int timeout_ms);

#endif
