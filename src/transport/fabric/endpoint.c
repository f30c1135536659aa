/* SPDX-License-Identifier: MIT */
/* A process's fabric endpoint (endpoint.h). */
#include "endpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../os/guard.h"
#include "../../os/libc.h"
#include "lib.h"

/*
 * What ulsock asks of a provider: reliable datagrams with tagged messages, sends and
 * receives in order (the header's sequence numbers check it), manual progress, one thread
 * at a time, an address table. The registration modes it can follow: local buffers
 * registered (its slot pools are: pool.h), registrations bound to the endpoint, and the
 * remote-access modes, which matter only once RMA comes.
 */
static struct fi_info *hints_for(const char *prov)
{
	struct fi_info *h = uls_fab.dupinfo(NULL);

	if (!h)
		return NULL;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED;
	h->mode = FI_CONTEXT;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	h->domain_attr->av_type = FI_AV_TABLE;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY;
	if (prov && !(h->fabric_attr->prov_name = strdup(prov))) {
		uls_fab.freeinfo(h);
		return NULL;
	}
	return h;
}

/* The completion queue, with a wait descriptor where the provider has one. */
static int open_cq(struct uls_fab_ep *e)
{
	struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
	int r = fi_cq_open(e->domain, &attr, &e->cq, NULL);

	if (r == 0 && fi_control(&e->cq->fid, FI_GETWAIT, &e->wait_fd) == 0 && e->wait_fd >= 0)
		return 0;
	/* No descriptor to sleep on (udp;ofi_rxd, shm): a queue without a wait object. */
	if (r == 0)
		fi_close(&e->cq->fid);
	e->cq = NULL;
	e->wait_fd = -1;
	attr.wait_obj = FI_WAIT_NONE;
	return fi_cq_open(e->domain, &attr, &e->cq, NULL);
}

/*
 * shm reads in the caller's call through cross-memory attach, which the kernel allows
 * toward a process of the same user unless Yama restricts ptrace (scope 1 and up: only
 * descendants, or with CAP_SYS_PTRACE); otherwise its reads wait for the peer's own
 * progress. So: Yama absent or at 0, or root at 1.
 */
static int peers_readable(void)
{
	char b[8] = "";
	int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 1;
	ssize_t n = uls_libc.read(fd, b, sizeof(b) - 1);
	uls_libc.close(fd);
	return n > 0 && (b[0] == '0' || (b[0] == '1' && geteuid() == 0));
}

/*
 * Providers on which the transport reads a peer's memory (protocol.md 9.6, AVAIL): shm,
 * whose read is one process_vm_readv made in the reader's own call, with no work asked
 * of the peer's program. Elsewhere a read waits for the peer's progress, or a reader's
 * buffer needs a registration of its own: not built, and not measured.
 */
static int reads_on(const struct fi_info *info)
{
	return strcmp(info->fabric_attr->prov_name, "shm") == 0 && peers_readable();
}

/*
 * The provider chosen, asked again with caps (and msg_order, where order is not 0) and
 * the registration modes mr_mode: 1 when it grants them without any of mr_refused, and
 * e->info is then its answer; 0, nothing changed.
 */
static int ask_again(struct uls_fab_ep *e, const char *node, uint64_t caps, uint64_t order,
		     uint64_t mr_mode, uint64_t mr_refused)
{
	struct fi_info *h = uls_fab.dupinfo(e->info), *got = NULL;
	int took = 0;

	if (!h)
		return 0;
	h->caps = FI_TAGGED | caps;
	h->mode = FI_CONTEXT;
	if (order) {
		h->tx_attr->msg_order = order;
		h->rx_attr->msg_order = order;
	}
	h->domain_attr->mr_mode = mr_mode;
	if (uls_fab.getinfo(ULS_FAB_VERSION, node, NULL, node ? FI_SOURCE : 0, h, &got) == 0 &&
	    got && strcmp(got->fabric_attr->prov_name, e->info->fabric_attr->prov_name) == 0 &&
	    (got->caps & caps) == caps && (got->tx_attr->msg_order & order) == order &&
	    (got->rx_attr->msg_order & order) == order &&
	    !(got->domain_attr->mr_mode & mr_refused)) {
		uls_fab.freeinfo(e->info);
		e->info = got;
		got = NULL;
		took = 1;
	}
	if (got)
		uls_fab.freeinfo(got);
	uls_fab.freeinfo(h);
	return took;
}

