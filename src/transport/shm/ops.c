/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory transport's operations table (core/transport.h). The operations are
 * still implemented in core/conn_io.c (the data path, the switch, wake-ups, readiness) and
 * core/revert.c (moving back to kernel TCP, protocol.md section 8).
 */
#include "../../core/transport.h"
#include "shm.h"

const struct uls_transport_ops uls_shm_transport = {
	.name = "shm",
	.send = uls_shm_send,
	.recv = uls_shm_recv,
	.shutdown = uls_shm_shutdown,
	.kernel_parts = uls_shm_kernel_parts,
	.ready = uls_shm_ready,
	.arm = uls_shm_arm,
	.drain = uls_shm_drain,
	.sleep_recv = uls_shm_sleep_recv,
	.gen = uls_shm_gen,
	.inq = uls_shm_inq,
	.outq = uls_shm_outq,
	.atmark = uls_shm_atmark,
	.revert = uls_shm_revert,
	.tx_to_kernel = uls_shm_tx_to_kernel,
	.async = uls_shm_async,
};
