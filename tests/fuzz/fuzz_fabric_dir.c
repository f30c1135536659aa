/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the fabric directory's parsers (src/transport/fabric/dir.h): the
 * bytes a stranger sends fabricd (HELLO), a local process sends it (REG), and fabricd or
 * whatever holds its port sends a client (BANNER, OFFER, NO).
 *
 * The input is one message as read, any length. Each parser takes it; none may crash or
 * read past it (AddressSanitizer). Every message has one encoding (reserved bytes, string
 * padding and address padding all zero), so whatever a parser accepts must pack back to
 * exactly the input, and the header check must agree with the parser on type and length.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/fabric/dir.h"

static void same(const uint8_t *in, size_t n, const uint8_t *out, int len)
{
	if (len < 0 || (size_t)len != n || memcmp(in, out, n) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t out[ULS_FAB_DIR_MAX_LEN];
	struct uls_fab_banner b;
	struct uls_fab_hello h;
	struct uls_fab_where w;
	struct uls_fab_reg r;
	uint32_t reason;
	uint8_t type = 0;
	size_t len = 0;
	int ok = 0, hdr;

	/* A copy of exactly size bytes, so that ASan catches any read past the message. */
	uint8_t *in = malloc(size ? size : 1);
	if (!in)
		return 0;
	memcpy(in, data, size);
	hdr = uls_fab_dir_header(in, size, &type, &len);
	if (uls_fab_banner_parse(in, size, &b) == 0) {
		same(in, size, out, uls_fab_banner_pack(out, &b));
		ok = ULS_FAB_DIR_BANNER;
	}
	if (uls_fab_hello_parse(in, size, &h) == 0) {
		same(in, size, out, uls_fab_hello_pack(out, &h));
		ok = ULS_FAB_DIR_HELLO;
	}
	if (uls_fab_offer_parse(in, size, &w) == 0) {
		same(in, size, out, uls_fab_offer_pack(out, &w));
		if (strnlen(w.provider, sizeof(w.provider)) == sizeof(w.provider) ||
		    strnlen(w.fabric, sizeof(w.fabric)) == sizeof(w.fabric) ||
		    w.addr_len > ULS_FAB_ADDR_MAX)
			abort();
		ok = ULS_FAB_DIR_OFFER;
	}
	if (uls_fab_no_parse(in, size, &reason) == 0) {
		same(in, size, out, uls_fab_no_pack(out, reason));
		ok = ULS_FAB_DIR_NO;
	}
	if (uls_fab_reg_parse(in, size, &r) == 0) {
		same(in, size, out, uls_fab_reg_pack(out, &r));
		ok = ULS_FAB_DIR_REG;
	}
	/* An accepted message has a valid header of its own type and length. */
	if (ok && (hdr != 0 || type != ok || len != size))
		abort();
	free(in);
	return 0;
}