/* Reads: taken when granted without registrations of local buffers. */
static void ask_reads(struct uls_fab_ep *e, const char *node)
{
	e->reads = ask_again(e, node, FI_RMA | FI_READ | FI_REMOTE_READ, 0,
			     FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
			     FI_MR_LOCAL);
}

/*
 * Providers on which the transport writes long sends into the peer's receive ring
 * (protocol.md 9.14, RING and WROTE): those that grant RMA writes without registrations
 * of local buffers, with a later send delivered after a write's bytes are placed
 * (FI_ORDER_SAW) and writes placed in order (FI_ORDER_WAW), where reads are not taken
 * (shm reads in the reader's own call; a read elsewhere waits for the sender's progress,
 * where a write leaves with the sender's call as a send does). tcp;ofi_rxm and net
 * grant them.
 */
static void ask_writes(struct uls_fab_ep *e, const char *node)
{
	/* SAW: a WROTE after its write finds the bytes placed; WAW: a write again at the
	 * same place (after a WROTE that could not be posted) lands after the first. Keys
	 * are the caller's (random), never a provider's count a peer could guess. */
	e->writes = ask_again(e, node, FI_RMA | FI_WRITE | FI_REMOTE_WRITE,
			      FI_ORDER_SAW | FI_ORDER_WAW | FI_ORDER_SAS,
			      FI_MR_ENDPOINT | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED,
			      FI_MR_LOCAL | FI_MR_PROV_KEY);
}

/*
 * One more capability, asked with everything taken before and on the same terms (the
 * orders writes need, the registration modes reads or writes refuse): 1 when granted.
 */
static int ask_more(struct uls_fab_ep *e, const char *node, uint64_t cap)
{
	uint64_t keep = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
			FI_SOURCE | FI_MSG;
	uint64_t order = e->writes ? FI_ORDER_SAW | FI_ORDER_WAW | FI_ORDER_SAS : 0;
	uint64_t refused = e->writes  ? FI_MR_LOCAL | FI_MR_PROV_KEY
			   : e->reads ? FI_MR_LOCAL
				      : 0;

	return ask_again(e, node, (e->info->caps & keep) | cap, order,
			 e->info->domain_attr->mr_mode, refused);
}

/*
 * Each message's source (FI_SOURCE), so that a message can be checked against its
 * connection's peer (protocol.md 9.11): taken where granted on the same terms as reads
 * or writes, else messages are told apart by their tags alone. Not on ofi_rxd
 * (udp;ofi_rxd, libfabric 1.17), which grants it but names a sender it has no address
 * for as the table's first entry (test_fabric_ep): a check there would take a stranger
 * for a peer.
 */
static void ask_source(struct uls_fab_ep *e, const char *node)
{
	if (!strstr(e->info->fabric_attr->prov_name, "ofi_rxd"))
		e->source = ask_more(e, node, FI_SOURCE);
}

/*
 * Untagged messages besides the tagged ones, asked last: the connection class goes
 * untagged where granted (protocol.md 9.2), so that its receives have a queue of their
 * own. A provider matches a tagged message by walking its posted receives in order, and
 * the handshake and bulk slots that sit before reposted connection slots cost every
 * short message that walk (shm, libfabric 1.17: 80 receives ahead added 0.3 to 0.45 us
 * to fi_pingpong's 64-byte half round trip of 0.8 us).
 */
static void ask_msg(struct uls_fab_ep *e, const char *node)
{
	e->msg = ask_more(e, node, FI_MSG);
}

static int fail(struct uls_fab_ep *e, char *why, size_t wlen, const char *step, int r)
{
	snprintf(why, wlen, "%s: %s", step, uls_fab.strerror(r < 0 ? -r : r));
	uls_fab_ep_close(e);
	uls_inside_end();
	return -1;
}

