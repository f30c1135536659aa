/* SPDX-License-Identifier: MIT */
/* The transport table (core/transport.h), built from the list in list.h. */
#include <stddef.h>

#include "../core/transport.h"

#define ULS_TRANSPORT(name) extern const struct uls_transport_ops uls_##name##_transport;
#include "list.h"
#undef ULS_TRANSPORT

const struct uls_transport_ops *const uls_transports[] = {
#define ULS_TRANSPORT(name) &uls_##name##_transport,
#include "list.h"
#undef ULS_TRANSPORT
	NULL,
};
