/* SPDX-License-Identifier: MIT */
#include "trust.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/xattr.h>

#include "config.h"

/* One entry of the kernel's ACL blob (system.posix_acl_access, version 2). */
struct acl_entry {
	uint16_t tag, perm;
	uint32_t id;
};

#define ACL_USER_OBJ 0x01
#define ACL_USER 0x02
#define ACL_GROUP_OBJ 0x04
#define ACL_MASK 0x10
#define ACL_OTHER 0x20
#define ACL_NO_ID UINT32_MAX

int uls_trust_grant(int fd, unsigned perm)
{
	struct acl_entry e[ULS_MAX_TRUSTED + 4];
	uint8_t blob[4 + sizeof(e)];
	uint32_t version = 2;
	int n = 0;

	if (uls_cfg.ntrusted == 0)
		return 0;
	e[n++] = (struct acl_entry){ACL_USER_OBJ, 6, ACL_NO_ID};
	for (int i = 0; i < uls_cfg.ntrusted; i++)
		if (uls_cfg.trusted[i] != uls_uid())
			e[n++] = (struct acl_entry){ACL_USER, (uint16_t)perm, (uint32_t)uls_cfg.trusted[i]};
	/* The kernel wants named users sorted by id (entry 0 is the owner's). */
	for (int i = 2; i < n; i++)
		for (int j = i; j > 1 && e[j].id < e[j - 1].id; j--) {
			struct acl_entry t = e[j];
			e[j] = e[j - 1];
			e[j - 1] = t;
		}
	e[n++] = (struct acl_entry){ACL_GROUP_OBJ, 0, ACL_NO_ID};
	e[n++] = (struct acl_entry){ACL_MASK, (uint16_t)perm, ACL_NO_ID};
	e[n++] = (struct acl_entry){ACL_OTHER, 0, ACL_NO_ID};
	memcpy(blob, &version, 4);
	memcpy(blob + 4, e, (size_t)n * sizeof(e[0]));
	if (fsetxattr(fd, "system.posix_acl_access", blob, 4 + (size_t)n * sizeof(e[0]), 0) < 0)
		return -errno;
	return 0;
}