int uls_fab_ep_open(struct uls_fab_ep *e, const char *prov, const char *node, char *why,
		    size_t wlen)
{
	struct fi_info *hints;
	int r;

	memset(e, 0, sizeof(*e));
	e->wait_fd = -1;
	if (uls_fab_load(why, wlen) < 0)
		return -1;
	uls_inside_begin();
	hints = hints_for(prov);
	if (!hints)
		return fail(e, why, wlen, "fi_dupinfo", -FI_ENOMEM);
	r = uls_fab.getinfo(ULS_FAB_VERSION, node, NULL, node ? FI_SOURCE : 0, hints, &e->info);
	uls_fab.freeinfo(hints);
	if (r)
		return fail(e, why, wlen, "no provider fits (fi_getinfo)", r);
	if (reads_on(e->info))
		ask_reads(e, node);
	else if (strcmp(e->info->fabric_attr->prov_name, "shm") != 0)
		ask_writes(e, node);
	ask_source(e, node);
	ask_msg(e, node);
	if ((r = uls_fab.fabric(e->info->fabric_attr, &e->fabric, NULL)))
		return fail(e, why, wlen, "fi_fabric", r);
	if ((r = fi_domain(e->fabric, e->info, &e->domain, NULL)))
		return fail(e, why, wlen, "fi_domain", r);
	if ((r = open_cq(e)))
		return fail(e, why, wlen, "fi_cq_open", r);
	struct fi_av_attr av = {.type = FI_AV_TABLE};
	if ((r = fi_av_open(e->domain, &av, &e->av, NULL)))
		return fail(e, why, wlen, "fi_av_open", r);
	if ((r = fi_endpoint(e->domain, e->info, &e->ep, NULL)))
		return fail(e, why, wlen, "fi_endpoint", r);
	if ((r = fi_ep_bind(e->ep, &e->av->fid, 0)) ||
	    (r = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)))
		return fail(e, why, wlen, "fi_ep_bind", r);
	if ((r = fi_enable(e->ep)))
		return fail(e, why, wlen, "fi_enable", r);
	e->addr_len = sizeof(e->addr);
	if ((r = fi_getname(&e->ep->fid, e->addr, &e->addr_len)))
		return fail(e, why, wlen, "fi_getname", r);
	snprintf(e->prov, sizeof(e->prov), "%s", e->info->fabric_attr->prov_name);
	/* shm places an injected message in the peer's queue within the call; elsewhere
	 * (tcp, rxm) it may wait in the provider for progress, which only a posted send's
	 * count (fab.tx_posted) makes happen before the program sleeps: posted there. */
	if (strcmp(e->prov, "shm") == 0)
		e->inject_size = e->info->tx_attr->inject_size;
	snprintf(e->fabric_name, sizeof(e->fabric_name), "%s", e->info->fabric_attr->name);
	uls_inside_end();
	return 0;
}

static void close_fid(struct fid *f)
{
	if (f)
		fi_close(f);
}

void uls_fab_ep_close(struct uls_fab_ep *e)
{
	uls_inside_begin();
	close_fid(e->ep ? &e->ep->fid : NULL);
	close_fid(e->av ? &e->av->fid : NULL);
	close_fid(e->cq ? &e->cq->fid : NULL);
	close_fid(e->domain ? &e->domain->fid : NULL);
	close_fid(e->fabric ? &e->fabric->fid : NULL);
	if (e->info)
		uls_fab.freeinfo(e->info);
	uls_inside_end();
	memset(e, 0, sizeof(*e));
	e->wait_fd = -1;
}

int uls_fab_ep_insert(struct uls_fab_ep *e, const void *addr, size_t len, fi_addr_t *out)
{
	int r;

	if (len == 0 || len > ULS_FAB_ADDR_MAX)
		return -FI_EINVAL;
	uls_inside_begin();
	r = fi_av_insert(e->av, addr, 1, out, 0, NULL);
	uls_inside_end();
	return r == 1 ? 0 : (r < 0 ? r : -FI_EINVAL);
}

ssize_t uls_fab_ep_tsend(struct uls_fab_ep *e, const void *buf, size_t len, void *desc,
			 fi_addr_t dest, uint64_t tag, struct fi_context *ctx)
{
	uls_inside_begin();
	ssize_t r = fi_tsend(e->ep, buf, len, desc, dest, tag, ctx);
	uls_inside_end();
	return r;
}

ssize_t uls_fab_ep_trecv(struct uls_fab_ep *e, void *buf, size_t len, void *desc,
			 fi_addr_t src, uint64_t tag, uint64_t ignore, struct fi_context *ctx)
{
	uls_inside_begin();
	ssize_t r = fi_trecv(e->ep, buf, len, desc, src, tag, ignore, ctx);
	uls_inside_end();
	return r;
}

ssize_t uls_fab_ep_send(struct uls_fab_ep *e, const void *buf, size_t len, void *desc,
			fi_addr_t dest, struct fi_context *ctx)
{
	uls_inside_begin();
	ssize_t r = fi_send(e->ep, buf, len, desc, dest, ctx);
	uls_inside_end();
	return r;
}

