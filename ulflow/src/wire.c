/* SPDX-License-Identifier: MIT */
#include "wire.h"

#include <endian.h>
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

int ulf_read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int writev_full(int fd, struct iovec *iov, int cnt)
{
	while (cnt > 0) {
		ssize_t w = writev(fd, iov, cnt);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (cnt > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

int ulf_write_full(int fd, const void *buf, size_t n)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };

	return writev_full(fd, &iov, 1);
}

int ulf_wire_send(int fd, unsigned type, uint64_t tag, const void *payload, uint32_t len)
{
	struct ulf_frame h = {
		.magic_type = htole32(ULF_WIRE_MAGIC << 8 | (type & 0xff)),
		.len = htole32(len),
		.tag = htole64(tag),
	};
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = (void *)payload, .iov_len = len },
	};

	return writev_full(fd, iov, len ? 2 : 1);
}

int ulf_wire_recv_hdr(int fd, unsigned *type, uint32_t *len, uint64_t *tag)
{
	struct ulf_frame h;
	int rc = ulf_read_full(fd, &h, sizeof(h));
	uint32_t mt;

	if (rc < 0)
		return rc;
	mt = le32toh(h.magic_type);
	/* The peer is untrusted: a stray connection must not make us allocate or misparse. */
	if (mt >> 8 != ULF_WIRE_MAGIC || le32toh(h.len) > ULF_WIRE_MAX)
		return -EPROTO;
	*type = mt & 0xff;
	*len = le32toh(h.len);
	*tag = le64toh(h.tag);
	return 0;
}

int ulf_wire_recv(int fd, unsigned *type, uint64_t *tag, void *buf, uint32_t cap,
		  uint32_t *len)
{
	int rc = ulf_wire_recv_hdr(fd, type, len, tag);

	if (rc < 0)
		return rc;
	if (*len > cap)
		return -EMSGSIZE;
	return ulf_read_full(fd, buf, *len);
}