ssize_t uls_fab_ep_inject(struct uls_fab_ep *e, const void *buf, size_t len, fi_addr_t dest,
			  int tagged, uint64_t tag)
{
	uls_inside_begin();
	ssize_t r = tagged ? fi_tinject(e->ep, buf, len, dest, tag) : fi_inject(e->ep, buf, len, dest);
	uls_inside_end();
	return r;
}

ssize_t uls_fab_ep_recv(struct uls_fab_ep *e, void *buf, size_t len, void *desc,
			fi_addr_t src, struct fi_context *ctx)
{
	uls_inside_begin();
	ssize_t r = fi_recv(e->ep, buf, len, desc, src, ctx);
	uls_inside_end();
	return r;
}

int uls_fab_ep_mr_reg(struct uls_fab_ep *e, void *buf, size_t len, uint64_t access,
		      uint64_t want_key, struct fid_mr **mr, uint64_t *key, uint64_t *addr)
{
	uint64_t mode = e->info->domain_attr->mr_mode;
	int r;

	uls_inside_begin();
	r = fi_mr_reg(e->domain, buf, len, access, 0, want_key, 0, mr, NULL);
	if (r == 0 && (mode & FI_MR_ENDPOINT) &&
	    ((r = fi_mr_bind(*mr, &e->ep->fid, 0)) || (r = fi_mr_enable(*mr)))) {
		fi_close(&(*mr)->fid);
		*mr = NULL;
	}
	if (r == 0) {
		*key = fi_mr_key(*mr);
		*addr = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
	}
	uls_inside_end();
	return r;
}

void uls_fab_ep_mr_close(struct fid_mr *mr)
{
	if (!mr)
		return;
	uls_inside_begin();
	fi_close(&mr->fid);
	uls_inside_end();
}

ssize_t uls_fab_ep_read(struct uls_fab_ep *e, const struct iovec *local, size_t nl,
			const struct fi_rma_iov *remote, size_t nr, fi_addr_t src,
			struct fi_context *ctx)
{
	struct fi_msg_rma m = {.msg_iov = local, .iov_count = nl, .addr = src,
			       .rma_iov = remote, .rma_iov_count = nr, .context = ctx};

	uls_inside_begin();
	ssize_t r = fi_readmsg(e->ep, &m, FI_COMPLETION);
	uls_inside_end();
	return r;
}

ssize_t uls_fab_ep_write(struct uls_fab_ep *e, const void *buf, size_t len, fi_addr_t dest,
			 uint64_t addr, uint64_t key, struct fi_context *ctx)
{
	uls_inside_begin();
	ssize_t r = fi_write(e->ep, buf, len, NULL, dest, addr, key, ctx);
	uls_inside_end();
	return r;
}

ssize_t uls_fab_ep_poll(struct uls_fab_ep *e, struct fi_cq_tagged_entry *out, size_t n,
			fi_addr_t *src, void **err_ctx)
{
	uls_inside_begin();
	ssize_t r = e->source && src ? fi_cq_readfrom(e->cq, out, n, src) : fi_cq_read(e->cq, out, n);
	if (r == -FI_EAGAIN) {
		r = 0;
	} else if (r == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		if (fi_cq_readerr(e->cq, &err, 0) == 1) {
			/* Some providers store the error negative (shm's failed RMA): a count
			 * must never come out of an error entry. */
			int code = err.err < 0 ? -err.err : err.err;
			*err_ctx = err.op_context;
			r = -(ssize_t)(code ? code : FI_EOTHER);
		}
	}
	uls_inside_end();
	return r;
}

int uls_fab_ep_wait(struct uls_fab_ep *e, int timeout_ms)
{
	struct fid *f = &e->cq->fid;
	int r;

	if (e->wait_fd < 0)
		return -FI_ENOSYS;
	uls_inside_begin();
	/* The provider may hold completions the descriptor does not show: it says so here. */
	r = fi_trywait(e->fabric, &f, 1);
	if (r == 0) {
		struct pollfd p = {.fd = e->wait_fd, .events = POLLIN};
		r = uls_libc.poll(&p, 1, timeout_ms);
		r = r < 0 ? -errno : r > 0;
	} else if (r == -FI_EAGAIN) {
		r = 1;
	}
	uls_inside_end();
	return r;
}
